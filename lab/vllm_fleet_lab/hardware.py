"""Installs a vendor's simulated hardware into a lab node.

What a node gets, from lab/fixtures/hardware/:
- /etc/vllm-fleet-lab/hardware.json: the profile, which only the simulators read;
- the vendor's SMI tool at its real path (it reports "driver not loaded" until the
  vendor's driver installer has run);
- a boot-time unit that creates the device nodes (/dev is a fresh tmpfs on every
  container boot, as it is a fresh devtmpfs on every real boot);
- a fake PCI tree, bind-mounted read-only over /sys/bus/pci/devices by the supervisor.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vllm_fleet_lab.paths import FIXTURES_DIR

HARDWARE_DIR = FIXTURES_DIR / "hardware"
LAB_ETC = "etc/vllm-fleet-lab"
DEVICES_UNIT = "vllm-fleet-lab-devices.service"
# The profile's device_nodes.major: NVIDIA's real one, else one from the range Linux
# reserves for local/experimental use (240 when a profile names none).
_DEFAULT_MAJOR = 240


def load_profile(vendor: str) -> dict:
    path = HARDWARE_DIR / "profiles" / f"{vendor}.json"
    if not path.exists():
        raise ValueError(f"no simulated hardware profile for vendor {vendor!r} ({path})")
    return json.loads(path.read_text())


def device_nodes(profile: dict) -> list[tuple[str, int, int]]:
    """(path under /dev, major, minor) of every device node the profile declares."""
    spec = profile.get("device_nodes") or {}
    major = int(spec.get("major", _DEFAULT_MAJOR))
    nodes = []
    patterns = _as_list(spec.get("per_device")) + _as_list(spec.get("per_device_extra"))
    for k, pattern in enumerate(patterns):
        for i in range(profile["count"]):
            # {render_minor}: the minor of /dev/dri/renderD128... (128 + index)
            nodes.append((pattern.format(index=i, render_minor=128 + i), major, k * 64 + i))
    for j, control in enumerate(_as_list(spec.get("control"))):
        nodes.append((control, major, 200 + j))
    return nodes


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def install(vendor: str, node_index: int, root: Path, pci_dir: Path) -> dict:
    """Write the simulated hardware of `vendor` into the node rooted at `root`."""
    profile = load_profile(vendor)
    etc = root / LAB_ETC
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hardware.json").write_text(json.dumps(profile, indent=2, sort_keys=True) + "\n")

    smi = profile.get("smi") or {}
    if smi.get("path"):
        src = HARDWARE_DIR / "bin" / smi["tool"]
        dest = root / smi["path"].lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(0o755)

    _install_devices_unit(profile, root)
    _write_pci_tree(profile, pci_dir)
    return profile


def install_none(pci_dir: Path) -> None:
    """A node without accelerators (a router): its PCI tree has the host bridge only."""
    _write_pci_tree({"count": 0}, pci_dir)


def _install_devices_unit(profile: dict, root: Path) -> None:
    lines = ["#!/bin/sh", "# Written by vllm-fleet lab: the simulated accelerators' device nodes.", "set -e"]
    for path, major, minor in device_nodes(profile):
        full = f"/dev/{path}"
        parent = str(Path(full).parent)
        if parent != "/dev":
            lines.append(f"mkdir -p {parent}")
        lines.append(f"[ -e {full} ] || mknod -m 0660 {full} c {major} {minor}")
    script = root / "usr/local/lib/vllm-fleet-lab/make-devices"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    unit = root / "etc/systemd/system" / DEVICES_UNIT
    unit.write_text(
        "[Unit]\n"
        "Description=vllm-fleet lab: simulated accelerator device nodes\n"
        "DefaultDependencies=no\n"
        "Before=sysinit.target\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "ExecStart=/usr/local/lib/vllm-fleet-lab/make-devices\n\n"
        "[Install]\n"
        "WantedBy=sysinit.target\n"
    )
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / DEVICES_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{DEVICES_UNIT}")


def _write_pci_tree(profile: dict, pci_dir: Path) -> None:
    if pci_dir.exists():
        shutil.rmtree(pci_dir)
    pci_dir.mkdir(parents=True)
    pci = profile.get("pci") or {}
    for bus_id in profile.get("bus_ids", [])[: profile["count"]]:
        dev = pci_dir / bus_id.lower()
        dev.mkdir()
        (dev / "vendor").write_text(pci["vendor_id"] + "\n")
        (dev / "device").write_text(pci["device_id"] + "\n")
        (dev / "class").write_text(pci.get("class", "0x120000") + "\n")
        (dev / "subsystem_vendor").write_text(pci["vendor_id"] + "\n")
    # A host bridge, so the tree is not made of accelerators only.
    bridge = pci_dir / "0000:00:00.0"
    bridge.mkdir()
    (bridge / "vendor").write_text("0x8086\n")
    (bridge / "device").write_text("0x1237\n")
    (bridge / "class").write_text("0x060000\n")
