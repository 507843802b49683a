"""Layer 2: every role's meta/argument_specs.yml, for the role variables the inventory sets:
unknown variables that look like a typo of one, and each value against its spec (types.py)."""

from __future__ import annotations

import difflib

from vllm_fleet.project import ROLES_DIR
from vllm_fleet.role_specs import role_default, role_names, role_options
from vllm_fleet.validation.problem import _describe, _masked, secret_path
from vllm_fleet.validation.schema import schema
from vllm_fleet.validation.types import type_problems

__all__ = ["ROLES_DIR", "role_default", "role_options", "role_variable_problems"]


def role_variable_problems(host_vars: dict) -> list[str]:
    options = role_options()
    roles = role_names()
    problems = []
    known = schema()["properties"]
    for name, value in host_vars.items():
        if name in known or name in options:
            continue  # fleet_* settings are checked, in more depth, by the schema
        role = next((r for r in roles if name.startswith(r + "_")), None)
        if role:
            candidates = [o for o, (r, _) in options.items() if r == role]
            close = difflib.get_close_matches(name, candidates, n=1)
            shown = _masked(value) if secret_path((name,)) else _describe(value)
            problems.append(f"{name} = {shown}: not a variable of role {role}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; the role's variables are listed in roles/{role}/meta/argument_specs.yml")
    return problems + type_problems(host_vars)
