"""`vllm-fleet lab up|down|status|start|stop`: the lab's command line.

vllm-fleet's CLI imports nothing of the lab: it finds this subcommand through the entry point
group ``vllm_fleet.commands`` (lab/pyproject.toml), and calls `add_command` with its subparsers
and the entry point's name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import vllm_fleet_lab as lab
from vllm_fleet.exit_codes import EXIT_ERROR, EXIT_OK

HELP = "the local lab of systemd-nspawn nodes with simulated accelerators"


def add_command(subparsers, name: str) -> argparse.ArgumentParser:
    """Add `vllm-fleet <name>` (the entry point's name: lab) to vllm-fleet's subparsers."""
    p_lab = subparsers.add_parser(name, help=HELP)
    lab_sub = p_lab.add_subparsers(dest="lab_command", required=True)
    p_up = lab_sub.add_parser("up", help="build and boot the lab, write inventories/<name>")
    p_up.add_argument("--nodes", type=int, default=1, help="nodes per vendor (default 1)")
    p_up.add_argument("--vendors", help=f"comma-separated vendors (default: {','.join(lab.VENDORS)})")
    p_up.add_argument("--skip-vendors", default="",
                      help="comma-separated vendors left out of --vendors' list (molecule's scenario fleet: cpu, "
                           "which its own scenario runs)")
    p_up.add_argument("--port-base", type=int, help="first port of the lab's block of 1000 (default: next free)")
    p_up.add_argument("--routers", type=int, default=0,
                      help="router nodes (HAProxy, roles/services/router) besides the fleet's, in the group router "
                      "(default 0)")
    p_up.add_argument("--monitoring", type=int, default=0,
                      help="monitoring nodes (Prometheus, roles/services/monitoring) besides the fleet's, in the group "
                      "monitoring")
    p_up.add_argument("--mirror", action="store_true",
                      help="add mirror-01, the fleet's own mirror filled from the lab's web root: the lab as an "
                      "air-gapped site (docs/air-gapped.md)")
    p_up.add_argument("--container-nodes", default="", metavar="NODES",
                      help="NVIDIA nodes (comma-separated, e.g. nvidia-01) run in container mode with podman, "
                      "pulling upstream's vLLM image from the lab's registry (lab/fixtures/README.md)")
    p_up.add_argument("--inventory", help="where to write the inventory (default: inventories/<name>)")
    p_down = lab_sub.add_parser("down", help="remove every trace of the lab")
    p_down.add_argument("--purge", action="store_true", help="also remove the build cache (rootfs, downloads)")
    lab_sub.add_parser("status", help="list the lab's nodes")
    for verb in ("stop", "start"):
        lab_sub.add_parser(verb, help=f"{verb} one node").add_argument("node")
    # VLLM_FLEET_LAB_NAME names the lab of every command without --name: a person's second lab, or
    # molecule's scenario's lab (.config/molecule/config.yml sets it for the scenario's playbooks).
    name = os.environ.get("VLLM_FLEET_LAB_NAME") or lab.DEFAULT_LAB
    for p in lab_sub.choices.values():
        p.add_argument("--name", default=name,
                       help=f"lab name (default: $VLLM_FLEET_LAB_NAME, else {lab.DEFAULT_LAB}; now {name})")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    p_lab.set_defaults(func=cmd_lab)
    return p_lab


def cmd_lab(args) -> int:
    started = time.monotonic()
    # Each step with the seconds since the command began: what each phase of `lab up` takes
    # (rootfs, mirrors and wheels, boot) shows in its output, as scripts/demo prints it.
    log = (lambda m: None) if args.json else (
        lambda m: print(f"==> [{time.monotonic() - started:6.1f} s] {m}", file=sys.stderr))
    try:
        if args.lab_command == "up":
            skipped = set(filter(None, args.skip_vendors.split(",")))
            vendors = [v for v in (args.vendors.split(",") if args.vendors else lab.VENDORS) if v not in skipped]
            inv = Path(args.inventory) if args.inventory else None
            rows = lab.up(args.name, vendors=vendors, nodes_per_vendor=args.nodes, port_base=args.port_base,
                          inventory_dir=inv, routers=args.routers, monitors=args.monitoring, mirror=args.mirror,
                          container_nodes=list(filter(None, args.container_nodes.split(","))), log=log)
        elif args.lab_command == "down":
            lab.down(args.name, purge=args.purge, log=log)
            return EXIT_OK
        elif args.lab_command == "stop":
            lab.stop(args.name, args.node)
            return EXIT_OK
        elif args.lab_command == "start":
            lab.start(args.name, args.node)
            return EXIT_OK
        else:
            rows = lab.status(args.name)
    except (lab.LabError, RuntimeError, ValueError) as exc:
        print(f"vllm-fleet lab {args.lab_command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, ["node", "vendor", "ssh", "state"])
    return EXIT_OK


def print_table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        print("(no nodes)")
        return
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
