"""Values known only later: a judged variable must be judged as the roles will use it.

Validation renders every variable it judges before the first task, on the controller. A
template that reads something known only later, or something that changes from one rendering
to the next, would be judged as one value and used as another: facts (gathered after
validation; `ansible_facts`, `hostvars[h]['ansible_facts']`, an injected `ansible_<fact>`), the
controller's environment (`lookup('env')`: whichever shell starts the run, so a plan and the
provision after it may differ and the inventory no longer says what a node gets), a command's
output (`lookup('pipe')`, `lookup('lines')`: Ansible renders lazily, so the command runs again at
every use), a download (`lookup('url')`), the clock (`now()`) or an unseeded `random`. Such a
template is refused in every judged variable, whatever its class, directly or through the
variables it names (`fleet_models_dir: "{{ site_dir }}"`, `site_dir: "{{ lookup('env', 'HOME') }}"`),
naming host and variable and saying what to write instead. Refusal rather than a second
judgement after facts: one validation, before anything is written, is the contract.

A controller file (`lookup('file')`, `lookup('template')`, `lookup('password')`) is read when
validation renders it and stays what it was for the run: it is judged like a written value.
A value marked `!unsafe` is never rendered, so it reads nothing (the caller leaves it out).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from vllm_fleet.validation.problem import Problem, _masked, secret_path

#: The expressions of a template: `{{ ... }}` and `{% ... %}`.
_EXPRESSION = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
#: A name a template reads (not an attribute, not inside a string literal's first character).
_IDENTIFIER = re.compile(r"(?<![.\w'\"])([A-Za-z_][A-Za-z0-9_]*)")
#: Facts Ansible injects as `ansible_<fact>` where inject_facts_as_vars is on (ansible.cfg turns it
#: off, another configuration may not): the common ones.
_INJECTED_FACTS = ("env", "hostname", "fqdn", "nodename", "domain", "default_ipv4", "default_ipv6",
                   "all_ipv4_addresses", "all_ipv6_addresses", "interfaces", "distribution\\w*", "os_family",
                   "architecture", "machine", "kernel\\w*", "memtotal_mb", "memfree_mb", "memory_mb",
                   "processor\\w*", "devices", "mounts", "date_time", "local", "user_\\w+", "lsb", "system",
                   "pkg_mgr", "service_mgr", "virtualization_\\w+", "cmdline", "proc_cmdline", "uptime_seconds")
_LOOKUP = r"\b(?:lookup|query|q)\s*\(\s*['\"](?:ansible\.builtin\.|community\.general\.)?{}['\"]"
_WRITE_IT = ("the value itself, written in the inventory (a secret as `!vault` or with vllm-fleet --secrets FILE) or "
             "given at run time with -e NAME=VALUE: both are judged as the roles use them")
#: What a template may read that is known only later: (pattern, what it reads, why, what to write instead).
LATER: tuple[tuple[re.Pattern, str, str, str], ...] = (
    (re.compile(r"\bansible_facts\b"), "ansible_facts",
     "facts are gathered after validation, so the value a fact gives would never be judged",
     _WRITE_IT + "; an option the role derives from facts when unset: leave it unset"),
    (re.compile(r"\bansible_(?:" + "|".join(_INJECTED_FACTS) + r")\b"), "a fact (ansible_<fact>)",
     "facts are gathered after validation, so the value a fact gives would never be judged",
     _WRITE_IT + "; an option the role derives from facts when unset: leave it unset"),
    (re.compile(_LOOKUP.format("env")), "lookup('env')",
     "the environment of whichever shell starts the run: the inventory no longer says what a node gets, and a "
     "plan and the provision after it may differ",
     _WRITE_IT),
    (re.compile(_LOOKUP.format("(?:pipe|lines)")), "a command's output (lookup('pipe'))",
     "Ansible renders a value at every use, so the command runs again each time and the value judged need not "
     "be the value used", _WRITE_IT),
    (re.compile(_LOOKUP.format("url")), "a download (lookup('url'))",
     "it is fetched again at every use, so the value judged need not be the value used", _WRITE_IT),
    (re.compile(r"\bnow\s*\("), "the clock (now())",
     "it is read again at every use, so the value judged is not the value used", _WRITE_IT),
    (re.compile(r"\|\s*(?:ansible\.builtin\.)?random\b(?!\s*\([^)]*\bseed\s*=)"), "an unseeded random",
     "it is drawn again at every use, so the value judged is not the value used",
     _WRITE_IT + ", or random(seed=inventory_hostname), which gives one value per host"),
)


def _templates(value: Any, path: tuple):
    """(path, text) of every template string under `value`."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _templates(v, path + (str(k),))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _templates(v, path + (i,))
    elif isinstance(value, str) and ("{{" in value or "{%" in value):
        yield path, value


def _reads(text: str, raw: dict[str, Any], seen: set[str]) -> tuple[int, list[str]] | None:
    """(index in LATER, the variables it goes through) of the first thing known only later that
    the template `text` reads, directly or through the variables of `raw` it names; None if none."""
    expressions = " ".join(a or b for a, b in _EXPRESSION.findall(text))
    for i, (pattern, *_rest) in enumerate(LATER):
        if pattern.search(expressions):
            return i, []
    for name in _IDENTIFIER.findall(expressions):
        if name in seen or name not in raw:
            continue
        seen.add(name)
        for _path, inner in _templates(raw[name], ()):
            found = _reads(inner, raw, seen)
            if found:
                return found[0], [name, *found[1]]
    return None


def later_reads(raw: dict[str, Any], names: Iterable[str]) -> dict[str, str]:
    """For each variable of `names` whose value (in `raw`: the host's variables as written, their
    templates unrendered, `!unsafe` values left out) reads something known only later, directly or
    through the variables it names: the sentence that refuses it (without host), by variable."""
    out = {}
    for name in names:
        for path, text in _templates(raw.get(name), (name,)):
            found = _reads(text, raw, {name})
            if found is None:
                continue
            index, through = found
            _pattern, what, why, accepted = LATER[index]
            secret = secret_path(path)
            via = f" through {' -> '.join(through)}" if through else ""
            problem = Problem(path, text, f"reads {what}{via}, known only later: {why}", accepted)
            out[name] = (f"{problem.variable} = {_masked(text)}: {problem.why}; accepted: {accepted}" if secret
                         else str(problem))
            break
    return out


def later_problems(later: dict[str, dict[str, str]], hosts: list[str]) -> list[str]:
    """The refusals of `later_reads` (host -> variable -> sentence) for the hosts of a run."""
    return [f"host {host}: {sentence}" for host in sorted(hosts)
            for _name, sentence in sorted((later.get(host) or {}).items())]
