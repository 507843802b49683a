"""Names that reach clients, files and unit names: a safe character set and a length that fits.

Every value under a key `name` or `served_model_name` (models, LoRA adapters, router entries,
overlays, launch profiles), at any depth: letters, digits and `. _ - + @ :`, with at most one
`/` (a hub-style `org/model`), starting with a letter or digit, at most 128 characters (the
model's own `name`, which names its systemd unit, is held to the schema's shorter form).
No whitespace, quotes, shell or format characters, and (strings.py) no control, zero-width or
bidi characters: what a client types, a unit is called and a reviewer reads are the same.
Served names are unique on a host: a second model answering to one name would take its requests.
"""

from __future__ import annotations

import re

from vllm_fleet.secrets import NAME_KEYS
from vllm_fleet.validation.classes import class_of
from vllm_fleet.validation.problem import Problem, leaves

#: What clients ask for: a hub-style org/model is fine.
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@:-]*(/[A-Za-z0-9._+@:-]+)?\Z")
#: What names a file, a directory, a unit or an environment: one word, no '/'.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@:-]*\Z")
#: Keys whose values clients send as the model's name (a '/' allowed).
SERVED_KEYS = ("served_model_name",)
LONGEST = 128
#: Variables no role declares that name a thing on the node, by their name (a role option: its
#: declared class `name`).
_NAME_VARIABLE = re.compile(r"_name$")
ACCEPTED = (f"1-{LONGEST} letters, digits and '.', '_', '-', '+', '@', ':', starting with a letter or digit (a "
            "served model name may have one '/': org/model)")


def _is_name_variable(name: str) -> bool:
    declared = class_of(name)
    return declared == "name" if declared is not None else bool(_NAME_VARIABLE.search(name))


def name_rule(value, served: bool = False) -> str | None:
    if not isinstance(value, str):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "is not a name (a string)"
    if len(value) > LONGEST:
        return f"is {len(value)} characters long"
    if not (SERVED_NAME if served else NAME).match(value):
        return ("has characters outside the safe set (spaces, quotes, shell or format characters"
                + (", or a second '/')" if served else ", or a '/')"))
    return None


def _served_context(path: tuple) -> bool:
    """A served name: under served_model_name, or a router entry's name (which is one)."""
    return any(p in SERVED_KEYS for p in path) or (len(path) >= 3 and path[0] == "router_models" and path[-1] == "name")


def _containers(value, path: tuple = ()):
    """(path, value) of every served_model_name given as a mapping (a list of names is fine)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in SERVED_KEYS and isinstance(v, dict):
                yield path + (k,), v
            else:
                yield from _containers(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _containers(v, path + (i,))


def name_problems(host_vars: dict) -> list[str]:
    problems = []
    served: dict[str, str] = {}
    for path, value in _containers(host_vars):
        problems.append(str(Problem(path, value, "is a mapping", "a served name, or a list of them")))
    for path, value in leaves(host_vars):
        if not path or path[-1] is None:
            continue
        key = path[-1] if isinstance(path[-1], str) else (path[-2] if len(path) > 1 else None)
        if key not in NAME_KEYS and not (len(path) == 1 and _is_name_variable(str(key))):
            continue
        if len(path) == 3 and path[0] == "fleet_models" and path[2] == "name":
            continue  # a model's own name: the schema's stricter form (it names the unit)
        why = name_rule(value, served=_served_context(path))
        if why:
            problems.append(str(Problem(path, value, why, ACCEPTED)))
    for i, model in enumerate(host_vars.get("fleet_models") or []):
        if not isinstance(model, dict):
            continue
        names = (model.get("serve") or {}).get("served_model_name") if isinstance(model.get("serve"), dict) else None
        names = names if isinstance(names, list) else [names if names is not None else model.get("name")]
        for name in names:
            if isinstance(name, str) and name in served and served[name] != model.get("name"):
                problems.append(str(Problem(("fleet_models", i, "serve", "served_model_name"), name,
                                            f"is model {served[name]}'s served name too; a client asking for it "
                                            "would reach either", "a served name per model on a host")))
            if isinstance(name, str):
                served.setdefault(name, str(model.get("name")))
    return problems
