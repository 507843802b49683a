"""The `vllm-fleet` command line.

    vllm-fleet provision -i INVENTORY [-l GROUP] [--check] [--full] [--prune] [-e VARS] [--secrets FILE] [--json]
    vllm-fleet plan      -i INVENTORY -o DIR [-l GROUP] [--json]
    vllm-fleet doctor    -i INVENTORY [-l GROUP] [--json]
    vllm-fleet verify    -i INVENTORY [-l GROUP] [--json]
    vllm-fleet rollback  -i INVENTORY [-l HOSTS] [--json]
    vllm-fleet rollout   -i INVENTORY [-l HOSTS] [--serial N|P%] [--max-fail-percentage P]
                         [--canary N --gate bench [--history-dir DIR] [--accuracy-set DIR]] [--json]
    vllm-fleet status    -i INVENTORY [-l GROUP] [--watch [SECONDS]] [--window SECONDS] [--json]
    vllm-fleet bench     -i INVENTORY [-l HOSTS] [-o DIR] [--conversations N ...] [--max-tokens N]
                         [--evalscope ...] [--history] [--json]
    vllm-fleet lab up|down|status|start|stop   (the lab's own package, lab/: see COMMANDS_GROUP)

Every command that runs a playbook prints validation's warnings (`warning:` lines; "warnings" in
--json) and takes --strict: validation refuses, with exit 4, what it would otherwise warn about (a
value the inventory sets that never reaches a host, a variable nothing reads, placeholder checksums,
a pinned vLLM release whose serve flags cannot be checked, a mirror's apt key trusted on first use).
`status` prints the same warnings.

Every command that reads an inventory acts only on the one named with -i: there is no default
(neither the lab's nor the checkout's), and a command without one exits 64 saying so.

Exit codes: 0 success, 2 a host failed, 3 a host was unreachable, 4 the inventory is
invalid (nothing was changed), 64 wrong usage, 1 anything else; `status`: 5 a model or
device is down, 3 a node unreachable over SSH (nothing down).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from importlib import metadata
from pathlib import Path

import yaml

from vllm_fleet import __version__, api, bench, canary, live_status
from vllm_fleet.exit_codes import EXIT_ERROR, EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_USAGE
from vllm_fleet.exit_codes import EXIT_UNREACHABLE as EXIT_UNREACHABLE  # re-exported: cli.EXIT_UNREACHABLE

#: -i's help: no command falls back to an inventory it was not given (issue 35, item 2).
INVENTORY_HELP = "the inventory to act on (required; the lab's, after `vllm-fleet lab up`: inventories/lab)"
EXIT_CODES = ("Exit codes: 0 ok, 1 an error of vllm-fleet or Ansible, 2 a host failed, 3 a host was unreachable, "
              "4 the inventory is invalid (nothing changed), 5 (status) a model or device is down, "
              "64 wrong usage (an option, a missing -i, a file that cannot be read), 130 interrupted.")
HISTORY_DIR = canary.HISTORY_DIR


# ------------------------------------------------------------------ progress

class Progress:
    """Live per-host progress on stderr.

    On a terminal, one line per host is redrawn in place (current task, counts); in a
    log (not a TTY), one line per play, per change, failure and unreachable host.
    """

    RESULTS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
               "runner_on_unreachable": "unreachable"}

    def __init__(self, stream=sys.stderr, live: bool | None = None):
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.hosts: dict[str, dict] = {}
        self.drawn = 0
        self.started = time.monotonic()

    def __call__(self, event: dict) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._line(f"== {data.get('play', '')}")
            return
        if kind == "runner_on_start":
            host = data.get("host", "?")
            self.hosts.setdefault(host, {"ok": 0, "changed": 0, "failed": 0, "task": ""})["task"] = self._task(data)
            self._draw()
            return
        result = self.RESULTS.get(kind)
        if not result:
            return
        host = data.get("host", "?")
        state = self.hosts.setdefault(host, {"ok": 0, "changed": 0, "failed": 0, "task": ""})
        res = data.get("res") or {}
        if result == "ok" and res.get("changed"):
            result = "changed"
        if result in state:
            state[result] += 1
        if result in ("changed", "failed", "unreachable"):
            message = ""
            if result != "changed":
                message = ": " + str(res.get("msg") or res.get("stderr") or "").strip().splitlines()[0][:200] \
                    if (res.get("msg") or res.get("stderr")) else ""
            self._line(f"   {host:<14} {result:<11} {self._task(data)}{message}")
        else:
            self._draw()

    @staticmethod
    def _task(data: dict) -> str:
        role = data.get("role")
        return f"{role} : {data.get('task', '')}" if role else data.get("task", "")

    def _clear(self) -> None:
        if self.live and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0

    def _line(self, text: str) -> None:
        self._clear()
        self.stream.write(text + "\n")
        self._draw()

    def _draw(self) -> None:
        if not self.live:
            return
        self._clear()
        elapsed = time.monotonic() - self.started
        for host, s in sorted(self.hosts.items()):
            self.stream.write(f"   {host:<14} ok {s['ok']:>3}  changed {s['changed']:>3}  failed {s['failed']:>2}  "
                              f"[{elapsed:5.0f} s] {s['task'][:70]}\n")
        self.drawn = len(self.hosts)
        self.stream.flush()

    def close(self) -> None:
        self._clear()
        self.stream.flush()


# ------------------------------------------------------------------ helpers

def parse_extravars(items: list[str]) -> dict:
    """-e like ansible-playbook's: KEY=VALUE, a JSON/YAML mapping, or @FILE."""
    merged: dict = {}
    for item in items or []:
        if item.startswith("@"):
            data = yaml.safe_load(Path(item[1:]).read_text())
        elif item.lstrip().startswith("{"):
            data = yaml.safe_load(item)
        else:
            data = {}
            for pair in item.split():
                if "=" not in pair:
                    raise ValueError(f"-e {item!r}: expected KEY=VALUE, a JSON mapping or @FILE")
                key, value = pair.split("=", 1)
                data[key] = value
        if not isinstance(data, dict):
            raise ValueError(f"-e {item!r} is not a mapping")
        merged.update(data)
    return merged


def load_secrets(path: str | None) -> dict | None:
    if not path:
        return None
    if not Path(path).is_file():
        raise FileNotFoundError(f"--secrets {path}: no such file (a YAML mapping of secret variables: "
                                "hub tokens, API keys)")
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"--secrets {path}: expected a YAML mapping of variables")
    return data


def _inventory(path: str | None) -> str:
    """The inventory named with -i, resolved against the working directory only: never a default,
    never the checkout vllm-fleet was installed from (a command acts on what it was given)."""
    if not path:
        raise ValueError("no inventory given: name the one to act on with -i inventories/site "
                         "(the lab's, after `vllm-fleet lab up`: -i inventories/lab); vllm-fleet has no default")
    p = Path(path)
    if p.exists():
        return str(p.resolve())
    lab = p.name.startswith("lab")
    raise FileNotFoundError(f"inventory {path} does not exist (relative to {Path.cwd()})"
                            + (" (boot the lab first: vllm-fleet lab up)" if lab else ""))


# ------------------------------------------------------------------ commands

def _strict(args, extravars: dict | None) -> dict | None:
    """--strict: validation refuses what it would warn about (roles/stages/validate_inventory)."""
    if not getattr(args, "strict", False):
        return extravars
    return {**(extravars or {}), "validate_inventory_strict": True}


def cmd_run(args) -> int:
    inventory = _inventory(args.inventory)
    extravars = _strict(args, parse_extravars(args.extra_vars))
    secrets = load_secrets(args.secrets)
    progress = None if args.quiet else Progress()
    kwargs = dict(limit=args.limit, extravars=extravars, secrets=secrets, event_handler=progress)
    if args.private_data_dir:
        kwargs["private_data_dir"] = args.private_data_dir
    try:
        if args.command == "provision":
            result = api.provision(inventory, check=args.check, full=args.full, prune=args.prune, **kwargs)
        elif args.command == "doctor":
            result = api.doctor(inventory, **kwargs)
        elif args.command == "rollback":
            result = api.rollback(inventory, **kwargs)
        elif args.command == "rollout" and args.canary:
            if args.gate != "bench":
                raise ValueError("--canary N needs --gate bench: the canaries are judged by seed 000's benchmark")
            result = api.canary_rollout(inventory, args.canary, serial=args.serial,
                                        max_fail_percentage=args.max_fail_percentage, history_dir=args.history_dir,
                                        conversations=args.conversations, max_tokens=args.max_tokens,
                                        accuracy_set=args.accuracy_set, accuracy_limit=args.accuracy_limit, **kwargs)
        elif args.command == "rollout":
            if args.gate or args.accuracy_set:
                raise ValueError("--gate bench (and --accuracy-set) judge canaries: give their count with --canary N")
            result = api.rollout(inventory, serial=args.serial, max_fail_percentage=args.max_fail_percentage, **kwargs)
        else:
            result = api.verify(inventory, **kwargs)
    finally:
        if progress:
            progress.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result)
    return result.exit_code


def cmd_plan(args) -> int:
    inventory = _inventory(args.inventory)
    progress = None if args.quiet else Progress()
    try:
        extravars = _strict(args, parse_extravars(args.extra_vars))
        result = api.plan(inventory, args.out, limit=args.limit, extravars=extravars,
                          secrets=load_secrets(args.secrets), event_handler=progress)
    finally:
        if progress:
            progress.close()
    if args.json:
        print(json.dumps({"out_dir": result.out_dir, "files": result.files, "commands": result.commands,
                          "fleet_files": result.fleet_files, "run": result.run.to_dict()}, indent=2))
    else:
        print(result)
    return result.run.exit_code


def cmd_status(args) -> int:
    """One table of every model on every node (vllm_fleet/live_status.py); --watch redraws it in place."""
    inventory = _inventory(args.inventory)
    secrets = load_secrets(args.secrets)
    live = args.watch is not None and sys.stdout.isatty() and not args.json
    drawn = 0
    while True:
        result = live_status.status(inventory, limit=args.limit, window=args.window, secrets=secrets,
                                    ssh=not args.no_ssh)
        text = json.dumps(result.to_dict(), indent=None if args.watch is not None else 2) if args.json else str(result)
        if live and drawn:
            sys.stdout.write(f"\x1b[{drawn}F\x1b[J")  # back to the table's first line, clear below
        stamp = time.strftime("%H:%M:%S") + f" every {args.watch:g} s, Ctrl-C to stop" if live else None
        sys.stdout.write((stamp + "\n" if stamp else "") + text + "\n")
        sys.stdout.flush()
        drawn = text.count("\n") + 1 + (1 if stamp else 0)
        if args.watch is None:
            return result.exit_code
        time.sleep(max(0.0, args.watch - result.duration))


def _size(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)([KMG]?)", text.strip().upper())
    if not match or int(match[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 4G, 700M or 1048576")
    return int(match[1]) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match[2]]


def cmd_mirror(args) -> int:
    """vllm-fleet mirror sync|verify|pack|unpack (vllm_fleet/mirror)."""
    def log(message: str) -> None:
        print(message, flush=True)

    if args.mirror_command == "sync":
        result = api.mirror_sync(_inventory(args.inventory), args.out, limit=args.limit,
                                 extravars=parse_extravars(args.extra_vars), check=args.check, log=log,
                                 apt_key=args.apt_key)
        for line in [str(result.run)] if not result.run.ok else result.run.warning_lines():
            print(line)
        return result.exit_code
    if args.mirror_command == "verify":
        problems = api.mirror_verify(args.path, log=log)
    elif args.mirror_command == "pack":
        problems = api.mirror_pack(args.path, args.out, args.volume_size, log=log)
    else:
        problems = api.mirror_unpack(args.path, args.out, log=log)
    for problem in problems:
        print(f"problem: {problem}")
    return EXIT_FAILED if problems else EXIT_OK


def _name_value(text: str) -> str:
    if "=" not in text.strip("="):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MODEL=SEED_MODEL")
    return text


def cmd_bench(args) -> int:
    """Seed 000's multi-turn chat test on the fleet's chat models (vllm_fleet.bench), or with
    --evalscope seed 001's evalscope checks."""
    log = (lambda m: None) if args.json or args.quiet else (lambda m: print(f"==> {m}", file=sys.stderr))
    if args.history:
        rows = canary.history(args.history_dir)
        print(json.dumps(rows, indent=2) if args.json else canary.history_table(rows))
        return EXIT_OK
    try:
        # The options first (a missing --secrets file), then the inventory (Ansible's reader).
        extravars, secrets = parse_extravars(args.extra_vars), load_secrets(args.secrets)
        targets = bench.targets_from_hostvars(bench.inventory_hostvars(_inventory(args.inventory), args.limit),
                                              extravars, secrets, args.model or None)
        if args.evalscope is not None:
            overrides = {k: v for k, v in (("parallel", args.parallel), ("number", args.number)) if v}
            if args.prompt_length:
                overrides.update(min_prompt_length=args.prompt_length, max_prompt_length=args.prompt_length)
            if args.output_tokens:
                overrides.update(min_tokens=args.output_tokens, max_tokens=args.output_tokens)
            rows = bench.run_evalscope(targets, checks=args.evalscope or ["perf", "accuracy"], out_dir=args.out,
                                       tokenizer_path=args.tokenizer_path, dataset_path=args.dataset,
                                       perf_overrides=overrides, accuracy_limit=args.limit_samples,
                                       dry_run=args.dry_run, log=log)
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                for row in rows:
                    print(f"{row['host']} {row['model']} {row['check']}: "
                          f"{'dry run' if row['rc'] is None else 'rc ' + str(row['rc'])}\n  {row['command']}")
            return EXIT_OK if all(r["rc"] in (0, None) for r in rows) else EXIT_FAILED
        result = bench.bench_targets(targets, out_dir=args.out, conversations=args.conversations,
                                     max_tokens=args.max_tokens, timeout=args.timeout, log=log,
                                     seed_models=dict(m.split("=", 1) for m in args.seed_model))
    except bench.BenchError as exc:
        print(f"vllm-fleet bench: {exc}", file=sys.stderr)
        return EXIT_INVALID if isinstance(exc, bench.InventoryError) else EXIT_USAGE
    print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) if args.json else result)
    return result.exit_code


def _seconds(low: float, high: float):
    """An argparse type: a number of seconds from `low` to `high` (a --watch of 0 would redraw
    without pause, a negative --window read nothing)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not from {low:g} to {high:g} seconds")
        return value
    return parse


# ------------------------------------------------------------------ commands of other packages

#: Subcommands that other distributions add (the lab's `vllm-fleet lab`: lab/pyproject.toml) are
#: entry points of this group: the name is the subcommand, the object `add_command(subparsers,
#: name)`, which adds the subcommand's parser with its `func`. The product imports none of them.
COMMANDS_GROUP = "vllm_fleet.commands"
#: The subcommands of this repository's other packages: (what it is, what to do where it is missing);
#: the package's own parser gives the rest.
OPTIONAL_COMMANDS = {
    "lab": ("the lab simulator",
            "not installed: the lab simulator is a package of its own, vllm-fleet-lab (lab/ of the vllm-fleet "
            "checkout); ./scripts/setup installs it into the checkout's .venv (or: pip install -e lab)"),
}


def plugin_commands() -> list[metadata.EntryPoint]:
    """The installed entry points of COMMANDS_GROUP, by name."""
    return sorted(metadata.entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)


def _stand_in(sub, name: str, help_text: str, message: str, code: int) -> None:
    """A subcommand that is not there: whatever follows it, it says why and exits with `code`."""
    p = sub.add_parser(name, help=help_text, add_help=False)
    # Its own -h (argparse's would list nothing), then everything else as it comes: `lab up --nodes 2`.
    p.add_argument("-h", "--help", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def explain(args) -> int:
        print(f"vllm-fleet {name}: {message}", file=sys.stderr)
        return code

    p.set_defaults(func=explain)


def add_plugin_commands(sub) -> None:
    """Add every installed subcommand of COMMANDS_GROUP, and a stand-in for each of
    OPTIONAL_COMMANDS that is missing (exit 64, naming how to get it)."""
    for ep in plugin_commands():
        if ep.name in sub.choices:
            print(f"vllm-fleet: warning: {ep.value} ({COMMANDS_GROUP}) is not used: vllm-fleet already has a "
                  f"command {ep.name}", file=sys.stderr)
            continue
        try:
            ep.load()(sub, ep.name)
        except Exception as exc:  # a broken plugin must not take the product's commands down with it
            if ep.name not in sub.choices:
                what = OPTIONAL_COMMANDS.get(ep.name, (ep.value,))[0]
                _stand_in(sub, ep.name, f"{what} (failed to load)",
                          f"{ep.value} failed to load: {type(exc).__name__}: {exc}", EXIT_ERROR)
    for name, (help_text, missing) in OPTIONAL_COMMANDS.items():
        if name not in sub.choices:
            _stand_in(sub, name, f"{help_text} (not installed)", missing, EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-fleet", description="Provision vLLM inference nodes with Ansible.",
                                     epilog=EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"vllm-fleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p, check: bool = False):
        p.add_argument("-i", "--inventory", help=INVENTORY_HELP)
        p.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook --limit")
        p.add_argument("-e", "--extra-vars", action="append", default=[],
                       help="extra variables: KEY=VALUE, a JSON mapping or @FILE (repeatable)")
        p.add_argument("--secrets", help="YAML file of secret variables (hub tokens, API keys); masked everywhere")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
        p.add_argument("--strict", action="store_true",
                       help="refuse (exit 4) what validation warns about (a value that never reaches a host, a "
                            "variable nothing reads, a vars file of no group, placeholder checksums, a vLLM release "
                            "whose serve flags cannot be checked)")
        if check:
            p.add_argument("--check", action="store_true", help="show what would change, change nothing")

    p = sub.add_parser("provision", help="provision the nodes (site.yml)")
    run_options(p, check=True)
    p.add_argument("--full", action="store_true",
                   help="every node takes its full converge, even one still as its last converge left it")
    p.add_argument("--prune", action="store_true",
                   help="also remove the units of models the inventory no longer lists (without it they keep "
                        "running and are reported as orphaned)")
    p.add_argument("--private-data-dir", help="ansible-runner's directory (default: a new temporary one)")
    p.set_defaults(func=cmd_run)
    for name, help_text in (("doctor", "compare installed versions with the matrix"),
                            ("verify", "check that every served model answers"),
                            ("rollback", "switch nodes back to their previous release and restart their models")):
        p = sub.add_parser(name, help=help_text)
        run_options(p)
        p.add_argument("--private-data-dir", help="ansible-runner's directory (default: a new temporary one)")
        p.set_defaults(func=cmd_run)
    p = sub.add_parser("rollout", help="apply the inventory's changes a batch of nodes at a time, each drained from "
                       "its routers, gated, and sent back to its previous release if it fails")
    run_options(p)
    p.add_argument("--serial", default="1", help="nodes per batch: a number or a percentage such as 25%% (default 1)")
    p.add_argument("--max-fail-percentage", type=int, default=0,
                   help="failed nodes of a batch, in percent, beyond which no later batch starts (default 0)")
    p.add_argument("--canary", type=int, metavar="N",
                   help="converge the run's first N nodes first and judge them (--gate) before the others")
    p.add_argument("--gate", choices=["bench"],
                   help="bench: seed 000's benchmark on the canaries against their models' last accepted figures "
                   "(tolerances: fleet_canary_speed_drop_percent, fleet_canary_ttft_rise_percent, "
                   "fleet_canary_ttft_rise_min_s); "
                   "outside them the canaries go back to their previous release")
    p.add_argument("--accuracy-set", metavar="DIR",
                   help="--gate bench: also seed 001's evalscope accuracy run on this local dataset (MMLU's files); "
                   "a canary may lose fleet_canary_accuracy_drop_points; needs vllm-fleet[evalscope]")
    p.add_argument("--accuracy-limit", type=int, metavar="N",
                   help="--accuracy-set: at most N samples per subset (a small, quick set)")
    p.add_argument("--history-dir", default=HISTORY_DIR,
                   help=f"where accepted figures are kept per model and release (default: {HISTORY_DIR})")
    p.add_argument("--conversations", type=int, nargs="+", metavar="N",
                   help="--gate bench: only these of seed 000's four conversations (default: all)")
    p.add_argument("--max-tokens", type=int, default=128,
                   help="--gate bench: cap each answer at N tokens (default 128)")
    p.add_argument("--private-data-dir", help="ansible-runner's directory (default: a new temporary one)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("plan", help="write every host's files and command lines, contacting no node")
    run_options(p)
    p.add_argument("-o", "--out", required=True, help="directory to write the plan into")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("status", help="every model on every node: unit, health, load, KV cache, tokens/s, devices; "
                                      "which nodes hold each model revision")
    p.add_argument("-i", "--inventory", help=INVENTORY_HELP)
    p.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook --limit")
    p.add_argument("--secrets", help="YAML file of secret variables (API keys); sent to the engines, never printed")
    p.add_argument("--json", action="store_true", help="print the result as JSON (one object per refresh with --watch)")
    p.add_argument("--window", type=_seconds(0.1, 600), default=1.0,
                   help="seconds between the two /metrics reads, 0.1 to 600 (default 1)")
    p.add_argument("--watch", type=_seconds(0.2, 86400), nargs="?", const=2.0, metavar="SECONDS",
                   help="refresh in place every SECONDS, 0.2 to 86400 (default 2), until Ctrl-C")
    p.add_argument("--no-ssh", action="store_true",
                   help="read only the models' HTTP endpoints (no unit state, no devices, no weights)")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("bench", help="seed 000's multi-turn chat test (characters/s) on every chat model; "
                                     "--evalscope: seed 001's evalscope checks")
    p.add_argument("-i", "--inventory", help=INVENTORY_HELP)
    p.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook --limit")
    p.add_argument("-e", "--extra-vars", action="append", default=[],
                   help="extra variables (as for provision: the listen address, ports) KEY=VALUE, JSON or @FILE")
    p.add_argument("--secrets", help="YAML file of secret variables (fleet_serve_api_key); never printed")
    p.add_argument("--model", action="append", default=[], help="only this model (name or served name; repeatable)")
    p.add_argument("-o", "--out", default="vllm-fleet-bench",
                   help="directory for bench.json, bench.csv, bench.png (default: vllm-fleet-bench)")
    p.add_argument("--conversations", type=int, nargs="+", metavar="N",
                   help="only these of seed 000's four conversations (1-4; default: all)")
    p.add_argument("--max-tokens", type=int, help="cap each answer (the seed sets none; for quick runs)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one answer may take (default 600)")
    p.add_argument("--seed-model", action="append", default=[], metavar="MODEL=SEED_MODEL", type=_name_value,
                   help="compare MODEL with this row of seed 000's table (when their names differ; repeatable)")
    p.add_argument("--evalscope", nargs="*", choices=["perf", "accuracy"],
                   help="run seed 001's evalscope checks instead (default: both); needs vllm-fleet[evalscope]")
    p.add_argument("--tokenizer-path", help="--evalscope perf: the model's tokenizer directory")
    p.add_argument("--dataset", help="--evalscope accuracy: the MMLU dataset directory (no hub is asked)")
    p.add_argument("--parallel", type=int, nargs="+", help="--evalscope perf: instead of the seed's 417 833")
    p.add_argument("--number", type=int, nargs="+", help="--evalscope perf: instead of the seed's 1000 2000")
    p.add_argument("--prompt-length", type=int, help="--evalscope perf: prompt tokens instead of the seed's 1024")
    p.add_argument("--output-tokens", type=int, help="--evalscope perf: output tokens instead of the seed's 1024")
    p.add_argument("--limit-samples", type=int, help="--evalscope accuracy: at most N samples per subset")
    p.add_argument("--dry-run", action="store_true", help="--evalscope: print the command lines, run nothing")
    p.add_argument("--history", action="store_true",
                   help="print the figures gated rollouts accepted, per model and release, and run nothing")
    p.add_argument("--history-dir", default=HISTORY_DIR, help=f"where they are kept (default: {HISTORY_DIR})")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_bench)

    p_mirror = sub.add_parser("mirror", help="the fleet's own mirror for a site without internet (docs/air-gapped.md)")
    mirror_sub = p_mirror.add_subparsers(dest="mirror_command", required=True)
    p = mirror_sub.add_parser("sync", help="on a connected machine: fetch everything the inventory's nodes would "
                              "fetch into DIR (resumable; a second sync fetches nothing)")
    p.add_argument("-i", "--inventory", required=True, help="the inventory whose nodes the mirror serves")
    p.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook --limit")
    p.add_argument("-e", "--extra-vars", action="append", default=[],
                   help="extra variables: KEY=VALUE, a JSON mapping or @FILE (repeatable)")
    p.add_argument("-o", "--out", required=True, help="the mirror directory")
    p.add_argument("--check", action="store_true", help="list what would be fetched and its size; fetch nothing")
    p.add_argument("--apt-key", default="", metavar="KEYID",
                   help="the GnuPG key (in GNUPGHOME) that signs the mirror's apt repository; default: the mirror's "
                        "own, created once in DIR/keys/")
    p.set_defaults(func=cmd_mirror)
    p = mirror_sub.add_parser("verify", help="check a mirror directory (or a pack) against its manifest")
    p.add_argument("path", help="a mirror directory, or a directory of `mirror pack` volumes")
    p.set_defaults(func=cmd_mirror)
    p = mirror_sub.add_parser("pack", help="write a whole mirror as checksummed volumes of a bounded size")
    p.add_argument("path", help="the mirror directory")
    p.add_argument("-o", "--out", required=True, help="where to write the volumes")
    p.add_argument("--volume-size", type=_size, default=_size("4G"),
                   help="the most bytes per volume: N, NK, NM or NG (default 4G)")
    p.set_defaults(func=cmd_mirror)
    p = mirror_sub.add_parser("unpack", help="check a pack's volumes, extract them and verify the mirror")
    p.add_argument("path", help="the directory of the volumes")
    p.add_argument("-o", "--out", required=True, help="the mirror directory to write")
    p.set_defaults(func=cmd_mirror)

    add_plugin_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, yaml.YAMLError) as exc:
        print(f"vllm-fleet {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
