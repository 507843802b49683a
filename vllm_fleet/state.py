"""Reading what a node reports about its own state (pure functions, used through filters).

- :func:`units_to_start`: which units `systemctl show` reports as not enabled or not running;
- :func:`inputs_digest`: what a node's converge reads on the controller, as one digest
  (``library/fleet_state.py`` keeps it with the node's state);
- :func:`leftover_units`: which installed units no model of the inventory serves are removed,
  and which are left serving as orphans;
- :func:`install_action`: what an installer must do about one row of
  ``library/fleet_versions.py``, the module doctor uses, so that an install role and
  doctor can never disagree about "is this version installed".
"""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath


def units_to_start(show_output: str) -> list[str]:
    """Units of `systemctl show --property=Id,UnitFileState,ActiveState U...` output to enable and start.

    systemctl prints one block of `key=value` lines per unit, blocks separated by a
    blank line. A unit needs attention unless it is enabled and active.
    """
    wanted = []
    for block in show_output.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if not props.get("Id"):
            continue
        if props.get("UnitFileState") != "enabled" or props.get("ActiveState") != "active":
            wanted.append(props["Id"])
    return wanted


def unit_files(units: list[str], etc_dir: str, suffixes: tuple[str, ...] = (".env",)) -> list[str]:
    """Every file vllm-fleet writes for each of `units`: its systemd unit and, in `etc_dir`, its
    environment files (`<unit><suffix>`)."""
    return [path for unit in units
            for path in (f"/etc/systemd/system/{unit}.service", *(f"{etc_dir}/{unit}{s}" for s in suffixes))]


def leftover_units(installed: list[str], served: list[str], listed: list[str], prune: bool = False) -> dict:
    """What becomes of the units vllm-fleet installed on a node (`installed`: unit names, or their
    paths) that it does not serve (`served`): those of a model the inventory still lists for the
    node (`listed`: disabled, `state: absent`, or no longer this node's span) are removed; those
    of a model it no longer lists are removed only with `prune` and otherwise left serving and
    reported, never destroyed because a line went missing (a second `fleet_models:` key, a file
    of the wrong group, a typo). {"remove": [...], "orphaned": [...]}, each sorted."""
    names = {PurePosixPath(str(u)).name.removesuffix(".service") for u in installed}
    leftover = names - set(served)
    orphaned = set() if prune else leftover - set(listed)
    return {"remove": sorted(leftover - orphaned), "orphaned": sorted(orphaned)}


def install_action(row: dict, upgrade: str = "upgrade", fresh: str = "install") -> str:
    """'none' when the row matches; else `upgrade` when something else is installed, `fresh` when nothing is."""
    if row.get("ok"):
        return "none"
    return upgrade if row.get("installed") not in (None, "") else fresh


def doctor_line(row: dict) -> str:
    """One row of doctor's table as a line: component, kind, expected, installed, verdict."""
    expected = row.get("expected")
    installed = row.get("installed")
    verdict = "ok" if row.get("ok") else "DIFFERS"
    return (f"{row.get('component')} ({row.get('kind')}): expected {'any' if expected is None else expected}, "
            f"installed {'nothing' if installed in (None, '') else installed}: {verdict} - {row.get('detail') or ''}"
            ).rstrip(" -")


def driver_mismatch(row: dict) -> str:
    """The sentence for a loaded driver that is not the matrix's (row of kind smi)."""
    found = f"loaded {row['installed']}" if row.get("installed") else row.get("detail") or "not loaded"
    return f"driver: expected {row.get('expected')}, {found}"


# Variables that say how this run goes, not what a node should be: never part of the inputs.
# Every variable of a role that writes nothing on a fleet node (its report, doctor's verdict,
# validation's strictness, a rollout's turn; role variables carry their role's name as prefix),
# the rollout's batches, and --full.
RUN_ROLES = ("report", "doctor", "validate_inventory", "fleet_rollout")
RUN_ONLY = ("fleet_full", "fleet_prune", "fleet_check_mode_stopped")
RUN_ONLY_PREFIXES = tuple(f"{role}_" for role in RUN_ROLES)
# Where Ansible reaches a node from is not what the node is (two controllers may differ).
CONNECTION_ONLY = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_user", "remote_user",
                   "ansible_become_user", "ansible_connection", "ansible_python_interpreter",
                   "ansible_ssh_private_key_file")


def inputs_digest(host_vars: dict, code: str, groups: dict | None = None) -> str:
    """sha256 of a host's variables (as validation reads them: every fleet_* and role variable and
    its groups), of the inventory's groups (``groups``: a node's steps depend on whether the
    inventory has router or monitoring hosts, and on the members of its spanning models) and of
    vllm-fleet's own files (``code``, vllm_fleet.project.code_digest).

    Two runs with the same digest give the node the same files, packages and units, so a node
    still as its last converge left it (``library/fleet_state.py``) has nothing to do.
    """
    kept = {name: value for name, value in host_vars.items()
            if name not in RUN_ONLY and name not in CONNECTION_ONLY and not name.startswith(RUN_ONLY_PREFIXES)}
    members = {name: sorted(hosts) for name, hosts in (groups or {}).items()}
    blob = json.dumps({"code": code, "vars": kept, "groups": members}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()
