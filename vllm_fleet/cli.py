"""The `vllm-fleet` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vllm_fleet import __version__

EXIT_OK = 0
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3
EXIT_INVALID = 4
EXIT_USAGE = 64


def _print_table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        print("(none)")
        return
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def cmd_lab(args) -> int:
    from vllm_fleet import lab

    try:
        if args.lab_command == "up":
            vendors = args.vendors.split(",") if args.vendors else list(lab.VENDORS)
            inv = Path(args.inventory) if args.inventory else None
            rows = lab.up(args.name, vendors=vendors, nodes_per_vendor=args.nodes, port_base=args.port_base,
                          inventory_dir=inv, log=lambda m: print(f"==> {m}", file=sys.stderr))
        elif args.lab_command == "down":
            lab.down(args.name, purge=args.purge, log=lambda m: print(f"==> {m}", file=sys.stderr))
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
        return EXIT_FAILED
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows, ["node", "vendor", "ssh", "state"])
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-fleet", description="Provision vLLM inference nodes with Ansible.")
    parser.add_argument("--version", action="version", version=f"vllm-fleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_lab = sub.add_parser("lab", help="the local lab of systemd-nspawn nodes with simulated accelerators")
    lab_sub = p_lab.add_subparsers(dest="lab_command", required=True)
    p_up = lab_sub.add_parser("up", help="build and boot the lab, write inventories/<name>")
    p_up.add_argument("--nodes", type=int, default=1, help="nodes per vendor (default 1)")
    p_up.add_argument("--vendors", help="comma-separated vendors (default: ascend,metax,musa,nvidia)")
    p_up.add_argument("--port-base", type=int, help="first port of the lab's block of 1000 (default: next free)")
    p_up.add_argument("--inventory", help="where to write the inventory (default: inventories/<name>)")
    p_down = lab_sub.add_parser("down", help="remove every trace of the lab")
    p_down.add_argument("--purge", action="store_true", help="also remove the build cache (rootfs, downloads)")
    lab_sub.add_parser("status", help="list the lab's nodes")
    for verb in ("stop", "start"):
        p = lab_sub.add_parser(verb, help=f"{verb} one node")
        p.add_argument("node")
    for p in lab_sub.choices.values():
        p.add_argument("--name", default="lab", help="lab name (default: lab)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    p_lab.set_defaults(func=cmd_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
