"""A fuzzer over the whole inventory (issue 19, part 3): hostile values, by class of value, for
every leaf of every host's variables, every role variable and every `fleet_*` schema property
the example leaves unset, each judged against `vllm_fleet.validation.validate_inventory`.

Used by tests/unit/test_fuzz_inventory.py. The generator is a plain enumeration with a seeded
`random` for sampling, not hypothesis: the mutations are a fixed catalogue (every leaf x the
hostile values of its class), the interesting part is the judging, and a deterministic list
makes each CI run's numbers comparable with the last one and its got-through examples
reproducible by label, without hypothesis' example database or shrinking.

Verdicts of one mutation:
- stopped: validate_inventory returns problems and one names the mutated variable (its top-level
  name, its key path such as `fleet_models[0].path`, or its leaf key such as `path`);
- got through: no problem, or none naming it (a crash of validation counts here too);
- leaked: a problem shows a secret of the mutated inventory (raw, repr, JSON or URL-quoted);
- accepted, harmless: got through, but the `plan` of the mutated inventory passes every checker
  and has no control character and no line the inventory did not ask for (a capped number of
  plan runs per CI run; the others stay "got through").
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import resource
import shutil
import subprocess
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import EXAMPLE_DIFFERENCES, load_module

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "inventories" / "example"
SEED = 19003
#: Classes whose harm would show in the rendered files (a control character, a word split or
#: quoted wrongly, an option rendered twice). The others' harm is what the node's tasks do with a
#: faithfully rendered value (take over /etc, run as root, listen on port 22, a 3-character key,
#: 10**9 devices): a plan that renders them cleanly shows nothing, so they are never judged
#: harmless by a plan run.
PLAN_CLASSES = ("control_chars", "names", "wrong_type", "spellings")
CLASSES = ("wrong_type", "control_chars", "numbers", "ports", "paths", "secrets", "accounts", "names",
           "formats", "disabled_model", "spellings")
#: Hostile values of each format class (vllm_fleet/validation/classes.py), for a variable declared of it.
FORMATS = {"address": ["not-an-address", "300.1.1.1"], "duration": ["five minutes", "10 m"],
           "mode": ["0999", "rwxr-x---"], "url": ["not a url", "ftp://mirror.example/x"],
           "urls": [["not a url"]], "env": [{"BAD-KEY": "v"}, {"OK": {"nested": 1}}]}

# ------------------------------------------------------------------ the base inventory

#: What the fuzzer adds to the example so that the router and monitoring roles have a host (the
#: example declares both groups empty) and their entries are valid: models listening beyond
#: loopback (behind an API key, which also gives the leak check a secret in every run).
ROUTER, MONITOR, MIRROR = "router-01", "mon-01", "mirror-01"
BASE_API_KEY = "fz-api-key-7Qw3Rt9Yp2Zx"
FLEET_EXTRA = {"fleet_serve_listen": "0.0.0.0", "fleet_serve_api_key": BASE_API_KEY}
EXTRA_HOSTS = {
    "router": {ROUTER: {"ansible_host": "192.0.2.5",
                        "router_models": [
                            {"name": "gpt-oss-20b", "port": 9000, "allow_differences": EXAMPLE_DIFFERENCES},
                            {"name": "bge-m3", "port": 9001, "allow_differences": EXAMPLE_DIFFERENCES},
                            {"name": "qwen3-0.6b", "port": 9002, "policy": "round_robin"}]}},
    "monitoring": {MONITOR: {"ansible_host": "192.0.2.6"}},
    "mirror": {MIRROR: {"ansible_host": "192.0.2.7"}},
}


def write_base_inventory(dest: Path) -> Path:
    """The example inventory plus FLEET_EXTRA (group_vars/fleet) and EXTRA_HOSTS, at `dest`."""
    shutil.copytree(EXAMPLE, dest)
    (dest / "group_vars" / "fleet").mkdir(exist_ok=True)
    (dest / "group_vars" / "fleet" / "fuzz.yml").write_text(yaml.safe_dump(FLEET_EXTRA))
    doc = yaml.safe_load((dest / "hosts.yml").read_text())
    for group, hosts in EXTRA_HOSTS.items():
        doc["all"]["children"][group]["hosts"] = copy.deepcopy(hosts)
    (dest / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def _fleet_filters():
    """filter_plugins/fleet.py as a module: its `_validated_vars` is the selection the
    validate play hands to validation; the fuzzer uses that very function."""
    return load_module(ROOT / "filter_plugins" / "fleet.py", "_fuzz_fleet_filters")


def load_inventory(path: Path) -> dict[str, dict]:
    """Every host of the inventory at `path` -> the variables validation reads, as plain values:
    Ansible's own InventoryManager and VariableManager merge them (group_vars, host_vars, group
    order), filter_plugins/fleet.py's `_validated_vars` selects them."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory)
    hostvars = {h.name: variables.get_vars(host=h, include_hostvars=False) for h in inventory.get_hosts()}
    filters = _fleet_filters()
    # The filter leaves the top-level names as Ansible's tagged strings: plain ones here.
    return {h: {k.encode().decode(): v for k, v in filters._validated_vars(hostvars, h).items()}
            for h in hostvars}


# ------------------------------------------------------------------ mutations

@dataclass
class Mutation:
    cls: str
    host: str
    path: tuple          # top-level variable, then keys / indexes
    value: Any
    #: further (host, path, value) settings that make the case (e.g. ansible_user for the service user)
    extra: list = field(default_factory=list)
    #: names a problem may use for the mutated variable, besides those of `path`
    names: tuple = ()
    note: str = ""

    @property
    def var(self) -> str:
        return var_path(self.path)

    @property
    def label(self) -> str:
        shown = repr(self.value)
        if len(shown) > 70:
            shown = shown[:67] + "..."
        extra = "".join(f"; {h} {var_path(p)} = {v!r}" for h, p, v in self.extra)
        return f"{self.host} {self.var} = {shown}{extra}" + (f" ({self.note})" if self.note else "")

    def accepted_names(self) -> set[str]:
        names = {str(self.path[0]), self.var, *self.names}
        leaf = next((p for p in reversed(self.path) if isinstance(p, str)), None)
        if leaf:
            names.add(leaf)
            # a problem about a model option may say serve.<key> or --<key>
            names.add(leaf.replace("_", "-"))
        for _, p, _ in self.extra:
            names.update({str(p[0]), var_path(p)})
        return names

    def hosts(self) -> set[str]:
        return {self.host, *(h for h, _, _ in self.extra)}


def var_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_MISSING = object()


def _set(root: dict, path: tuple, value) -> None:
    node = root
    for key in path[:-1]:
        if isinstance(node, dict) and key not in node:
            node[key] = {}  # a key the example leaves out (a model's serve)
        node = node[key]
    if value is _MISSING:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def _get(root, path: tuple):
    node = root
    for key in path:
        node = node[key]
    return node


def apply(base: dict[str, dict], m: Mutation) -> dict[str, dict]:
    """The inventory with `m` applied; `base` is not changed (touched variables are deep-copied)."""
    out = dict(base)
    for host, path, value in [(m.host, m.path, m.value), *m.extra]:
        if out[host] is base[host]:
            out[host] = dict(base[host])
        top = path[0]
        if top in base[host] and out[host][top] is base[host][top]:
            out[host][top] = copy.deepcopy(base[host][top])
        _set(out[host], path, copy.deepcopy(value))
    return out


def mutated_variables(base: dict[str, dict], m: Mutation) -> dict[str, dict]:
    """host -> {top-level variable: its whole mutated value}: what host_vars/<host>.yml must say."""
    mutated = apply(base, m)
    out: dict[str, dict] = {}
    for host, path, _ in [(m.host, m.path, m.value), *m.extra]:
        top = path[0]
        if top in mutated[host]:
            out.setdefault(host, {})[top] = mutated[host][top]
    return out


# ---- classes of names

SECRET_NAME = re.compile(r"api_?key|passw|secret|credential|private_key|access_key|token", re.I)
NOT_SECRET = re.compile(r"tokeniz|tiktoken|(max_|num_|batched|budget|count|_len).*tokens|tokens.*(_len|count)", re.I)
PATH_NAME = re.compile(r"(^|_)(path|dir|file|prefix|venv|interpreter|script|spec|config)$|_python$|_cdi_spec$")
PORT_NAME = re.compile(r"(^|_)port$")
NAME_NAME = re.compile(r"(^|_)name$")
ACCOUNT_NAME = re.compile(r"(^|_)(user|group)$|^ansible_user$|_groups$")
#: Numbers that may have a fraction (sizes in GB, fractions): a float there is no wrong type.
FRACTIONAL = re.compile(r"_gb$|swap_space|utilization|threshold|_fraction$")
URL_CREDENTIALS = re.compile(r"://\s*([^/@:\s]+):([^/@\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not NOT_SECRET.search(name)


def _leaf_key(path: tuple) -> str:
    return next((str(p) for p in reversed(path) if isinstance(p, str)), "")


CONTROL = {"newline": "\n", "carriage return": "\r", "NUL": "\x00", "tab": "\t", "escape": "\x1b",
           "bidi override": "\u202e"}
PATHS = ["/etc", "/", "/usr/lib/x", "relative", "/a/../b", "/srv//x/"]
SECRETS = ["", "abc", "s3cr3t-fuzz-value\n", "s3cr3t fuzz value"]
NAMES = ["has space", "has/slash", "bidi\u202ename", "n" * 300]
#: (value, variable or its class's suffix) that are hostile elsewhere but legal there, and why:
#: no minimum free disk (0 GB) may be asked for; a 1 GB Ray object store is an ordinary size;
#: no restart (0) is a legal bound.
#: no image per prompt (limit_mm_per_prompt.image: 0) turns a modality off.
#: a tolerance of 0 percent or 0 points (fleet_canary_*_percent, *_points: the canary may not fall at all)
#: is strict, not wrong.
LEGAL_NUMBERS = {(0, "_gb"), (10**9, "_bytes"), (0, "_restarts"), (0, "image"), (0, "_percent"), (0, "_points")}


def _suffix(key: str) -> str:
    return "_" + key.rsplit("_", 1)[-1] if "_" in key else key


def secrets_of(hosts: dict[str, dict]) -> set[str]:
    """Every secret value of an inventory: strings under names like secrets, and passwords
    inside URLs of any variable."""
    found: set[str] = set()

    def walk(value, secret):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, secret or is_secret_name(str(k)))
        elif isinstance(value, list):
            for v in value:
                walk(v, secret)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if secret:
                found.add(str(value))  # a key given as a number is still a key
        elif isinstance(value, str):
            if secret and value:
                found.add(value)
            for _, password in URL_CREDENTIALS.findall(value):
                found.add(urllib.parse.unquote(password))

    for host_vars in hosts.values():
        walk(host_vars, False)
    return found


def leaks(problems: list[str], secrets: set[str]) -> list[str]:
    """The secrets that a problem shows, in any printed form."""
    text = "\n".join(problems)
    shown = []
    for secret in secrets:
        forms = {repr(secret), json.dumps(secret), repr(secret.strip()), json.dumps(secret.strip())}
        if len(secret.strip()) >= 6:  # shorter ones only in quotes, else any word would match
            forms |= {secret, secret.strip(), urllib.parse.quote(secret), urllib.parse.quote(secret, safe=""),
                      json.dumps(secret)[1:-1]}
        if any(f and f in text for f in forms if f not in ("''", '""')):
            shown.append(secret)
    return shown


def names_variable(problem: str, names: set[str]) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", problem) for n in names if n)


# ---- the generator

class Generator:
    """Every mutation of the base inventory, in a fixed order."""

    def __init__(self, base: dict[str, dict]):
        from vllm_fleet import validation
        from vllm_fleet.validation import classes

        self.base = base
        self.validation = validation
        self.classes = classes
        self.fleet = sorted(h for h, v in base.items() if "fleet" in (v.get("group_names") or []))
        self.out: list[Mutation] = []
        # (leaf key, value) pairs the example itself uses: such a value is valid for that key
        self.seen: set[tuple[str, str]] = set()
        for host_vars in base.values():
            self._collect(host_vars, ())

    def _collect(self, value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                self._collect(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._collect(v, path + (i,))
        self.seen.add((_leaf_key(path), json.dumps(value, sort_keys=True, default=str)))

    def add(self, cls, host, path, value, **kw):
        option = self.validation.role_options().get(path[0]) if len(path) == 1 else None
        if option and "default" in option[1] and value == option[1]["default"] and type(value) is type(
                option[1]["default"]):
            return  # the role's own default: valid
        if kw.get("extra") is None and (_leaf_key(path), json.dumps(value, sort_keys=True, default=str)) in self.seen:
            return  # the example uses this very value for this key: valid
        kw = {k: v for k, v in kw.items() if v is not None}
        self.out.append(Mutation(cls, host, tuple(path), value, **kw))

    def all(self) -> list[Mutation]:
        for host in sorted(self.base):
            for name in sorted(self.base[host]):
                if name == "group_names":
                    continue
                self._walk(host, (name,), self.base[host][name])
        self._role_variables()
        self._unset_schema_properties()
        self._cross()
        return self.out

    # -- every leaf
    def _walk(self, host, path, value):
        if isinstance(value, dict) and value:
            self._container(host, path, value)
            for k, v in value.items():
                self._walk(host, path + (k,), v)
        elif isinstance(value, list) and value:
            self._container(host, path, value)
            for i, v in enumerate(value):
                self._walk(host, path + (i,), v)
        else:
            self._leaf(host, path, value)

    def _serve_or_env(self, path) -> bool:
        """Under a serve mapping or an environment: values are command-line or environment
        text by nature (a number given as a string renders the same), and null means unset."""
        return any(isinstance(p, str) and (p in ("serve", "fleet_serve_defaults", "env", "fleet_serve_env",
                                                 "vllm_service_extra_env") or p.endswith("_env"))
                   for p in path[:-1]) or path[0] in ("fleet_serve_env", "fleet_serve_defaults")

    def _container(self, host, path, value):
        """A list or mapping replaced by the wrong kind of value."""
        if isinstance(value, dict):
            for bad in ("a string", ["a", "list"]):
                self.add("wrong_type", host, path, bad)
        else:
            for bad in ("a string", {"a": "mapping"}):
                self.add("wrong_type", host, path, bad)

    def _leaf(self, host, path, value):
        key = _leaf_key(path)
        loose = self._serve_or_env(path)
        # wrong type
        if isinstance(value, bool):
            for bad in ("false", "yes", "true" if not value else "no"):
                self.add("wrong_type", host, path, bad)
        elif isinstance(value, int):
            if not loose:
                self.add("wrong_type", host, path, str(value))
            self.add("wrong_type", host, path, [value])
        elif isinstance(value, float):
            if not loose:
                self.add("wrong_type", host, path, str(value))
        elif isinstance(value, str):
            if key != "served_model_name":  # vLLM's --served-model-name takes one name or several
                self.add("wrong_type", host, path, [value])
            self.add("wrong_type", host, path, {"k": value})
        if not loose and value is not None:
            self.add("wrong_type", host, path, None)
        # control characters in strings
        if isinstance(value, str) and not (is_secret_name(key) or any(isinstance(p, str) and is_secret_name(p)
                                                                      for p in path)):
            middle = len(value) // 2
            for what, ch in CONTROL.items():
                self.add("control_chars", host, path, value[:middle] + ch + value[middle:], note=what)
            self.add("control_chars", host, path, value + "\n", note="trailing newline")
        # numbers
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for bad in (-1, 0, 10**9):
                if (bad, key) in LEGAL_NUMBERS or (bad, _suffix(key)) in LEGAL_NUMBERS:
                    continue
                self.add("numbers", host, path, bad)
            if isinstance(value, int) and not FRACTIONAL.search(key):
                self.add("numbers", host, path, value + 0.5, note="a float for an integer")
                self.add("numbers", host, path, float(value), note="a whole float for an integer")
            self._number_forms(host, path)

        # the class: a role option's declared one (roles/<layer>/<role>/meta/classes.yml), a key's by its name
        cls = self._declared(path)
        if (cls == "port") if cls else PORT_NAME.search(key):
            self._ports(host, path)
        if ((cls in ("path", "executable")) if cls else PATH_NAME.search(key)) and isinstance(value, str):
            self._paths(host, path)
        for bad in FORMATS.get(cls or "", []):
            self.add("formats", host, path, bad)
        if any(isinstance(p, str) and is_secret_name(p) for p in path):
            self._secrets(host, path)
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            with_credentials = value.replace("://", "://user:s3cretpass@", 1)
            self.add("secrets", host, path, with_credentials, note="credentials in a URL")
            self.add("secrets", host, path, value.replace("://", "://ghp_fuzzTokenAsTheUserPart0123@", 1),
                     note="a token as a URL's user")
            self.add("secrets", host, path, value + ("&" if "?" in value else "?") + "access_token=fuzzQueryToken0123",
                     note="a token in a URL's query")
            # and a URL that is wrong besides: the problem that quotes it must not show the password
            self.add("secrets", host, path, with_credentials.replace("://", ":// ", 1) + " x",
                     note="credentials in a URL with spaces")
        if ((cls == "name") if cls else NAME_NAME.search(key)) and isinstance(value, str):
            self._names(host, path, value)
        if key == "fleet_service_user":
            self._accounts(host, path)

    def _declared(self, path) -> str | None:
        """The declared class of a top-level role option (None for a key inside a structure)."""
        return self.classes.class_of(str(path[0])) if len(path) == 1 else None

    def _number_forms(self, host, path):
        """Every number's forms that no bound holds or no consumer means: NaN, the infinities and
        a boolean either way (in an environment, where True is the text 'True', none)."""
        for bad, what in ((float("nan"), "NaN"), (float("inf"), "infinity"), (float("-inf"), "minus infinity")):
            self.add("numbers", host, path, bad, note=what)
        if not any(isinstance(p, str) and (p == "env" or p.endswith("_env")) for p in path[:-1]):
            for bad in (True, False):
                self.add("wrong_type", host, path, bad, note="a boolean for a number")

    def _ports(self, host, path):
        for bad in (22, 80, 0, 65536, -1):
            self.add("ports", host, path, bad)
        if path == ("fleet_serve_base_port",) and not self._derives_ports(host):
            return  # no model takes its port from the base here: it listens on nothing, SSH's port included
        if path == ("model_fetch_share_port",) and self.base[host].get("model_fetch_distribution") != "waves":
            return  # the share listens only when models are distributed in waves
        self.add("ports", host, path, 2222, extra=[(host, ("ansible_port",), 2222)], note="the host's ansible_port")

    def _derives_ports(self, host) -> bool:
        models = self.base[host].get("fleet_models") or []
        return "fleet" in (self.base[host].get("group_names") or []) and any(
            isinstance(m, dict) and m.get("enabled", True) and "port" not in m and "span" not in m for m in models)

    def _paths(self, host, path):
        key = _leaf_key(path)
        for bad in PATHS:
            if key == "file" and bad == "relative":
                continue  # a `file` is a bare file name, fetched from fleet_artifact_base_url: no path at all
            if (key.endswith("_python") or self._declared(path) == "executable") and bad == "/usr/lib/x":
                continue  # an interpreter the fleet runs (not writes) may live below /usr
            self.add("paths", host, path, bad)

    def _secrets(self, host, path):
        for bad in SECRETS:
            self.add("secrets", host, path, bad)

    def _names(self, host, path, value):
        served = "served_model_name" in path or (path[0] == "router_models" and path[-1] == "name")
        for bad in NAMES:
            if served and bad == "has/slash":
                continue  # a served name may be a hub-style org/model, as clients ask for it
            self.add("names", host, path, bad)

    def _accounts(self, host, path):
        for bad in ("root", "daemon", "nobody", "www-data"):
            self.add("accounts", host, path, bad)
        if path == ("fleet_service_user",):
            self.add("accounts", host, path, "admin", extra=[(host, ("ansible_user",), "admin")],
                     note="the connection user")
            self.add("accounts", host, path, "admin", extra=[(host, ("ansible_ssh_user",), "admin")],
                     note="the connection user")

    # -- role variables of roles/*/meta/argument_specs.yml, on a host where the role applies
    def _role_host(self, role: str) -> str:
        if role == "router":
            return ROUTER
        if role == "monitoring":
            return MONITOR
        if role == "mirror":
            return MIRROR
        for vendor, host in (("ascend", "ascend-01"), ("metax", "metax-01"), ("musa", "musa-01"),
                             ("nvidia", "nvidia-01")):
            if role.startswith(vendor):
                return host
        return self.fleet[sum(map(ord, role)) % len(self.fleet)]

    def _role_variables(self):
        for name, (role, spec) in sorted(self.validation.role_options().items()):
            if name.startswith("fleet_"):
                continue  # the schema's: set ones are walked as leaves, unset ones below
            host = self._role_host(role)
            if name in self.base[host]:
                continue  # walked as a leaf already
            self._typed(host, (name,), spec.get("type", "str"), spec.get("elements"), spec.get("default"))

    def _typed(self, host, path, kind, elements=None, default=None):
        """Hostile values for an unset variable of a declared type and class."""
        key = _leaf_key(path)
        cls = self._declared(path) or ""
        if kind == "bool":
            for bad in ("false", "yes", "no", 1, None, ["true"]):
                self.add("wrong_type", host, path, bad)
        elif kind in ("int", "float"):
            for bad in ("8000", [1], None, {"a": 1}):
                self.add("wrong_type", host, path, bad)
            for bad in (-1, 0, 10**9) + ((1.5, 8000.0) if kind == "int" else ()):
                if (bad, key) in LEGAL_NUMBERS or (bad, _suffix(key)) in LEGAL_NUMBERS:
                    continue
                self.add("numbers", host, path, bad)
            self._number_forms(host, path)
            if cls == "port":
                self._ports(host, path)
        elif kind in ("str", "path", "raw"):
            base = default if isinstance(default, str) and default and "{{" not in default else "value"
            for bad in (None, [base], {"k": base}):
                self.add("wrong_type", host, path, bad)
            if cls != "secret":
                for what, ch in CONTROL.items():
                    self.add("control_chars", host, path, base[:1] + ch + base[1:], note=what)
                self.add("control_chars", host, path, base + "\n", note="trailing newline")
            if cls in ("path", "executable"):
                self._paths(host, path)
            if cls == "secret":
                self._secrets(host, path)
            if cls == "name":
                self._names(host, path, base)
            if cls == "account":
                for bad in ("root", "has space", "x" * 40):
                    self.add("accounts", host, path, bad)
            for bad in FORMATS.get(cls, []):
                self.add("formats", host, path, bad)
        elif kind == "list":
            for bad in ("a string", {"a": "mapping"}, [None], [["nested"]]):
                self.add("wrong_type", host, path, bad)
            if elements == "str":
                self.add("control_chars", host, path, ["item\nExecStartPre=/bin/sh"], note="newline")
                self.add("control_chars", host, path, ["item\x00"], note="NUL")
                if cls == "accounts":
                    for bad in (["root"], ["has space"], ["docker"]):
                        self.add("accounts", host, path, bad)
                for bad in FORMATS.get(cls, []):
                    self.add("formats", host, path, bad)
        elif kind == "dict":
            for bad in ("a string", ["a", "list"], None):
                self.add("wrong_type", host, path, bad)
            for bad in FORMATS.get(cls, []):
                self.add("formats", host, path, bad)
            if cls == "secrets":
                for bad in SECRETS:
                    self.add("secrets", host, path, {"huggingface": bad})
            else:
                self.add("control_chars", host, path, {"KEY": "v\nExecStartPre=/bin/sh"}, note="newline")
                self.add("control_chars", host, path, {"BAD KEY\n": "v"}, note="newline in a key")

    # -- fleet_* schema properties the example leaves unset
    def _unset_schema_properties(self):
        props = self.validation.schema()["properties"]
        options = self.validation.role_options()
        for name in sorted(props):
            for host in self.fleet:
                if name in self.base[host]:
                    continue
                kind = options.get(name, ("", {}))[1].get("type", "str")
                elements = options.get(name, ("", {}))[1].get("elements")
                self._typed(host, (name,), kind, elements)
                break  # one host each: the same variable unset on every node

    # -- cases between fields and hosts
    def _cross(self):
        b = self.base
        for host in self.fleet:
            models = b[host].get("fleet_models") or []
            acc = b[host].get("fleet_accelerator") or {}
            count = acc.get("count", 1)
            enabled = [i for i, m in enumerate(models) if m.get("enabled", True)]
            # Models whose port comes from fleet_serve_base_port (no port of their own, no span).
            derived = [i for i in enabled if "port" not in models[i] and "span" not in models[i]]
            disabled = [i for i, m in enumerate(models) if not m.get("enabled", True)]
            # derived numbers: ports beyond 65535, devices beyond the count
            if len(derived) > 1:  # with one derived port (or none), 65535 is a legal base
                # the last derived port is 65536
                self.add("numbers", host, ("fleet_serve_base_port",), 65537 - len(derived), names=("port",),
                         note="derived model ports exceed 65535", extra=[])
            self.add("numbers", host, ("fleet_serve_base_port",), 65536, names=("port",), extra=[])
            for i in enabled[:2]:
                self.add("numbers", host, ("fleet_models", i, "devices"), [count], names=("count",), extra=[],
                         note=f"device {count} of {count}")
                self.add("numbers", host, ("fleet_models", i, "devices"), [0, 0], extra=[], note="a device twice")
                self.add("numbers", host, ("fleet_accelerator", "count"), 0, extra=[])
            # ports: two models on one port; a model on the SSH port, on a port below 1024
            if len(enabled) >= 2:
                a, c = enabled[0], enabled[1]
                if "port" in models[a]:  # a derived port moves aside for an explicit one: only explicit ones clash
                    self.add("ports", host, ("fleet_models", c, "port"), models[a]["port"], extra=[],
                             note="another model's port")
                self.add("paths", host, ("fleet_models", c, "path"), models[a]["path"], extra=[],
                         note="another model's path")
                self.add("paths", host, ("fleet_models", c, "path"), models[a]["path"] + "/sub", extra=[],
                         note="nested in another model's path")
                self.add("names", host, ("fleet_models", c, "name"), models[a]["name"], extra=[],
                         note="another model's name")
                self.add("names", host, ("fleet_models", c, "serve", "served_model_name"),
                         (models[a].get("serve") or {}).get("served_model_name", models[a]["name"]), extra=[],
                         note="another model's served name")
            for i in enabled[:1]:
                self.add("ports", host, ("fleet_models", i, "port"), 22, extra=[], note="SSH")
                self.add("ports", host, ("monitoring_node_exporter_port",), 8000 if i == 0 else 8000, extra=[],
                         names=("port",), note="a model's port")
                for bad in NAMES:
                    if bad != "has/slash":  # org/model is a served name clients use
                        self.add("names", host, ("fleet_models", i, "serve", "served_model_name"), bad, extra=[])
                if "max_model_len" in (models[i].get("serve") or {}):  # alone, the hyphen spelling is legal
                    self.add("spellings", host, ("fleet_models", i, "serve", "max-model-len"), 4096, extra=[],
                             names=("max_model_len",), note="besides max_model_len")
                self.add("spellings", host, ("fleet_models", i, "serve"),
                         {**(models[i].get("serve") or {}), "max_model_len": 4096, "max-model-len": 8192},
                         extra=[], names=("max_model_len", "max-model-len"), note="both spellings")
                self.add("spellings", host, ("fleet_serve_defaults",),
                         {**(b[host].get("fleet_serve_defaults") or {}), "max_num_seqs": 8, "max-num-seqs": 16},
                         extra=[], names=("max_num_seqs", "max-num-seqs"), note="both spellings")
                self.add("secrets", host, ("fleet_models", i, "secret_env"), {"VLLM_API_KEY": "abc"}, extra=[])
                self.add("secrets", host, ("fleet_models", i, "secret_env"),
                         {"VLLM_API_KEY": "model-key-fz\nX=1"}, extra=[])
                self.add("secrets", host, ("fleet_models", i, "secret_env"), {"VLLM_API_KEY": 987654321012},
                         extra=[], note="a number")
                self.add("secrets", host, ("fleet_models", i, "secret_env"), {"BAD KEY": "model-key-fz-2"},
                         extra=[], note="a bad variable name")
                self.add("secrets", host, ("fleet_serve_api_key",), 987654321012, extra=[], note="a number")
                self.add("secrets", host, ("fleet_serve_api_key",), ["fz-list-key-123456"], extra=[])
            # a disabled model carrying a bad value is still refused
            for i in disabled[:1] or enabled[:0]:
                for sub, bad in ((("path",), "/etc"), (("path",), "relative"), (("name",), "has space"),
                                 (("port",), 65536), (("port",), 22), (("devices",), [count]),
                                 (("serve", "max_model_len"), -1), (("serve", "no_such_option"), 1),
                                 (("kind",), "ch\nat"), (("size_gb",), -1)):
                    self.add("disabled_model", host, ("fleet_models", i) + sub, bad, extra=[])
            if not disabled and models:
                # give the node a disabled copy of its first model, with a bad path
                bad_model = {**models[0], "name": "fz-disabled", "enabled": False, "path": "/etc"}
                bad_model.pop("port", None)
                self.add("disabled_model", host, ("fleet_models",), models + [bad_model], extra=[],
                         names=("path",), note="a disabled copy with path /etc")
        # the router: a model's port on its own address, an entry twice, hostile names reaching haproxy
        node = "nvidia-01" if "nvidia-01" in b else self.fleet[0]
        node_address = b[node]["ansible_host"]
        self.add("ports", ROUTER, ("router_models", 0, "port"), 8000,
                 extra=[(ROUTER, ("ansible_host",), node_address)], note=f"on {node}'s address: its model's port")
        self.add("ports", ROUTER, ("router_models", 1, "port"), 9000, extra=[], note="the other entry's port")
        self.add("ports", MONITOR, ("monitoring_prometheus_port",), 8000,
                 extra=[(MONITOR, ("ansible_host",), node_address)], note=f"on {node}'s address: its model's port")
        self.add("ports", MONITOR, ("monitoring_prometheus_port",), 22, extra=[], note="SSH")
        self.add("names", ROUTER, ("router_models", 1, "name"), "gpt-oss-20b", extra=[], note="a duplicate entry")
        models = b[node]["fleet_models"]
        for bad in [n for n in NAMES[:3] if n != "has/slash"]:  # org/model is a served name clients use
            self.add("names", ROUTER, ("router_models", 0, "name"), bad,
                     extra=[(node, ("fleet_models", 0, "serve", "served_model_name"), bad)],
                     note="served by the node under that name")


def generate(base: dict[str, dict]) -> list[Mutation]:
    """Every mutation, deduplicated by label, in a fixed order."""
    out, labels = [], set()
    for m in Generator(base).all():
        key = (m.cls, m.label)
        if key not in labels:
            labels.add(key)
            out.append(m)
    return out


def sample(mutations: list[Mutation], budget: int, seed: int = SEED) -> list[Mutation]:
    """At most `budget` mutations, every class kept whole when it fits; the big classes are
    sampled (seeded) so that every class is represented."""
    if len(mutations) <= budget:
        return mutations
    by_class: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_class.setdefault(m.cls, []).append(m)
    rng = random.Random(seed)
    chosen: list[Mutation] = []
    left = budget
    for i, (_cls, group) in enumerate(sorted(by_class.items(), key=lambda kv: len(kv[1]))):
        share = left // (len(by_class) - i)
        take = group if len(group) <= share else rng.sample(group, share)
        chosen += take
        left -= len(take)
    order = {id(m): n for n, m in enumerate(mutations)}
    return sorted(chosen, key=lambda m: order[id(m)])


# ------------------------------------------------------------------ judging

@dataclass
class Verdict:
    mutation: Mutation
    verdict: str                 # stopped | got_through | harmless
    problems: list[str]
    leaked: list[str]
    why: str = ""                # for got_through: no problem / none naming it / crash / the plan's finding
    route: str = ""              # "" the judged dict (apply), else one of ROUTES


def run_hosts(base: dict[str, dict], m: Mutation) -> list[str]:
    """The run a mutation is validated in: the hosts it touches, with the router, monitoring and
    mirror hosts (as `-l HOST:router:monitoring:mirror`). The other fleet nodes are unchanged and valid (the
    base inventory is asserted valid), and they are still read as the fleet by the router,
    monitoring and span rules (validate_inventory's all_hosts): this keeps one mutation at a
    fifth of a whole-inventory call."""
    return sorted(m.hosts() | {h for h, v in base.items()
                               if {"router", "monitoring", "mirror"} & set(v.get("group_names") or [])})


#: Address space one validation may add (a count of 10**9 devices must not take the machine's
#: memory, and CI's, with it: it fails with MemoryError, a finding, instead).
MEMORY_HEADROOM = 1536 * 2**20


@contextlib.contextmanager
def memory_cap(headroom: int = MEMORY_HEADROOM):
    """RLIMIT_AS at this process' current size + `headroom` for the block, restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    limit = size + headroom if hard == resource.RLIM_INFINITY else min(hard, size + headroom)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def judge(base: dict[str, dict], m: Mutation) -> Verdict:
    """One mutation's verdict (call it inside `memory_cap()`)."""
    from vllm_fleet import validation

    mutated = apply(base, m)
    try:
        problems = validation.validate_inventory(mutated, run_hosts(base, m))
    except (Exception, MemoryError) as exc:  # noqa: BLE001 - a crash is a finding, not the test's error
        return Verdict(m, "got_through", [], [], f"validation crashed: {type(exc).__name__}: {exc}"[:200])
    return _verdict(m, problems, secrets_of(mutated))


def _verdict(m: Mutation, problems: list[str], secrets: set[str], route: str = "") -> Verdict:
    leaked = leaks(problems, secrets)
    names = m.accepted_names()
    if any(names_variable(p, names) for p in problems):
        return Verdict(m, "stopped", problems, leaked, route=route)
    return Verdict(m, "got_through", problems, leaked,
                   "no problem" if not problems else "problems name another variable: " + problems[0][:150], route)


# ------------------------------------------------------------------ the second route of every mutation

#: How a value reaches Ansible besides the judged dict (issue 33, item 7): a host_vars file, the
#: inventory file (the host's entry, or its group's `vars:` where no file of the base sets the
#: variable: group_vars/ would win over it), an extra-vars file (-e @FILE), a secrets file (the
#: CLI's --secrets FILE: an extra-vars file the host's variable names by a template), a template
#: naming another variable of the host, and a `!vault` value (a string only).
ROUTES = ("host_vars", "inventory_vars", "extra_vars", "secrets_file", "template", "vault")
ROUTE_VAULT_PASSWORD = "fz-route-vault-password"


class _RouteLoader:
    """Ansible's DataLoader that caches only group_vars/ files (the base's, never rewritten): a
    route rewrites host_vars/, hosts.yml and the extra-vars files between two loads."""

    def __new__(cls):
        from ansible.parsing.dataloader import DataLoader

        class RouteLoader(DataLoader):
            def load_from_file(self, file_name, cache="all", **kwargs):
                keep = cache if f"{os.sep}group_vars{os.sep}" in str(file_name) else "none"
                return super().load_from_file(file_name, cache=keep, **kwargs)

        return RouteLoader()


class VaultValue(str):
    """A string dumped as `!vault |` by dump_yaml."""


def dump_yaml(doc: Any) -> str:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(VaultValue, lambda d, v: d.represent_scalar("!vault", str(v), style="|"))
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=False)


class Routes:
    """Delivers a mutation by one of ROUTES into a copy of the base inventory, loads it with
    Ansible's own InventoryManager and VariableManager, renders the mutated hosts' variables
    with the validate play's own selection (filter_plugins/fleet.py `_validated_vars`: templates,
    vault, values known only later) and judges them with validate_inventory. The other hosts keep
    the base's variables (each is valid): a refusal is the mutated host's. About 30 ms a mutation."""

    def __init__(self, base_dir: Path, base: dict[str, dict], workdir: Path):
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.vault import VaultSecret, VaultSecretsContext

        self.base = base
        self.dir = workdir / "route-inventory"
        shutil.copytree(base_dir, self.dir)
        self.hosts_yml = (self.dir / "hosts.yml").read_text()
        (self.dir / "host_vars").mkdir(exist_ok=True)
        for host in base:  # present from the start: Ansible caches which host_vars files exist
            (self.dir / "host_vars" / f"{host}.yml").write_text("---\n")
        self.extra = workdir / "route-extra.yml"
        self.loader = _RouteLoader()
        self.secret = VaultSecret(ROUTE_VAULT_PASSWORD.encode())
        self.loader.set_vault_secrets([("default", self.secret)])
        # A `!vault` value is decrypted when it is rendered, with the process' vault secrets (the
        # CLI sets them once): the route's password joins them.
        current = VaultSecretsContext.current(optional=True)
        if current is None:
            VaultSecretsContext.initialize(VaultSecretsContext([("default", self.secret)]))
        elif all(secret is not self.secret for _, secret in current.secrets):
            current.secrets.append(("fz-route", self.secret))
        self.inventory = InventoryManager(loader=self.loader, sources=[str(self.dir)])
        self.filters = _fleet_filters()

    def route_of(self, index: int, m: Mutation) -> str:
        """The route of the `index`-th mutation, in turn; a route that cannot carry it yields to the next."""
        variables = mutated_variables(self.base, m)
        for step in range(len(ROUTES)):
            route = ROUTES[(index + step) % len(ROUTES)]
            if route == "vault" and not all(isinstance(v, str) for vs in variables.values() for v in vs.values()):
                continue  # ansible-vault encrypts strings
            if route == "extra_vars" and len(variables) > 1 and len(
                    {json.dumps(vs.get(n), sort_keys=True, default=str) for vs in variables.values() for n in vs}) > 1:
                continue  # extra vars give every host one value
            return route
        return "host_vars"

    def _write(self, m: Mutation, route: str) -> tuple[str, ...]:
        """Write the route's files; the extra-vars files (-e @FILE) it needs."""
        from ansible.parsing.vault import VaultLib

        variables = mutated_variables(self.base, m)
        if route == "extra_vars":
            self.extra.write_text(dump_yaml({n: v for vs in variables.values() for n, v in vs.items()}))
            return (f"@{self.extra}",)
        per_host: dict[str, dict] = {}
        extra: dict = {}
        doc = yaml.safe_load(self.hosts_yml) if route == "inventory_vars" else None
        for i, (host, vs) in enumerate(sorted(variables.items())):
            for j, (name, value) in enumerate(vs.items()):
                ref = f"fz_route_{i}_{j}"
                if route == "template":
                    per_host.setdefault(host, {}).update({ref: value, name: "{{ " + ref + " }}"})
                elif route == "secrets_file":
                    extra[ref] = value
                    per_host.setdefault(host, {})[name] = "{{ " + ref + " }}"
                elif route == "vault":
                    cipher = VaultLib([("default", self.secret)]).encrypt(value).decode()
                    per_host.setdefault(host, {})[name] = VaultValue(cipher)
                elif route == "inventory_vars":
                    _inventory_entry(doc, host, name in self.base[host])[name] = value
                else:
                    per_host.setdefault(host, {})[name] = value
        for host, vs in per_host.items():
            (self.dir / "host_vars" / f"{host}.yml").write_text(dump_yaml(vs))
        if doc is not None:
            (self.dir / "hosts.yml").write_text(dump_yaml(doc))
        if extra:
            self.extra.write_text(dump_yaml(extra))
            return (f"@{self.extra}",)
        return ()

    def _restore(self, m: Mutation) -> None:
        for host in m.hosts():
            (self.dir / "host_vars" / f"{host}.yml").write_text("---\n")
        (self.dir / "hosts.yml").write_text(self.hosts_yml)

    def judge(self, m: Mutation, route: str) -> Verdict:
        """The mutation's verdict through `route` (call it inside `memory_cap()`)."""
        from ansible import context
        from ansible.inventory.manager import InventoryManager
        from ansible.utils.context_objects import CLIArgs
        from ansible.utils.vars import load_extra_vars
        from ansible.vars.hostvars import HostVars
        from ansible.vars.manager import VariableManager

        from vllm_fleet import validation

        saved, loaded = context.CLIARGS, getattr(load_extra_vars, "extra_vars", None)
        try:
            context.CLIARGS = CLIArgs({"extra_vars": self._write(m, route)})
            # Ansible reads the extra vars once a process (the memo on load_extra_vars): this run's, anew.
            load_extra_vars.extra_vars = None
            inventory = (InventoryManager(loader=self.loader, sources=[str(self.dir)]) if route == "inventory_vars"
                         else self.inventory)
            variables = VariableManager(loader=self.loader, inventory=inventory)
            hostvars = HostVars(inventory=inventory, variable_manager=variables, loader=self.loader)
            mutated, unrendered, later = dict(self.base), {}, {}
            for host in m.hosts():
                mutated[host] = self.filters._validated_vars(hostvars, host, unrendered.setdefault(host, {}),
                                                             later.setdefault(host, {}))
            problems = validation.validate_inventory(mutated, run_hosts(self.base, m), unrendered=unrendered,
                                                     later=later)
        except (Exception, MemoryError) as exc:  # noqa: BLE001 - a crash is a finding, not the test's error
            return Verdict(m, "got_through", [], [], f"validation crashed: {type(exc).__name__}: {exc}"[:200],
                           route)
        finally:
            context.CLIARGS, load_extra_vars.extra_vars = saved, loaded
            self._restore(m)
        return _verdict(m, problems, secrets_of(mutated) | secrets_of(apply(self.base, m)), route)


def _inventory_entry(doc: dict, host: str, set_in_files: bool) -> dict:
    """Where the inventory file sets a variable of `host`: the host's entry, or, for a variable no
    file of the base sets, its group's `vars:` (the lowest place that still reaches the host)."""
    for body in _groups_of_doc(doc["all"]):
        hosts = body.get("hosts") or {}
        if host in hosts:
            if set_in_files:
                hosts[host] = hosts[host] or {}
                return hosts[host]
            body["vars"] = body.get("vars") or {}
            return body["vars"]
    raise KeyError(host)


def _groups_of_doc(body: dict):
    yield body
    for child in (body.get("children") or {}).values():
        yield from _groups_of_doc(child or {})


# ------------------------------------------------------------------ the plan of a mutated inventory

def _by_reference(value, secrets: dict, inside: bool = False):
    """`value` with every secret (a value under a key named like one) replaced by a reference to
    a variable of `secrets`: an inventory file never holds a secret in clear (validation refuses
    it), so the CLI gets them as a user gives them, with --secrets FILE."""
    if isinstance(value, dict):
        return {k: _by_reference(v, secrets, inside or is_secret_name(str(k))) for k, v in value.items()}
    if inside and value not in (None, "", {}, []):
        name = f"fz_secret_{len(secrets)}"
        secrets[name] = value
        return "{{ " + name + " }}"
    if isinstance(value, list):
        return [_by_reference(v, secrets, inside) for v in value]
    return value


def secrets_file(inventory: Path) -> Path:
    return inventory.parent / f"{inventory.name}.secrets.yml"


def write_mutated_inventory(base_dir: Path, base: dict[str, dict], m: Mutation, dest: Path) -> Path:
    """The base inventory with the mutation as host_vars/<host>.yml (the whole mutated top-level
    variables: host_vars win over group_vars and the inventory's host variables); its secrets
    by reference, their values in secrets_file(dest)."""
    shutil.copytree(base_dir, dest)
    secrets: dict = {}
    extra = dest / "group_vars" / "fleet" / "fuzz.yml"
    extra.write_text(yaml.safe_dump(_by_reference(yaml.safe_load(extra.read_text()), secrets)))
    (dest / "host_vars").mkdir(exist_ok=True)
    for host, variables in mutated_variables(base, m).items():
        (dest / "host_vars" / f"{host}.yml").write_text(
            yaml.safe_dump(_by_reference(variables, secrets), allow_unicode=False))
    secrets_file(dest).write_text(yaml.safe_dump(secrets, allow_unicode=False))
    return dest


_CONTROL_IN_FILE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def plan_files(plan_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(plan_dir)): p.read_text(errors="replace") for p in sorted(plan_dir.rglob("*"))
            if p.is_file()}


def parse_env_file(text: str) -> dict[str, str]:
    """An environment file as systemd's EnvironmentFile= reads our unquoted KEY=value lines."""
    env = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"line without '=': {line!r}")
        env[key.strip()] = value
    return env


def check_plan_files(files: dict[str, str], baseline: dict[str, str], m: Mutation, workdir: Path,
                     base: dict[str, dict] | None = None) -> list[str]:
    """What is wrong with a mutated plan (host-relative paths -> text): control characters, lines
    the inventory did not ask for (not in the base plan, the mutation's value not in them), a
    unit `systemd-analyze verify` rejects beyond the base plan's findings, env files that do not
    parse back to the mapping of their lines."""
    findings = []
    values = _value_forms(m.value)
    old = _old_forms(m, base)[:1] or ['']
    base_lines = {line for text in baseline.values() for line in text.splitlines()}
    for name, text in files.items():
        if _CONTROL_IN_FILE.search(text):
            findings.append(f"{name}: a control character ({_CONTROL_IN_FILE.search(text).group()!r})")
        for line in text.splitlines():
            restored = line
            for new in values:
                for o in old:
                    restored = restored.replace(new, o)
            if restored not in base_lines and not any(v in line for v in values):
                findings.append(f"{name}: a line the inventory did not ask for: {line[:120]!r}")
                break
        if name.endswith(".env"):
            try:
                env = parse_env_file(text)
            except ValueError as exc:
                findings.append(f"{name}: {exc}")
                continue
            lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", ";"))]
            bad = [k for k in env if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
            if bad:
                findings.append(f"{name}: variable name {bad[0]!r} that systemd does not take")
            if len(env) != len(lines):
                findings.append(f"{name}: {len(lines)} lines parse to {len(env)} variables")
    findings += argv_findings(files, m)
    findings += systemd_verify(files, baseline, workdir)
    return findings


def argv_findings(files: dict[str, str], m: Mutation) -> list[str]:
    """A mutated string that reaches a unit's ExecStart= must stay within one argument there,
    and the unit's command must be the one commands/<unit>.sh shows (systemd's and the shell's
    reading of the same argv)."""
    import shlex

    from tests.systemd_syntax import exec_start

    findings = []
    for name, text in files.items():
        if not name.endswith(".service") or "ExecStart=" not in text:
            continue
        try:
            argv = exec_start(text)
        except ValueError as exc:
            findings.append(f"{name}: ExecStart= does not parse: {exc}")
            continue
        if isinstance(m.value, str) and m.value.strip() and m.value.strip() in " ".join(argv) and not any(
                m.value.strip() in arg for arg in argv):
            findings.append(f"{name}: {m.value!r} is split across arguments of ExecStart=")
        shell = files.get("commands/" + Path(name).name.removesuffix(".service") + ".sh")
        if shell:
            try:
                shell_argv = shlex.split(shell.strip().splitlines()[-1])
            except ValueError as exc:
                findings.append(f"{name}: its commands/ line does not parse: {exc}")
                continue
            if shell_argv != argv[argv.index("--") + 1:] if "--" in argv else shell_argv != argv:
                findings.append(f"{name}: systemd and the shell read its command differently")
    return findings


def _value_forms(value) -> list[str]:
    if isinstance(value, (dict, list)):
        leaves = []

        def walk(v):
            if isinstance(v, dict):
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif v is not None and str(v) != "":
                leaves.append(str(v))
        walk(value)
        return [x for x in leaves if len(x) >= 2]
    return [x for x in {str(value), json.dumps(value)} if x and len(x) >= 1]


def _old_forms(m: Mutation, base: dict[str, dict] | None = None) -> list[str]:
    """How the value the mutation replaced renders (so that a line differing only by the
    mutated value counts as asked for)."""
    try:
        old = _get((base or {}).get(m.host, {}), m.path)
    except (KeyError, IndexError, TypeError):
        return []
    return [] if isinstance(old, (dict, list)) or old is None else [str(old), json.dumps(old)]


def systemd_verify(files: dict[str, str], baseline: dict[str, str], workdir: Path) -> list[str]:
    """`systemd-analyze verify` of every unit, minus what it says of the base plan's units
    (the executables and users of a node, absent on the controller)."""
    if not shutil.which("systemd-analyze"):
        return []
    out = []
    base_msgs = _verify_messages({k: v for k, v in baseline.items() if k.endswith(".service")}, workdir / "base-units")
    mine = _verify_messages({k: v for k, v in files.items() if k.endswith(".service")}, workdir / "units")
    for unit, msgs in mine.items():
        extra = [x for x in msgs if x not in set().union(*base_msgs.values())] if base_msgs else msgs
        if extra:
            out.append(f"{unit}: systemd-analyze verify: {extra[0][:160]}")
    return out


_VERIFY_CACHE: dict[str, dict] = {}


def _verify_messages(units: dict[str, str], where: Path) -> dict[str, list[str]]:
    key = json.dumps(units, sort_keys=True)
    if key in _VERIFY_CACHE:
        return _VERIFY_CACHE[key]
    result = {}
    for name, text in units.items():
        d = where / Path(name).parent.name
        d.mkdir(parents=True, exist_ok=True)
        path = d / Path(name).name
        path.write_text(text)
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                              timeout=60)
        msgs = []
        for line in (proc.stdout + proc.stderr).splitlines():
            line = line.replace(str(path), "UNIT").replace(str(d), "DIR")
            # what a controller lacks of a node: its executables, users, other units
            if re.search(r"is not executable|No such file|Failed to resolve user|unit .* not found|"
                         r"Unit .*not found|Failed to prepare filename|does not exist", line):
                continue
            msgs.append(line)
        result[name] = msgs
    _VERIFY_CACHE[key] = result
    return result


# ------------------------------------------------------------------ the summary

def pattern(m: Mutation) -> str:
    """The mutated variable with list indexes left out: fleet_models[].serve.max_model_len."""
    return re.sub(r"\[\d+\]", "[]", m.var)


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def summary(verdicts: list[Verdict], examples: int = 40) -> str:
    """Tried, stopped, got through, leaked, by class; then the got-through and leaked
    mutations grouped by class and variable (the validation owner's to-do list)."""
    lines = []
    total = {"tried": len(verdicts)}
    for key in ("stopped", "harmless", "got_through"):
        total[key] = sum(v.verdict == key for v in verdicts)
    total["leaked"] = sum(bool(v.leaked) for v in verdicts)
    total["crashed"] = sum(v.why.startswith("validation crashed") for v in verdicts)
    lines.append("inventory fuzzer: " + ", ".join(f"{k} {n}" for k, n in total.items()))
    lines.append(f"  {'class':<15}{'tried':>7}{'stopped':>9}{'harmless':>10}{'through':>9}{'leaked':>8}")
    for cls in CLASSES:
        group = [v for v in verdicts if v.mutation.cls == cls]
        if group:
            lines.append(f"  {cls:<15}{len(group):>7}{sum(v.verdict == 'stopped' for v in group):>9}"
                         f"{sum(v.verdict == 'harmless' for v in group):>10}"
                         f"{sum(v.verdict == 'got_through' for v in group):>9}{sum(bool(v.leaked) for v in group):>8}")
    for title, chosen in (("got through", [v for v in verdicts if v.verdict == "got_through"]),
                          ("leaked", [v for v in verdicts if v.leaked])):
        if not chosen:
            continue
        lines.append(f"{title}, by class and variable (count: hostile values):")
        groups: dict[tuple[str, str], list[Verdict]] = {}
        for v in chosen:
            groups.setdefault((v.mutation.cls, pattern(v.mutation)), []).append(v)
        for (cls, var), group in sorted(groups.items()):
            values = sorted({short(v.mutation.value) for v in group})
            crash = sum(v.why.startswith("validation crashed") for v in group)
            lines.append(f"  {cls} {var} ({len(group)}{', ' + str(crash) + ' crashed' if crash else ''}): "
                         + ", ".join(values[:6]) + (" ..." if len(values) > 6 else ""))
    for v in [v for v in verdicts if v.verdict == "harmless"]:
        lines.append(f"  accepted, harmless (its plan passes every check): {v.mutation.label}")
    got = [v for v in verdicts if v.verdict == "got_through"]
    if got:
        lines.append(f"first {min(examples, len(got))} got-through mutations (host variable = value: why):")
        lines += [f"  {v.mutation.label}: {v.why}" for v in got[:examples]]
    for v in [v for v in verdicts if v.leaked][:examples]:
        lines.append(f"  LEAKED {v.mutation.label}: {[p for p in v.problems if any(s in p for s in v.leaked)][:1]}")
    return "\n".join(lines)


# ------------------------------------------------------------------ running plan.yml and the CLI

def tool_env() -> dict[str, str]:
    """The environment of the project's tools run from this tree: its ansible.cfg, and this
    checkout's package ahead of an installed one (a worktree's venv may be another checkout's)."""
    import os

    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def venv_tool(name: str) -> str:
    """A console script of the venv that runs the tests (ROOT/.venv under scripts/test; another
    controller's venv when its python runs them), else this checkout's .venv."""
    import sys

    for candidate in (Path(sys.executable).parent / name, ROOT / ".venv" / "bin" / name):
        if candidate.exists():
            return str(candidate)
    return shutil.which(name) or name


def run_plan(inventory: Path, out: Path, limit: str | None = None) -> subprocess.CompletedProcess:
    args = [venv_tool("ansible-playbook"), "-i", str(inventory), "playbooks/plan.yml", "-e", f"plan_dir={out}"]
    if secrets_file(inventory).exists():
        args += ["-e", f"@{secrets_file(inventory)}"]
    return subprocess.run(args + (["-l", limit] if limit else []), cwd=ROOT, env=tool_env(), capture_output=True,
                          text=True, timeout=1200)


def config_checkers(files: dict[str, str], host_dir: Path) -> list[str]:
    """`haproxy -c` on a haproxy.cfg, `promtool check config` on a prometheus.yml, when the plan
    has one (today's plan.yml renders fleet nodes' files only) and the tool is installed."""
    findings = []
    for name in files:
        if name.endswith("haproxy.cfg"):
            tool = shutil.which("haproxy")
            cmd = [tool, "-c", "-f", str(host_dir / name)] if tool else None
        elif name.endswith("prometheus.yml"):
            tool = shutil.which("promtool")
            cmd = [tool, "check", "config", "--syntax-only", str(host_dir / name)] if tool else None
        else:
            continue
        if cmd is None:
            findings.append(f"{name}: its checker is not installed (scripts/setup); not judged harmless")
            continue
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            findings.append(f"{name}: {Path(cmd[0]).name} rejects it: {(proc.stdout + proc.stderr).strip()[:160]}")
    return findings


def plan_verdict(base_dir: Path, base: dict[str, dict], m: Mutation, baseline_plan: Path, workdir: Path) -> list[str]:
    """Findings of the mutated inventory's plan ([] = accepted, harmless)."""
    fleet_hosts = sorted(h for h in m.hosts() if "fleet" in (base[h].get("group_names") or []))
    if sorted(m.hosts()) != fleet_hosts:
        return ["the plan renders no router or monitoring files, so nothing shows it harmless"]
    inventory = write_mutated_inventory(base_dir, base, m, workdir / "inventory")
    out = workdir / "plan"
    proc = run_plan(inventory, out, ",".join(fleet_hosts))
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).splitlines()
        errors = [ln.strip() for ln in lines if re.search(r"fatal:|FAILED!|ERROR!|\[ERROR\]", ln)]
        return ["plan.yml failed: " + " | ".join(errors[:2] or lines[-3:])[:300]]
    findings: list[str] = []
    rendered: set[str] = set()  # the plan's lines that the base plan does not have
    for host in fleet_hosts:
        files = plan_files(out / host)
        baseline = plan_files(baseline_plan / host)
        findings += [f"{host}/{f}" for f in check_plan_files(files, baseline, m, workdir / "verify", base)]
        findings += [f"{host}/{f}" for f in config_checkers(files, out / host)]
        old_lines = {line for text in baseline.values() for line in text.splitlines()}
        rendered.update(line for text in files.values() for line in text.splitlines() if line not in old_lines)
    forms = [f for f in _value_forms(m.value) if f.strip()]
    if not findings and not any(f in line for line in rendered for f in forms):
        # a value the plan does not show (a connection variable, a task's option) is used by
        # tasks on the node: nothing here shows it harmless
        findings.append("the plan does not render this value, so nothing shows it harmless")
    return findings


def site_playbook(inventory: Path) -> subprocess.CompletedProcess:
    """Plain `ansible-playbook -i INVENTORY site.yml --check`, its secrets as extra vars (as --secrets
    gives them). Should validation let the run through, its first connection fails at once and
    sends nothing (ssh is /bin/false): the inventory's own addresses and ports stay as written,
    since they are what is judged."""
    given = ["-e", f"@{secrets_file(inventory)}"] if secrets_file(inventory).exists() else []
    return subprocess.run([venv_tool("ansible-playbook"), "-i", str(inventory), "site.yml", "--check", *given,
                           "-e", '{"ansible_ssh_executable": "/bin/false"}'], cwd=ROOT, env=tool_env(),
                          capture_output=True, text=True, timeout=600)


def refusal_lines(output: str) -> list[str]:
    """The problems of a refusal (the verdict play's error, the last listing), in ansible-playbook's output."""
    block = output.rsplit("The inventory is invalid", 1)[1].split("Origin:", 1)[0] if "The inventory is invalid" \
        in output else ""
    return [line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")]


def provision_json(inventory: Path) -> tuple[int, dict]:
    """`vllm-fleet provision -i INVENTORY --json`: exit code and the JSON result."""
    given = ["--secrets", str(secrets_file(inventory))] if secrets_file(inventory).exists() else []
    proc = subprocess.run([venv_tool("vllm-fleet"), "provision", "-i", str(inventory), "--json", *given], cwd=ROOT,
                          env=tool_env(), capture_output=True, text=True, timeout=600)
    try:
        result = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])[0]
    except ValueError:
        result = {"stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]}
    return proc.returncode, result
