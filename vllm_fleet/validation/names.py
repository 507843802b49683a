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

from vllm_fleet.validation.problem import Problem, leaves

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@:-]*(/[A-Za-z0-9._+@:-]+)?\Z")
LONGEST = 128
NAME_KEYS = ("name", "served_model_name")
ACCEPTED = (f"1-{LONGEST} letters, digits and '.', '_', '-', '+', '@', ':', with at most one '/' (org/model), "
            "starting with a letter or digit")


def name_rule(value) -> str | None:
    if not isinstance(value, str):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "is not a name (a string)"
    if len(value) > LONGEST:
        return f"is {len(value)} characters long"
    if not NAME.match(value):
        return "has characters outside the safe set (spaces, quotes, shell or format characters, or a second '/')"
    return None


def name_problems(host_vars: dict) -> list[str]:
    problems = []
    served: dict[str, str] = {}
    for path, value in leaves(host_vars):
        if not path or path[-1] is None:
            continue
        key = path[-1] if isinstance(path[-1], str) else (path[-2] if len(path) > 1 else None)
        if key not in NAME_KEYS or (len(path) == 3 and path[0] == "fleet_models" and path[2] == "name"):
            continue  # a model's own name: the schema's stricter form (it names the unit)
        why = name_rule(value)
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
