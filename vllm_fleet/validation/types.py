"""Booleans and numbers: strict types, every number in its range.

Ansible's own argument-spec validator converts what it can ("false" -> False, "8000" -> 8000)
but the templates see the variable as written: `"false"` is a non-empty string, truthy in a
`{% if %}`, so a switch given as a string would turn the thing on. Role variables are
therefore held to their spec's type exactly, with the YAML to write in the message, and
every number to the range its name's class allows (fleet_* variables: the schema's ranges).
Derived numbers (ports from fleet_serve_base_port, device indices) are judged where they are
derived: vllm_fleet.validation.ports and vllm_fleet.models.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from vllm_fleet.role_specs import role_options
from vllm_fleet.secrets import mask_text
from vllm_fleet.validation.classes import NUMBER_RANGES, class_of
from vllm_fleet.validation.problem import Problem, _describe, _masked, leaves, secret_path
from vllm_fleet.validation.schema import schema

#: The largest integer any consumer (HAProxy, systemd, Prometheus, 32-bit C) takes safely.
LARGEST = 2**31 - 1
#: Ranges of keys inside a structure by the key's name (pattern, low, high, inclusive low, what it is);
#: role options have the range of their declared class (classes.NUMBER_RANGES).
NUMBER_CLASSES: list[tuple[re.Pattern, float, float, bool, str]] = [
    (re.compile(r"(^|_)port$"), 1024, 65535, True, "a TCP port of an unprivileged service, 1024-65535"),
    (re.compile(r"_percent(age)?$"), 0, 100, True, "a percentage, 0-100"),
    (re.compile(r"_points$"), 0, 100, True, "percentage points, 0-100"),
    (re.compile(r"_threshold$"), 0, 1, False, "a fraction in (0, 1], e.g. 0.9"),
    (re.compile(r"_timeout$"), 1, 86400, True, "a number of seconds, 1-86400 (a day)"),
    (re.compile(r"_(sec|delay)$"), 1, 3600, True, "a number of seconds, 1-3600 (an hour)"),
    (re.compile(r"_(keep|fall|rise)$"), 1, 100, True, "a count, 1-100"),
    (re.compile(r"_restarts$"), 0, 100, True, "a count, 0-100"),
    (re.compile(r"_num_cpus$"), 0, 65536, True, "a number of CPUs, 0-65536 (0: Ray's own count)"),
    (re.compile(r"_bytes$"), 0, 2**50, True, "a number of bytes, 0-2^50 (0: the default)"),
    (re.compile(r"_gb$"), 0, 1048576, True, "a number of GB, 0-1048576"),
]
_DEFAULT_RANGE = (0, LARGEST, True, f"a number >= 0 (at most {LARGEST})")
_PYTHON_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "path": (str,),
                 "list": (list,), "dict": (dict,)}
_WORDS = {"bool": "true or false, unquoted", "int": "a whole number, unquoted", "float": "a number, unquoted",
          "str": "a string", "path": "a path (a string)", "list": "a list", "dict": "a mapping"}


NON_FINITE_ACCEPTED = "a finite number (NaN and infinity pass no bound: .nan, .inf and their kin are refused everywhere)"


def non_finite_problems(host_vars: dict) -> list[str]:
    """Every NaN or infinity at any depth of any variable validation reads, whatever its name or
    spec: comparisons with NaN are all false, so a bound such as `size_gb > 0` or preflight's free
    disk check would pass it, and no consumer (vLLM's parser, systemd, HAProxy) means either."""
    return [str(Problem(path, value, "is not a finite number", NON_FINITE_ACCEPTED))
            for path, value in leaves(host_vars)
            if isinstance(value, float) and not math.isfinite(value) and not (path and path[-1] is None)]


def number_range(name: str) -> tuple[float, float, bool, str]:
    """The range of a number: its declared class's (classes.NUMBER_RANGES) for a role option; for
    a key inside a structure (a router entry's `port`), the class its key's name says."""
    cls = class_of(name)
    if cls is not None:
        if cls in NUMBER_RANGES:
            return NUMBER_RANGES[cls]
        return _DEFAULT_RANGE
    for pattern, low, high, inclusive, what in NUMBER_CLASSES:
        if pattern.search(name):
            return low, high, inclusive, what
    return _DEFAULT_RANGE


def _yaml_hint(name: str, kind: str, value: Any) -> str:
    """The line of YAML that says what the user meant, where it can be told."""
    if kind == "bool" and isinstance(value, str) and value.strip().lower() in (
            "true", "false", "yes", "no", "on", "off", "1", "0"):
        meant = value.strip().lower() in ("true", "yes", "on", "1")
        return f" (write `{name}: {'true' if meant else 'false'}` without quotes: a quoted word is a string, " \
               "and any non-empty string is true in a template)"
    if kind in ("int", "float") and isinstance(value, str):
        try:
            number = json.loads(value.strip())
        except ValueError:
            return ""
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return f" (write `{name}: {number}` without quotes; extra vars on the command line: -e '{{\"{name}\": {number}}}')"
    return ""


def _value_problems(name: str, path: tuple, spec: dict, value: Any) -> list[str]:
    kind = spec.get("type", "str")
    wanted = _PYTHON_TYPES.get(kind)
    if value is None and spec.get("default", "") is None:
        return []
    if wanted and (not isinstance(value, wanted) or (isinstance(value, bool) and kind != "bool")):
        if kind == "str" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return []  # a number where a word is taken renders as that number: harmless
        return [str(Problem(path, value, f"is not {_WORDS[kind]}{_yaml_hint(name, kind, value)}", _WORDS[kind]))]
    problems: list[str] = []
    if kind in ("int", "float"):
        low, high, inclusive, what = number_range(str(path[-1]) if path else name)
        if not ((value >= low if inclusive else value > low) and value <= high):
            problems.append(str(Problem(path, value, "is out of range", what)))
    if kind == "list" and spec.get("elements"):
        element = {"type": spec["elements"], **({"options": spec["options"]} if "options" in spec else {})}
        for i, item in enumerate(value):
            problems += _value_problems(name, path + (i,), element, item)
    if kind == "dict" and spec.get("options"):
        for key, sub in spec["options"].items():
            if key in value:
                problems += _value_problems(key, path + (key,), sub, value[key])
    return problems


def _range_problems(name: str, value: Any) -> list[str]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return []
    low, high, inclusive, what = number_range(name)
    if (value >= low if inclusive else value > low) and value <= high:
        return []
    return [str(Problem((name,), value, "is out of range", what))]


def _spec_problems(options: dict, provided: dict) -> list[str]:
    """What Ansible's own argument-spec validator says of values of the right types: required
    sub-options, unknown keys, choices."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: PLC0415 - Ansible only when needed

    spec = {name: {k: v for k, v in options[name][1].items() if k in ("type", "choices", "elements", "options")}
            for name in provided}
    problems = []
    for error in ArgumentSpecValidator(spec).validate(provided).errors:
        message = str(error)
        name = next((n for n in provided if f"'{n}'" in message or n in message), None)
        if name and "choices" in options[name][1]:
            message += f" (accepted: {', '.join(map(str, options[name][1]['choices']))})"
        if name and secret_path((name,)):
            shown = _masked(provided[name])
            message = mask_text(message, [str(provided[name])])
        else:
            shown = _describe(provided[name]) if name else ""
        problems.append(f"{name + ' = ' + shown + ': ' if name else ''}{message}")
    return problems


def type_problems(host_vars: dict) -> list[str]:
    """Role variables (not fleet_*: the schema types those) of exactly their spec's type, numbers
    in range; then, for those, Ansible's own spec validator (required keys, unknown keys, choices)."""
    options = role_options()
    known = schema()["properties"]
    problems: list[str] = []
    typed: dict = {}
    for name in sorted(host_vars):
        if name not in options:
            continue
        if name in known:
            # Typed by the schema; its number still in its class's range, said here once.
            problems += _range_problems(name, host_vars[name])
            continue
        own = _value_problems(name, (name,), options[name][1], host_vars[name])
        problems += own
        if not own:
            typed[name] = host_vars[name]
    return problems + (_spec_problems(options, typed) if typed else [])
