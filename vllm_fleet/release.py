"""Versioned releases of vLLM's environment on a node (host mode).

A release is the venv (and the source checkouts and overlays that live with it) built
from a vendor's defining matrix entries; it is installed under
`<fleet_base_dir>/releases/<id>/` and served through the stable `<fleet_base_dir>/current`
link. This module is the one place that names a release (`release_id`) and says what it is
built from (`release_inputs`, the pins); what a node's releases say (which one is previous,
which are pruned) is decided on the node, by module_utils/vllm_fleet_release.py.
"""

from __future__ import annotations

import hashlib
import json

from vllm_fleet.project import module_util

# Keys of a matrix entry that say where something is fetched from, not what it is: a
# new mirror of the same commit is the same release.
_WHERE_KEYS = frozenset({"sources", "url", "urls", "mirror", "mirrors"})


#: Hex digits of a release id (the node's half recognises its releases by them).
ID_LENGTH: int = module_util("vllm_fleet_release").ID_LENGTH


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


def node_pins(pins: dict, span_pins: dict | None, spans: bool) -> dict[str, str]:
    """A node's pins ({pip distribution: matrix key}): its vendor contract's ``pins``, then its
    ``cluster.pins`` (Ray) only where one of the node's models spans nodes (``spans``,
    vllm_fleet.models.spans_node). A node without such a model installs no Ray, whatever the
    matrix pins: the install step, doctor and the release's name all take their pins from here."""
    if not isinstance(pins, dict) or not isinstance(span_pins or {}, dict):
        raise ValueError(f"expected the contract's pins and cluster.pins as mappings, got {pins!r} and {span_pins!r}")
    return {**pins, **(span_pins or {})} if spans else dict(pins)


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
