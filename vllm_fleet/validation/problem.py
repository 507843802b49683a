"""How a problem is said: host, variable, value (masked when secret) and what is accepted.

Rules of every class return sentences built here, so that each names the variable by its
full path (`fleet_models[0].path`), shows the value as YAML would read it (its kind said,
a secret never), says what is wrong and what would be accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vllm_fleet.role_specs import secret_declarations
from vllm_fleet.secrets import MASK, is_secret_path


def _describe(value: Any) -> str:
    kinds = [(bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
             (list, "a list"), (dict, "a mapping"), (type(None), "null")]
    kind = next((name for t, name in kinds if isinstance(value, t)), type(value).__name__)
    text = json.dumps(value, default=str, ensure_ascii=True) if not isinstance(value, str) else ascii(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({kind})"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _var_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(host variables)"


def _masked(value: Any) -> str:
    """`_describe` for a secret: its kind, never its value."""
    return f"{MASK} ({_describe(value).rsplit('(', 1)[-1]}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def secret_path(path) -> bool:
    """Whether the value at `path` is a secret, by the one rule masking uses too
    (vllm_fleet.secrets.is_secret_path, with the roles' declarations)."""
    return is_secret_path(path, secret_declarations())


@dataclass(frozen=True)
class Problem:
    """One problem of one variable: `path` (names and list indices from the host's variable
    down to the leaf), its `value`, what is wrong (`why`) and what is `accepted`."""

    path: tuple
    value: Any
    why: str
    accepted: str

    @property
    def variable(self) -> str:
        return _var_path(self.path)

    def __str__(self) -> str:
        shown = _masked(self.value) if secret_path(self.path) else _describe(self.value)
        return f"{self.variable} = {shown}: {self.why}; accepted: {self.accepted}"


def leaves(value: Any, path: tuple = ()):
    """(path, value) of every scalar under `value`, and (path + (key,), key) of every mapping key
    marked by a trailing None: ((..., key, None), key)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k, None), k
            yield from leaves(v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaves(v, path + (i,))
    else:
        yield path, value
