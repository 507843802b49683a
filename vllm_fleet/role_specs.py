"""The roles' own specs: every role option, from roles/<layer>/*/meta/argument_specs.yml (project data:
validation and monitoring read role options and defaults here)."""

from __future__ import annotations

from functools import cache, lru_cache

import yaml

from vllm_fleet.project import role_dir, role_dirs


@lru_cache(maxsize=1)
def role_options() -> dict[str, tuple[str, dict]]:
    """Every role option -> (role, spec), from roles/<layer>/*/meta/argument_specs.yml (entry point main)."""
    options: dict[str, tuple[str, dict]] = {}
    for spec_file in [d / "meta" / "argument_specs.yml" for d in role_dirs()]:
        if not spec_file.is_file():
            continue
        specs = yaml.safe_load(spec_file.read_text()) or {}
        main = (specs.get("argument_specs") or {}).get("main") or {}
        for name, spec in (main.get("options") or {}).items():
            options[name] = (spec_file.parent.parent.name, spec)
    return options


def role_default(name: str):
    """A role option's default, from its argument spec (which tests/unit/test_roles.py keeps equal
    to the role's defaults/main.yml): Python that needs it reads it here, never a copy."""
    return role_options()[name][1].get("default")


@lru_cache(maxsize=1)
def role_names() -> frozenset[str]:
    return frozenset(role for role, _ in role_options().values())


@lru_cache(maxsize=1)
def _declared_classes() -> dict[str, str]:
    classes: dict[str, str] = {}
    for path in [d / "meta" / "classes.yml" for d in role_dirs()]:
        if not path.is_file():
            continue
        classes.update({str(k): str(v) for k, v in (yaml.safe_load(path.read_text()) or {}).items()})
    return classes


@lru_cache(maxsize=1)
def role_classes() -> dict[str, str]:
    """Every role option -> its declared class, from roles/<layer>/*/meta/classes.yml (the classes and
    their rules: vllm_fleet/validation/classes.py)."""
    return {k: v for k, v in _declared_classes().items() if "." not in k}


@lru_cache(maxsize=1)
def suboption_classes() -> dict[tuple[str, str], str]:
    """(option, suboption) -> class, for the suboptions whose class differs from what their type says
    (`nvidia_driver_apt_repositories.key: armored`, a key on several lines), from the same files."""
    return {tuple(k.split(".", 1)): v for k, v in _declared_classes().items() if "." in k}


@lru_cache(maxsize=1)
def secret_declarations() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """What the roles declare secret, for vllm_fleet.secrets.secret_values (the one rule of what a
    secret is, for masking and validation alike): the variables of class secret or secrets
    (meta/classes.yml), and, for every variable whose spec lists suboptions, the ones marked
    no_log (router_api_keys: a team's key, not its name or its requests_per_minute)."""
    variables = frozenset(n for n, c in role_classes().items() if c in ("secret", "secrets"))
    suboptions = {}
    for name, (_, spec) in role_options().items():
        options = spec.get("options")
        if isinstance(options, dict):
            suboptions[name] = frozenset(k for k, o in options.items() if isinstance(o, dict) and o.get("no_log"))
    return variables, suboptions


@cache
def role_constant(role: str, name: str):
    """A constant of a role's vars/main.yml (roles/stages/fleet's _fleet_model_complete_marker, the name
    of the file that marks a model directory complete): Python that needs it reads it here, never a
    copy. Only a plain value: one the role computes (a template) has no value outside a play."""
    value = (yaml.safe_load((role_dir(role) / "vars" / "main.yml").read_text()) or {})[name]
    if isinstance(value, str) and "{{" in value:
        raise ValueError(f"{role}'s {name} is a template ({value!r}), not a constant")
    return value
