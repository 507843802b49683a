"""Reading what a node reports about its own state (pure functions, used through filters).

- :func:`units_to_start`: which units `systemctl show` reports as not enabled or not running;
- :func:`install_action`: what an installer must do about one row of
  ``library/fleet_versions.py``, the module doctor uses, so that an install role and
  doctor can never disagree about "is this version installed".
"""

from __future__ import annotations


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
