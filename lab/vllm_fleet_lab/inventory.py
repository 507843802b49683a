"""Writes the lab's inventory from the templates in lab/inventory/.

The lab inventory is a normal vllm-fleet inventory: the same groups and the same
matrix versions as inventories/example, pointing at the lab's mirrors and
pinning the lab's commits and checksums.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import jinja2
import yaml

from vllm_fleet import vendors
from vllm_fleet_lab import hardware
from vllm_fleet_lab.nodes import ssh_options
from vllm_fleet_lab.paths import INVENTORY_TEMPLATES, LabPaths

MARKER = ".vllm-fleet-lab"


def render_context(paths: LabPaths, nodes: list, manifest: dict) -> dict:
    versions = yaml.safe_load((INVENTORY_TEMPLATES / "versions.yml").read_text())
    by_vendor: dict[str, list] = {}
    for n in nodes:
        by_vendor.setdefault(n.vendor, []).append(n)
    return {
        "lab": paths.name,
        "paths": paths,
        "nodes": nodes,
        "by_vendor": by_vendor,
        "manifest": manifest,
        "versions": versions,
        "ssh_key": str(paths.ssh_key),
        "ssh_common_args": shlex.join(ssh_options(paths)),
        "web": paths.web_url,
        "service_port": paths.service_port,
        "hardware": hardware.load_profile,
        "vendors": vendors.VENDORS,
        # CPU nodes are this machine's CPU: its facts, as the facts module reads them.
        "cpu": vendors.accel().read_cpu(),
    }


def write(inv_dir: Path, paths: LabPaths, nodes: list, manifest: dict) -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(INVENTORY_TEMPLATES)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    ctx = render_context(paths, nodes, manifest)
    if inv_dir.exists():
        remove(inv_dir)
    inv_dir.mkdir(parents=True)
    (inv_dir / MARKER).write_text(f"written by `vllm-fleet lab up` for lab {paths.name}; `lab down` removes it\n")
    # This machine's ports, keys and checksums: never committed, wherever the inventory is
    # written (the repository ignores no inventory of its own: a site's are committed).
    (inv_dir / ".gitignore").write_text(f"# written by `vllm-fleet lab up` for lab {paths.name}: never committed\n*\n")
    for tpl in sorted(INVENTORY_TEMPLATES.rglob("*.j2")):
        rel = tpl.relative_to(INVENTORY_TEMPLATES)
        if rel.parts[0] == "host_vars":
            # host_vars/node.yml.j2 is rendered once per node, as host_vars/<node>.yml.
            for node in nodes:
                text = env.get_template(str(rel)).render(node=node, **ctx)
                yaml.safe_load(text)
                out = inv_dir / "host_vars" / f"{node.name}.yml"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text)
            continue
        vendor_dir = rel.parts[1] if rel.parts[0] == "group_vars" and len(rel.parts) > 2 else None
        if vendor_dir and vendor_dir.endswith("-nodes") and vendor_dir[:-len("-nodes")] not in ctx["by_vendor"]:
            continue  # no node of that vendor in this lab
        text = env.get_template(str(rel)).render(**ctx)
        yaml.safe_load(text)  # a template bug must not produce an unreadable inventory
        out = inv_dir / str(rel)[: -len(".j2")]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def remove(inv_dir: Path) -> None:
    """Remove an inventory directory, but only one the lab wrote."""
    if (inv_dir / MARKER).exists():
        shutil.rmtree(inv_dir)
