"""Where the lab keeps its state, and how ports are laid out.

Every lab has a name ("lab" by default; molecule scenarios use their own) and a
block of 1000 TCP ports on 127.0.0.1. The nodes share the host's loopback (no
--private-network), so every port a node listens on must be unique across labs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from vllm_fleet.project import PROJECT_DIR

#: Per-lab state: node overlays, keys, the web root, pid files. `lab down` removes it.
STATE_DIR = Path(os.environ.get("VLLM_FLEET_LAB_DIR", "/var/lib/vllm-fleet-lab"))
#: Build cache shared by all labs (base rootfs, downloaded wheels). Kept by `lab down`,
#: removed by `lab down --purge`.
CACHE_DIR = Path(os.environ.get("VLLM_FLEET_LAB_CACHE", "/var/cache/vllm-fleet-lab"))
#: The simulated pieces (hardware, SMI tools, installers, engine stand-in).
FIXTURES_DIR = PROJECT_DIR / "lab" / "fixtures"
#: Templates of the inventory that `lab up` writes.
INVENTORY_TEMPLATES = PROJECT_DIR / "lab" / "inventory"

PORT_BLOCK = 1000
FIRST_PORT_BASE = 22000
LAST_PORT_BASE = 39000
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


@dataclass(frozen=True)
class LabPaths:
    """Filesystem layout and port plan of one named lab."""

    name: str
    port_base: int

    @property
    def root(self) -> Path:
        return STATE_DIR / self.name

    @property
    def nodes_dir(self) -> Path:
        return self.root / "nodes"

    @property
    def www(self) -> Path:
        return self.root / "www"

    @property
    def ssh_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """The nodes' host keys, written by `up`: the only file that vouches for them."""
        return self.root / "ssh" / "known_hosts"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def web_port(self) -> int:
        return self.port_base + 100

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def registry_port(self) -> int:
        """The lab's container registry (vllm_fleet_lab.images): upstream's images."""
        return self.port_base + 101

    @property
    def registry_host(self) -> str:
        return f"127.0.0.1:{self.registry_port}"

    def ssh_port(self, index: int) -> int:
        """SSH port of the node with this 0-based index in the lab."""
        return self.port_base + 1 + index

    def service_port(self, index: int, slot: int) -> int:
        """Port for the `slot`-th service (model) of node `index`."""
        return self.port_base + 200 + index * 20 + slot


def _registry_path() -> Path:
    return STATE_DIR / "ports.json"


@contextlib.contextmanager
def cache_lock(path: Path):
    """Hold the lock of one entry of the shared build cache (rootfs, wheels, npm, CPU wheels,
    tiny models): labs booted at the same moment on a machine without caches (CI on a fresh
    machine runs five side by side) build each entry once; the others wait, then find it
    complete. Every writer of CACHE_DIR takes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _registry():
    """The port registry, read and rewritten under an exclusive lock: labs booted at the
    same moment (molecule scenarios and the integration tests run side by side) must
    not both take the same block."""
    registry = _registry_path()
    registry.parent.mkdir(parents=True, exist_ok=True)
    with open(registry.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken: dict[str, int] = json.loads(registry.read_text()) if registry.exists() else {}
        before = dict(taken)
        yield taken
        if taken != before:
            tmp = registry.with_suffix(".tmp")
            tmp.write_text(json.dumps(taken, indent=2, sort_keys=True) + "\n")
            tmp.replace(registry)


def lab_paths(name: str, port_base: int | None = None) -> LabPaths:
    """Return the layout of lab `name`, reserving a port block on first use."""
    if not NAME_RE.match(name):
        raise ValueError(f"lab name {name!r}: use lowercase letters, digits and '-', starting with a letter")
    with _registry() as taken:
        if name in taken and port_base in (None, taken[name]):
            return LabPaths(name, taken[name])
        if port_base is None:
            used = set(taken.values())
            port_base = next((b for b in range(FIRST_PORT_BASE, LAST_PORT_BASE + 1, PORT_BLOCK) if b not in used), None)
            if port_base is None:
                raise RuntimeError("no free port block for another lab; remove one with `vllm-fleet lab down`")
        elif port_base in {b for n, b in taken.items() if n != name}:
            raise ValueError(f"port base {port_base} is used by another lab")
        taken[name] = port_base
    return LabPaths(name, port_base)


def release_ports(name: str) -> None:
    if not _registry_path().exists():
        return
    with _registry() as taken:
        taken.pop(name, None)


def known_labs() -> list[str]:
    registry = _registry_path()
    return sorted(json.loads(registry.read_text())) if registry.exists() else []
