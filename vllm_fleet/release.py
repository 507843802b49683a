"""Versioned releases of vLLM's environment on a node (host mode).

A release is the venv (and the source checkouts and overlays that live with it) built
from a vendor's defining matrix entries; it is installed under
`<fleet_base_dir>/releases/<id>/` and served through the stable `<fleet_base_dir>/current`
link. This module is the one place that names a release (`release_id`) and that decides,
from what a node holds, which release is the previous one and which are pruned
(`release_state`): roles/fleet_release, playbooks/rollback.yml and the tests use it.
"""

from __future__ import annotations

import hashlib
import json

# Keys of a matrix entry that say where something is fetched from, not what it is: a
# new mirror of the same commit is the same release.
_WHERE_KEYS = frozenset({"sources", "url", "urls", "mirror", "mirrors"})
# The file in a release directory that says the release was installed completely; it
# holds what the release was built from.
MARKER = ".vllm-fleet-release.json"
# The node's activation history (one release id a line, the current one last).
HISTORY = "history"
ID_LENGTH = 12
_ID_CHARS = frozenset("0123456789abcdef")


def is_release_id(name: str) -> bool:
    """Whether `name` is spelled as `release_id` spells ids (the fleet's own naming)."""
    return len(name) == ID_LENGTH and set(name) <= _ID_CHARS


def _content(value):
    """A matrix entry without the keys that only say where it comes from."""
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k not in _WHERE_KEYS}
    if isinstance(value, (list, tuple)):
        return [_content(v) for v in value]
    return value


def pinned_version(entry) -> str:
    """The version a pinned matrix entry names: the entry itself (``torch: "2.7.1"``) or its
    ``version`` (``vllm: {version: 0.11.2, ...}``)."""
    if isinstance(entry, dict):
        if "version" not in entry:
            raise ValueError(f"a pinned matrix entry is a version or has one; got {entry!r}")
        entry = entry["version"]
    if isinstance(entry, bool) or not isinstance(entry, (str, int, float)):
        raise ValueError(f"a pinned matrix entry is a version or has one; got {entry!r}")
    return str(entry)


def pin_versions(pins: dict, matrix: dict) -> dict[str, str]:
    """{distribution: version} for a contract's ``pins`` ({pip distribution: matrix key}), in
    the pins' order. A key the matrix lacks is an optional pin (Ray, for models that span
    nodes) and is left out; which keys a vendor requires is its matrix schema's business."""
    if not isinstance(pins, dict) or not isinstance(matrix, dict):
        raise ValueError(f"expected pins and fleet_matrix as mappings, got {pins!r} and {type(matrix).__name__}")
    return {dist: pinned_version(matrix[key]) for dist, key in pins.items() if key in matrix}


def pin_specs(pins: dict, matrix: dict) -> list[str]:
    """The pins as pip requirements (``torch==2.7.1``), in the pins' order: what the vendor's
    install step resolves, the same versions doctor compares (``pin_versions``)."""
    return [f"{dist}=={version}" for dist, version in pin_versions(pins, matrix).items()]


def release_keys(release: list, pins: dict) -> list[str]:
    """The matrix entries that name a vendor's release: its contract's ``release`` (what is
    not a pip pin: Python, source commits, overlays) and every pinned entry. Both empty: the
    vendor keeps its environment in place and has no releases."""
    return sorted(set(release or []) | set((pins or {}).values()))


def release_inputs(matrix: dict, keys: list[str], vendor: str) -> dict:
    """What a release is built from: the vendor and its contract's defining matrix entries."""
    if not isinstance(matrix, dict):
        raise ValueError(f"expected fleet_matrix as a mapping, got {matrix!r}")
    if not keys:
        raise ValueError(f"vendor {vendor!r} defines no release keys (its contract's release is empty)")
    return {"vendor": vendor, "matrix": {key: _content(matrix[key]) for key in sorted(keys) if key in matrix}}


def release_id(matrix: dict, keys: list[str], vendor: str) -> str:
    """A short hash of the release's inputs: equal inputs, equal id, whatever their order."""
    text = json.dumps(release_inputs(matrix, keys, vendor), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def release_state(dirs: list[str], complete: list[str], current: str, history: list[str],
                  wanted: str = "", keep: int = 2) -> dict:
    """What a node holds and what follows from it.

    dirs: release ids with a directory; complete: those with a completion marker;
    current: the id `current` points at ("" = none); history: ids in the order they were
    made current (oldest first); wanted: the release a converge installs ("" = none);
    keep: releases kept, the current one included.

    previous: the most recently current complete release other than the current one
    ("" = none, nothing to roll back to); prune: the directories to remove (complete
    releases beyond `keep`, in the history's order, and incomplete ones, which only a
    release id names), never the current, the wanted or the previous one.
    """
    if keep < 1:
        raise ValueError(f"fleet_releases_keep must be at least 1, got {keep}")
    # A release is a directory that holds the marker or that is named as the fleet names
    # releases (an install interrupted before its marker); anything else in the directory
    # is someone else's and is never pruned.
    present = {d for d in dirs if d in complete or is_release_id(d)}
    done = [r for r in complete if r in present]
    # Each id once, most recently current last; complete releases that were never current
    # (installed, then the run stopped before the switch) count as oldest.
    order: list[str] = []
    for rid in [r for r in sorted(done) if r not in history] + list(history):
        if rid in order:
            order.remove(rid)
        order.append(rid)
    order = [r for r in order if r in done]
    previous = next((r for r in reversed(order) if r != current), "")
    # Kept: the current release and the keep-1 most recently current others (with keep 1,
    # only the current one: no rollback target is kept).
    kept = {current, wanted} | set([r for r in reversed(order) if r != current][:keep - 1])
    prune = sorted(r for r in present if r not in kept)
    return {
        "current": current,
        "wanted": wanted,
        "installed": order,
        "incomplete": sorted(present - set(done)),
        "wanted_complete": bool(wanted) and wanted in done,
        "previous": previous,
        "prune": prune,
        "history": [r for r in order if r in present],
    }


def history_after_switch(history: list[str], target: str) -> list[str]:
    """The activation history once `target` is made current."""
    return [r for r in history if r != target] + [target]
