"""Structure every role must have (STYLE.md): argument specs that match defaults, steps per concern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from vllm_fleet.project import ROLE_LAYERS, role_dirs

ROOT = Path(__file__).resolve().parents[2]
ROLES = role_dirs()


def load(path: Path):
    return yaml.safe_load(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults = load(role / "defaults" / "main.yml") or {}
    specs = load(role / "meta" / "argument_specs.yml")
    assert specs, f"{role.name} has no meta/argument_specs.yml"
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) <= set(options), f"defaults without a spec: {sorted(set(defaults) - set(options))}"
    for name, spec in options.items():
        assert spec.get("description"), f"{role.name}: option {name} has no description"
        if name in defaults:
            assert "default" in spec, f"{role.name}: {name} has a default in defaults/main.yml but not in its spec"
            assert spec["default"] == defaults[name], \
                f"{role.name}: spec default of {name} differs from defaults/main.yml"
        else:
            assert "default" not in spec and not spec.get("required"), (
                f"{role.name}: {name} is in the spec but not in defaults/main.yml; an option without a default "
                "must be documented as set by the inventory (and is validated by the inventory schema)")


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_variables_are_prefixed(role):
    prefix = role.name + "_"
    for where in ("defaults", "vars"):
        data = load(role / where / "main.yml") or {}
        for name in data:
            internal = name.startswith("_" + prefix) or (role.name == "fleet" and name.startswith("_fleet_"))
            assert name.startswith(prefix) or internal, f"{role.name}/{where}: {name} is not prefixed with {prefix}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_main_is_a_table_of_contents(role):
    tasks = load(role / "tasks" / "main.yml")
    assert tasks, f"{role.name} has no tasks/main.yml"
    for task in tasks:
        action = next(k for k in task if k not in ("name", "tags", "when", "vars", "become", "notify"))
        if role.name == "fleet":
            continue
        assert action in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"), (
            f"{role.name}/tasks/main.yml runs {action} directly; give the step its own task file")
        assert task.get("tags"), f"{role.name}/tasks/main.yml: step {task['name']!r} has no tag"


def test_roles_are_grouped_by_layer():
    """roles/ holds the layers' folders and its index, nothing else; a layer holds roles only."""
    top = {p.name for p in (ROOT / "roles").iterdir()}
    assert top == {*ROLE_LAYERS, "README.md"}, f"roles/ should hold {sorted(ROLE_LAYERS)} and README.md: {sorted(top)}"
    for layer in ROLE_LAYERS:
        for path in (ROOT / "roles" / layer).iterdir():
            assert (path / "tasks" / "main.yml").is_file(), \
                f"roles/{layer}/{path.name} is not a role (no tasks/main.yml)"
    names = [role.name for role in ROLES]
    assert len(names) == len(set(names)), \
        "two roles of one name in different layers: a role's name prefixes its variables"


def test_roles_readme_lists_every_role_once_under_its_layer():
    """roles/README.md is the map of the layers: every role folder once, under its layer's heading."""
    listed = {}
    layer = None
    for line in (ROOT / "roles" / "README.md").read_text().splitlines():
        if heading := re.match(r"^## `([a-z_]+)/`", line):
            layer = heading.group(1)
        elif entry := re.match(r"^\s*- `([a-z0-9_]+)/([a-z0-9_]+)`:", line):
            path = f"{entry.group(1)}/{entry.group(2)}"
            assert path not in listed, f"roles/README.md lists {path} twice"
            assert entry.group(1) == layer, f"roles/README.md lists {path} under the heading of {layer}/"
            listed[path] = layer
    folders = {f"{role.parent.name}/{role.name}" for role in ROLES}
    assert not folders - set(listed), f"roles/README.md does not list: {sorted(folders - set(listed))}"
    assert not set(listed) - folders, f"roles/README.md names roles that do not exist: {sorted(set(listed) - folders)}"
