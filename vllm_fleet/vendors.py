"""The accelerator vendors vllm-fleet supports: one list, one contract each.

The list is the facts module's hardware table (``module_utils/vllm_fleet_accel.py``
``VENDORS``: how a vendor's devices are found on a node), since a vendor the facts
module cannot detect cannot be provisioned either. Everything else that needs the list
reads it from here: the inventory schema's ``fleet_accelerator.vendor`` enum, the
per-vendor rules, model resolution and the lab.

Each vendor has one role, ``roles/vendors/<vendor>``, whose ``vars/main.yml`` holds its
contract, ``<vendor>_contract``: how vLLM runs there, which groups open the devices,
which variable limits a process to its devices, which driver states are healthy, what
doctor compares, the container image. The roles read it as ``fleet_vendor`` (published
by ``roles/stages/fleet``); Python reads its plain (untemplated) entries through
:func:`contract`. See docs/CONTRIBUTING-VENDOR.md.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from vllm_fleet import release
from vllm_fleet.project import ROLES_DIR, module_util
from vllm_fleet.project import role_dir as _role_dir


def accel():
    """module_utils/vllm_fleet_accel.py: the facts module's hardware table and readers."""
    return module_util("vllm_fleet_accel")


def _hardware_table() -> dict:
    return accel().VENDORS


#: Every supported vendor, in the order of the hardware table.
VENDORS: tuple[str, ...] = tuple(_hardware_table())
#: The vendors whose devices are accelerators on the PCI bus (the hardware table's pci_vendor_id):
#: every vendor but the CPU's, whose "devices" are the node's NUMA nodes.
ACCELERATORS: tuple[str, ...] = tuple(v for v in VENDORS if _hardware_table()[v].get("pci_vendor_id"))


def group(vendor: str) -> str:
    """The inventory group of a vendor's nodes: ascend -> ascend-nodes."""
    return f"{vendor}-nodes"


def role_dir(vendor: str) -> Path:
    """A vendor's stack: roles/vendors/<vendor>."""
    return ROLES_DIR / "vendors" / vendor


def matrix_schema(vendor: str) -> dict | None:
    """The JSON Schema of the vendor's fleet_matrix (roles/vendors/<vendor>/meta/matrix.schema.yml), if it has one."""
    path = role_dir(vendor) / "meta" / "matrix.schema.yml"
    return yaml.safe_load(path.read_text()) if path.is_file() else None


@cache
def contract(vendor: str) -> dict:
    """The vendor's contract as written in roles/vendors/<vendor>/vars/main.yml, over the shared defaults.

    Entries that are templates (paths, matrix versions) stay unrendered strings here;
    Python uses the plain ones (deploy_modes, visible_devices_env, ...).
    """
    if vendor not in VENDORS:
        raise KeyError(f"unknown vendor {vendor!r}; supported: {', '.join(VENDORS)}")
    data = yaml.safe_load((role_dir(vendor) / "vars" / "main.yml").read_text()) or {}
    return {**contract_defaults(), **data[f"{vendor}_contract"]}


@cache
def contract_defaults() -> dict:
    """What a contract is where it says nothing: roles/stages/fleet's _fleet_contract_defaults, which the
    roles merge under it the same way (top-level keys, each replaced whole)."""
    data = yaml.safe_load((_role_dir("fleet") / "vars" / "main.yml").read_text()) or {}
    return data["_fleet_contract_defaults"]


def parser_release(release: str, vendor: str | None) -> str:
    """The vLLM release whose parser judges a vendor's command lines: the matrix's, with the
    local version of the vendor's build (its contract's vllm_build: 0.11.0 -> 0.11.0+cpu)."""
    build = contract(vendor).get("vllm_build") if vendor in VENDORS else ""
    return f"{release}+{build}" if build and not release.endswith(f"+{build}") else release


def visible_devices_env(vendor: str) -> str | None:
    """The variable that limits a process to the model's devices on this vendor, if any."""
    return contract(vendor).get("visible_devices_env") or None


def deploy_modes(vendor: str) -> list[str]:
    return list(contract(vendor).get("deploy_modes") or ["host"])


def shared_devices(vendor: str) -> bool:
    """Whether the models of a node share its devices (CPU nodes' NUMA nodes) rather than each get its own."""
    return bool(contract(vendor).get("shared_devices"))


def pins(vendor: str, spans: bool = False) -> dict[str, str]:
    """The pins ({pip distribution: matrix key}) of a node of `vendor`: its contract's `pins`, and
    its `cluster.pins` (Ray) where one of the node's models spans nodes (release.node_pins)."""
    terms = contract(vendor)
    return release.node_pins(terms["pins"], (terms.get("cluster") or {}).get("pins"), spans)


def vendor_release_id(matrix: dict, vendor: str, spans: bool = False) -> str:
    """The id of the release `matrix` defines on a node of `vendor` (its contract's release keys)."""
    return release.release_id(matrix, release_keys(vendor, spans), vendor)


def release_keys(vendor: str, spans: bool = False) -> list[str]:
    """The matrix entries that name the release of a node of `vendor`: its contract's `release` and
    the node's pins (the cluster's too where one of its models spans nodes)."""
    return release.release_keys(contract(vendor)["release"], pins(vendor, spans))
