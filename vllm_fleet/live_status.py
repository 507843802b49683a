"""`vllm-fleet status`: one table of every model on every node, read live in a few seconds.

    import vllm_fleet
    result = vllm_fleet.status("inventories/lab", limit="ascend-nodes")
    print(result)              # the table
    result.rows                # one ModelStatus per model and node
    result.exit_code           # 0 all up, 5 something down, 3 a node unreachable over SSH

Where each figure comes from, all read side by side (threads), no Ansible run:

- **health, requests running / waiting, KV cache usage, generation tokens/s**: over HTTP,
  straight from the controller, from the model's `/health` and two reads of its
  `/metrics` (vLLM's Prometheus names) `window` seconds apart;
- **unit state, since when, restarts, device health**: over SSH, one session per node
  with the inventory's connection variables, running `systemctl show` for the node's
  units and the vendor's SMI tool, whose listing is parsed on the controller by the
  parsers of the facts module (`module_utils/vllm_fleet_accel.py`);
- **weights**: in the same session, which of the node's models and LoRA adapters hold
  roles/blocks/model_fetch's completion marker (the model was fetched whole and verified; the
  converge fetches it again only without one), their size on disk, and, on a node in waves,
  which revisions its share serves; vllm_fleet.distribution makes of it, per revision, the
  nodes holding it and the bytes the next run would move (``weights``).

Hosts, their connection variables and their models come from the inventory through
ansible-core's own inventory and variable managers; ports, served names and units from
`vllm_fleet.models.resolve_models` (through `vllm_fleet.router.served_models`), as the
roles compute them. A model that listens on loopback on a node the controller does not
share a loopback with cannot be read over HTTP from here: its row says so.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_fleet import distribution, router, validation, vendors
from vllm_fleet import inventory as inventory_reader
from vllm_fleet.exit_codes import EXIT_DOWN, EXIT_OK, EXIT_UNREACHABLE
from vllm_fleet.inventory import HOST_KEYS
from vllm_fleet.mirror import layout
from vllm_fleet.models import host_engine_api_key, node_models, unit_name
from vllm_fleet.role_specs import role_constant, role_default, secret_declarations
from vllm_fleet.secrets import MIN_MASKED_LENGTH, scrub
from vllm_fleet.secrets import secret_values as all_secret_values
from vllm_fleet.state import leftover_units

#: vLLM's Prometheus names (docs.vllm.ai, "Production Metrics"). KV cache usage was
#: vllm:gpu_cache_usage_perc before the V1 engine's vllm:kv_cache_usage_perc.
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
GENERATION_TOKENS = "vllm:generation_tokens_total"

#: systemd properties read per unit; the timestamp is on the monotonic clock, which
#: every systemd prints the same way (the wall-clock one is in the node's locale and zone).
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "StateChangeTimestampMonotonic", "NRestarts")

_MARK = "=== vllm-fleet-status "
#: The first line of every unit roles/blocks/vllm_service and roles/blocks/ray_cluster install (their
#: `_<role>_marker` starts with it, tests/unit/test_live_status.py checks): how status tells
#: vllm-fleet's units from any other on the node.
MANAGED = "# Managed by vllm-fleet"
#: Where those units are: the glob of models.unit_name's names (vllm-<model>, ray-<model>).
MANAGED_UNITS = tuple(f"/etc/systemd/system/{unit_name('*', program)}.service" for program in ("vllm", "ray"))
#: The variables of roles/blocks/model_fetch status reads besides HOST_KEYS (where a node keeps its share,
#: whether it fetches in waves), with their defaults under the inventory's (fleet_base_dir: the share's).
WEIGHT_KEYS = ("model_fetch_distribution", "model_fetch_share_dir", "fleet_base_dir")


# ------------------------------------------------------------------ results

@dataclass
class ModelStatus:
    """One model on one node."""

    node: str
    model: str
    name: str
    unit: str
    url: str | None
    #: Where the HTTP endpoints were read from: "controller", or "ssh" (the model listens on the node's loopback).
    via: str = "controller"
    unit_state: str | None = None
    since: float | None = None
    restarts: int | None = None
    health: str = "unknown"
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None
    tokens_per_s: float | None = None
    devices: list[int] = field(default_factory=list)
    device_health: str = "unknown"
    #: Why the routers' health agent (roles/blocks/health_agent) keeps new requests away from it: its devices
    #: the SMI tool reports outside the vendor's healthy states ("" when none, or no router in the inventory).
    quarantined: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def down(self) -> bool:
        """The unit is not active, /health did not answer 200, or a device of the model is Critical
        (what could not be read, "unknown", is not down: see StatusResult.exit_code)."""
        return (self.unit_state is not None and not self.unit_state.startswith("active")) \
            or self.health not in ("ok", "unknown") or self.device_health == "Critical"

    @property
    def unread(self) -> bool:
        return self.health == "unknown"

    def to_dict(self) -> dict:
        return {**asdict(self), "down": self.down,
                "since_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)) if self.since else None}


@dataclass
class NodeStatus:
    """What one SSH session to a node said."""

    node: str
    reachable: bool = False
    error: str = ""
    units: dict[str, dict] = field(default_factory=dict)
    vendor: str | None = None
    device_health: str = "unknown"
    devices: list[dict] = field(default_factory=list)
    smi_error: str = ""
    #: vllm-fleet's units on the node (by their first line, MANAGED) -> systemctl is-active.
    installed: dict[str, str] = field(default_factory=dict)
    #: Of those, the units of models the inventory no longer lists for the node (left running by
    #: a converge without --prune) -> their state.
    orphaned: dict[str, str] = field(default_factory=dict)
    #: Per unit, the HTTP reads the node made for models only it reaches (NODE_READER).
    http: dict[str, dict] = field(default_factory=dict)
    http_error: str = ""
    #: The model and adapter directories holding model_fetch's completion marker -> {bytes: their size
    #: on disk (None unread), source: the source the marker records (None where it records none)}.
    held: dict[str, dict] = field(default_factory=dict)
    #: The revisions its share serves to its peers (models/<org>/<name>/<revision>; nodes in waves).
    shared: list[str] = field(default_factory=list)
    #: Directories whose marker records another revision than the inventory's -> that revision: the
    #: converge counts them complete and fetches nothing there.
    stale: dict[str, str] = field(default_factory=dict)


@dataclass
class StatusResult:
    inventory: str
    limit: str | None
    rows: list[ModelStatus]
    nodes: dict[str, NodeStatus]
    window: float
    duration: float
    read_at: float
    #: Of `duration`, the seconds spent loading the inventory (ansible-core) before any read.
    inventory_s: float = 0.0
    #: What validation warns about for these nodes (vllm_fleet.validation.run_warnings), as a run prints it.
    warnings: list[str] = field(default_factory=list)
    #: Per model revision the nodes fetch: where it is and what the next run would move (``weights``).
    weights: list[dict] = field(default_factory=list)

    @property
    def down(self) -> list[ModelStatus]:
        return [r for r in self.rows if r.down]

    @property
    def unreachable_nodes(self) -> list[str]:
        return sorted(n for n, s in self.nodes.items() if not s.reachable)

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def exit_code(self) -> int:
        """0 all up; 5 a model or device is down; 3 nothing down, but something could not be read
        (a node unreachable over SSH, or a model's endpoints)."""
        if self.down:
            return EXIT_DOWN
        if self.unreachable_nodes or any(r.unread for r in self.rows):
            return EXIT_UNREACHABLE
        return EXIT_OK

    def to_dict(self) -> dict:
        return {"inventory": self.inventory, "limit": self.limit, "window_s": self.window,
                "duration_s": round(self.duration, 2),
                "inventory_s": round(self.inventory_s, 2), "read_at": self.read_at, "exit_code": self.exit_code,
                "ok": self.ok, "rows": [r.to_dict() for r in self.rows],
                "nodes": {n: {"reachable": s.reachable, "error": s.error, "vendor": s.vendor,
                              "device_health": s.device_health, "devices": s.devices, "smi_error": s.smi_error,
                              "orphaned": s.orphaned, "held": s.held, "shared": s.shared, "stale": s.stale}
                          for n, s in sorted(self.nodes.items())},
                "down": [f"{r.node}/{r.model}" for r in self.down], "unreachable_nodes": self.unreachable_nodes,
                "warnings": self.warnings, "weights": self.weights}

    def __str__(self) -> str:
        return "\n".join(table(self))


def _age(since: float | None, now: float) -> str:
    if not since:
        return "-"
    seconds = max(0, int(now - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            rest = seconds % size
            sub = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            return f"{seconds // size}{unit}{rest // sub[1]:02d}{sub[0]}"
    return f"{seconds}s"


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def table(result: StatusResult) -> list[str]:
    """The rows as a fixed-width table, then one line per problem."""
    head = ("NODE", "MODEL", "UNIT", "STATE", "SINCE", "HEALTH", "RUN", "WAIT", "KV%", "TOK/S", "DEVICES")
    cells = []
    for r in result.rows:
        state = r.unit_state or "?"
        if r.restarts:
            state += f" ({r.restarts} restarts)"
        devices = r.device_health if not r.devices else f"{r.device_health} {','.join(map(str, r.devices))}"
        cells.append((r.node, r.model, r.unit, state, _age(r.since, result.read_at), r.health, _num(r.running),
                      _num(r.waiting), _num(None if r.kv_cache is None else r.kv_cache * 100, "{:.1f}"),
                      _num(r.tokens_per_s, "{:.1f}"), devices))
    widths = [max(len(str(row[i])) for row in [head, *cells]) for i in range(len(head))]
    right = {6, 7, 8, 9}

    def line(row):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=False))).rstrip()

    out = [line(head)] + [line(c) for c in cells]
    if not cells:
        out = ["(no model on the selected nodes)"]
    for node in result.unreachable_nodes:
        out.append(f"{node}: unreachable over SSH: {result.nodes[node].error}")
    for node, s in sorted(result.nodes.items()):
        if s.reachable and s.smi_error:
            out.append(f"{node}: device health unknown: {s.smi_error}")
        if s.orphaned:
            out.append(f"{node}: orphaned (the inventory no longer lists their models; `state: absent` or "
                       "provision --prune removes them): "
                       + ", ".join(f"{u} ({state})" for u, state in s.orphaned.items()))
    for r in result.rows:
        if r.quarantined:
            out.append(f"{r.node}/{r.model}: quarantined (no new request from the routers): {r.quarantined}")
        out += [f"{r.node}/{r.model}: {p}" for p in r.problems]
    for model in unserved(result.rows):
        out.append(f"{model}: NO HEALTHY REPLICA LEFT: every node serving it is down or quarantined, "
                   "so its routers answer 503")
    if result.weights:
        out.append("weights (completion markers on the nodes; the next run's bytes):")
        for row in result.weights:
            unread = f"; not read on {', '.join(row['unread'])}" if row["unread"] else ""
            out.append(f"  {row['line']}{unread}")
    for node, s in sorted(result.nodes.items()):
        out += [f"{node}: {path} holds {held} (its completion marker), not the inventory's revision; no run fetches "
                "it again while the marker is there (move the directory away to fetch the inventory's)"
                for path, held in s.stale.items()]
    out += [f"warning: {w}" for w in result.warnings]
    verdict = "all up" if result.ok else (f"{len(result.down)} down" if result.down else "not everything could be read")
    # With --no-ssh no node is read over SSH (result.nodes is empty): the rows name their nodes.
    nodes = set(result.nodes) | {r.node for r in result.rows}
    out.append(f"{len(result.rows)} model(s) on {len(nodes)} node(s), {verdict}; "
               f"tokens/s over {result.window:.1f} s; read in {result.duration:.1f} s")
    return out


# ------------------------------------------------------------------ parsing (pure)

def parse_metrics(text: str) -> dict[str, float]:
    """The figures status shows from one /metrics read (Prometheus text), summed over the
    engine's samples (one per engine under data parallelism); KV cache usage is the highest."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    sums: dict[str, float] = {}
    kv: list[float] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (RUNNING, WAITING, GENERATION_TOKENS):
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
            elif sample.name in KV_CACHE and not kv_name_shadowed(sample.name, text):
                kv.append(float(sample.value))
    if kv:
        sums["kv_cache"] = max(kv)
    return sums


def kv_name_shadowed(name: str, text: str) -> bool:
    """An engine exporting both KV names (vLLM 0.10 during the rename) is read by the new one."""
    return name == KV_CACHE[1] and KV_CACHE[0] in text


def token_rate(first: dict[str, float], second: dict[str, float], seconds: float) -> float | None:
    """Generation tokens per second between two reads; None without both counters, or when
    the counter went back (the engine restarted in between)."""
    a, b = first.get(GENERATION_TOKENS), second.get(GENERATION_TOKENS)
    if a is None or b is None or b < a or seconds <= 0:
        return None
    return (b - a) / seconds


def parse_units(text: str) -> dict[str, dict]:
    """`systemctl show --property=...` blocks (blank-line separated) by unit Id."""
    units = {}
    for block in text.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def unit_since(props: dict, node_monotonic_us: int | None, node_now: float | None) -> float | None:
    """Unix time of the unit's last state change, from its monotonic timestamp and the node's clocks."""
    try:
        changed = int(props.get("StateChangeTimestampMonotonic") or 0)
    except ValueError:
        return None
    if not changed or node_monotonic_us is None or node_now is None:
        return None
    return node_now - (node_monotonic_us - changed) / 1e6


# ------------------------------------------------------------------ the facts module's parsers

def _accel():
    """module_utils/vllm_fleet_accel.py (the facts module's parsers), as vendors reads it."""
    return vendors.accel()


#: Runs on the node (python3, which Ansible needs there too) for models that listen on its
#: loopback only: /health and two /metrics reads `window` apart, the same as the controller
#: does, printing only the metric lines status reads. Its program comes from a here-document,
#: so the API keys in it are in no process's command line.
NODE_READER = r"""
import json, sys, time, urllib.request, urllib.error
checks, window, timeout = CHECKS, WINDOW, TIMEOUT
NAMES = NAMES_
def get(url, key):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace"), ""
    except urllib.error.HTTPError as e:
        return e.code, "", "HTTP %d" % e.code
    except Exception as e:
        return None, "", str(getattr(getattr(e, "reason", e), "strerror", None) or getattr(e, "reason", e))
def metrics(c):
    t = time.monotonic()
    code, text, err = get(c["url"] + "/metrics", c["key"])
    lines = [l for l in text.splitlines() if l.startswith(NAMES)]
    return {"code": code, "error": err, "t": (t + time.monotonic()) / 2, "text": "\n".join(lines)}
out = {}
for c in checks:
    code, _, err = get(c["url"] + "/health", c["key"])
    out[c["unit"]] = {"health": code, "health_error": err, "first": metrics(c)}
start = min([o["first"]["t"] for o in out.values()] or [time.monotonic()])
time.sleep(max(0.0, window - (time.monotonic() - start)))
for c in checks:
    if out[c["unit"]]["first"]["code"] == 200:
        out[c["unit"]]["second"] = metrics(c)
print(json.dumps(out))
"""


def node_script(units: list[str], vendor: str | None, checks: list[dict] | None = None, window: float = 1.0,
                timeout: float = 5.0, weights: dict | None = None) -> str:
    """The script a node runs (from stdin): its clocks, `systemctl show` of its units, the vendor
    SMI listing, the HTTP reads of `checks` ({unit, url, key}) that only the node reaches, and its
    `weights` ({paths, share_dir, shares}: weights_script)."""
    lines = []
    if checks:
        # Started first, in the background: its window passes while systemctl and the SMI tool run.
        program = (NODE_READER.replace("CHECKS", repr(checks)).replace("WINDOW", repr(float(window)))
                   .replace("TIMEOUT", repr(float(timeout)))
                   .replace("NAMES_", repr((RUNNING, WAITING, GENERATION_TOKENS, *KV_CACHE))))
        lines += ["http=$(mktemp)", "python3 - >\"$http\" 2>&1 <<'VLLM_FLEET_STATUS_EOF' &", program.strip(),
                  "VLLM_FLEET_STATUS_EOF"]
    lines += [f"echo '{_MARK}clock'",
             # Wall clock and CLOCK_MONOTONIC (the clock of systemd's *TimestampMonotonic) read
             # together; without python3, /proc/uptime (boot time: the same unless the node slept).
             "python3 -c 'import time; print(time.time(), time.monotonic())' 2>/dev/null"
             " || echo \"$(date +%s) $(cut -d' ' -f1 /proc/uptime)\"",
             # vllm-fleet's units on the node, whatever the inventory says (orphans: status()).
             f"echo '{_MARK}installed'",
             f"for f in {' '.join(MANAGED_UNITS)}; do [ -f \"$f\" ] && grep -q {shlex.quote('^' + MANAGED)} \"$f\" "
             "&& u=${f##*/} && echo \"${u%.service} $(systemctl is-active \"$u\")\"; done"]
    if units:
        lines += [f"echo '{_MARK}units'",
                  "systemctl show --property=" + ",".join(UNIT_PROPERTIES) + " -- "
                  + " ".join(shlex.quote(u) for u in units)]
    lines += weights_script(**(weights or {}))
    accel = _accel()
    spec = accel.VENDORS.get(vendor or "")
    if spec and spec.get("parser"):
        # The facts module's search (locate_tool): the vendor's install directories, PATH, sbin.
        candidates = [f"{d}/{spec['tool']}" for d in spec["tool_dirs"]]
        args = " ".join(shlex.quote(a) for a in accel.listing_args(vendor))
        lines += [f"echo '{_MARK}smi'",
                  f"tool=''; for p in {' '.join(shlex.quote(c) for c in candidates)}; do "
                  "[ -x \"$p\" ] && { tool=$p; break; }; done",
                  f"[ -n \"$tool\" ] || tool=$(PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin command -v {spec['tool']})",
                  f"if [ -n \"$tool\" ]; then LC_ALL=C \"$tool\" {args} 2>&1; echo \"{_MARK}smi-rc $?\"; "
                  f"else echo '{spec['tool']} not found in {', '.join(spec['tool_dirs'])}, on PATH or in the sbin "
                  f"directories'; echo '{_MARK}smi-rc 127'; fi"]
    if checks:
        lines += ["wait", f"echo '{_MARK}http'", "cat \"$http\"", "rm -f \"$http\""]
    return "\n".join(lines) + "\n"


def weights_script(paths: list[str] = (), share_dir: str = "", shares: list[str] = ()) -> list[str]:
    """The node script's lines that read its weights: each of `paths` (its model and adapter
    directories) holding model_fetch's completion marker, printed as <path> TAB <bytes of its files>
    TAB <the marker's text on one line> (the source it records); then each of `shares` (mirror paths of
    revisions) whose link in `share_dir` reaches a complete model, as tasks/shared.yml counts them."""
    marker = role_constant("fleet", "_fleet_model_complete_marker")
    lines = []
    if paths:
        lines += [f"echo '{_MARK}weights'",
                  f"for p in {' '.join(shlex.quote(str(p)) for p in paths)}; do "
                  f"[ -f \"$p/{marker}\" ] || continue; "
                  f"s=$(find -H \"$p\" -type f ! -name {marker} -printf '%s\\n' 2>/dev/null "
                  "| awk '{s+=$1} END {print s+0}'); "
                  "printf '%s\\t%s\\t' \"$p\" \"$s\"; "
                  f"head -c 4096 -- \"$p/{marker}\" | tr -d '\\n\\t'; echo; done"]
    if shares and share_dir:
        lines += [f"echo '{_MARK}shares'",
                  f"for k in {' '.join(shlex.quote(str(k)) for k in shares)}; do "
                  f"[ -f {shlex.quote(str(share_dir))}/\"$k\"/{marker} ] && echo \"$k\"; done"]
    return lines


def parse_node_output(node: str, vendor: str | None, text: str) -> NodeStatus:
    """What the node script printed, as a NodeStatus (clocks kept in units' `_since`)."""
    sections: dict[str, list[str]] = {}
    current = None
    smi_rc = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            word = line[len(_MARK):].split()
            if word and word[0] == "smi-rc":
                smi_rc = int(word[1]) if len(word) > 1 and word[1].isdigit() else None
                current = None
            else:
                current = word[0] if word else None
                sections.setdefault(current, [])
            continue
        if current:
            sections[current].append(line)
    status = NodeStatus(node=node, reachable=True, vendor=vendor)
    http = "\n".join(sections.get("http", [])).strip()
    if http:
        try:
            status.http = json.loads(http.splitlines()[-1])
        except ValueError:
            status.http_error = " ".join(http.splitlines()[-2:])[:300]
    clock = " ".join(sections.get("clock", [])).split()
    now = _float(clock[0]) if clock else None
    monotonic = _float(clock[1]) if len(clock) > 1 else None
    mono_us = int(monotonic * 1e6) if monotonic is not None else None
    for line in sections.get("installed", []):
        unit, _, state = line.strip().partition(" ")
        if unit:
            status.installed[unit] = state or "unknown"
    for unit, props in parse_units("\n".join(sections.get("units", []))).items():
        props["_since"] = unit_since(props, mono_us, now)
        status.units[unit] = props
    for line in sections.get("weights", []):
        path, _, rest = line.partition("\t")
        size, _, marker = rest.partition("\t")
        try:
            source = json.loads(marker) if marker.strip() else None
        except ValueError:
            source = None
        status.held[path] = {"bytes": int(size) if size.strip().isdigit() else None,
                             "source": source if isinstance(source, dict) else None}
    status.shared = sorted(line.strip() for line in sections.get("shares", []) if line.strip())
    if vendor in _accel().VENDORS and not _accel().listing_parser(vendor):
        status.device_health = "n/a"  # a node without a device tool (cpu)
    elif "smi" in sections:
        out = "\n".join(sections["smi"])
        if smi_rc == 0:
            parsed = _accel().listing_parser(vendor)(out)
            status.devices = parsed["devices"]
            status.device_health = _accel().overall_health(parsed["devices"])
        else:
            status.smi_error = " ".join(out.strip().splitlines()[-3:])[:300] or f"exited with status {smi_rc}"
    return status


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except (ValueError, AttributeError):
        return None


# ------------------------------------------------------------------ inventory

def inventory_hosts(inventory: str | os.PathLike, limit: str | None = None,
                    secrets: dict | None = None) -> dict[str, dict]:
    """The fleet hosts of the inventory (within `limit`) with the variables status reads (HOST_KEYS:
    connection and models; nothing else is templated), resolved as a play would see them
    (vllm_fleet.inventory); `secrets` win over the inventory. The variables validation reads come
    along where they render (inventory_warnings judges them)."""
    return inventory_reader.host_vars(inventory, limit, keys=HOST_KEYS + WEIGHT_KEYS, extra=secrets,
                                      optional=validation.validated_variables(),
                                      defaults={name: role_default(name) for name in WEIGHT_KEYS})


def inventory_warnings(inventory: str | os.PathLike, hosts: dict[str, dict]) -> list[str]:
    """What a run's validation would warn about for these hosts (vllm_fleet.validation.run_warnings:
    the precedence surprises of the inventory's files, placeholder checksums, a pinned vLLM release
    whose serve flags cannot be checked), in the order a run prints them."""
    found = validation.run_warnings(hosts, sorted(hosts), [str(Path(inventory).resolve())])
    return [w for kind in validation.WARNING_KINDS for w in found[kind]]


def ssh_argv(host: str, host_vars: dict, timeout: float) -> list[str]:
    """OpenSSH with the host's connection variables, as Ansible's ssh connection builds it,
    sharing Ansible's master connections (ansible.cfg's control_path) when they are open."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}",
            "-o", "ControlMaster=auto", "-o", "ControlPersist=120s",
            "-o", f"ControlPath={Path('~/.ansible/cp').expanduser()}/%C"]
    checking = host_vars.get("ansible_ssh_host_key_checking", host_vars.get("ansible_host_key_checking"))
    if checking is not None and str(checking).lower() in ("false", "no", "0"):
        argv += ["-o", "StrictHostKeyChecking=no"]
    key = host_vars.get("ansible_ssh_private_key_file") or host_vars.get("ansible_private_key_file")
    if key:
        argv += ["-o", "IdentitiesOnly=yes", "-i", str(Path(str(key)).expanduser())]
    if host_vars.get("ansible_port"):
        argv += ["-p", str(host_vars["ansible_port"])]
    if host_vars.get("ansible_user"):
        argv += ["-l", str(host_vars["ansible_user"])]
    for extra in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if host_vars.get(extra):
            argv += shlex.split(str(host_vars[extra]))
    # The script goes on stdin: it may carry API keys, which must be in no command line.
    remote = "sh -s"
    if host_vars.get("ansible_become") and str(host_vars.get("ansible_user") or "root") != "root":
        remote = "sudo -n " + remote  # npu-smi needs root; never prompts (BatchMode)
    return [*argv, "--", str(host_vars.get("ansible_host") or host), remote]


# ------------------------------------------------------------------ reading

def _get(url: str, key: str, timeout: float) -> tuple[int | None, str, str]:
    """(HTTP status or None, body, error). The key goes in the Authorization header only."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http URLs we built
            return response.status, response.read().decode("utf-8", "replace"), ""
    except urllib.error.HTTPError as exc:
        return exc.code, "", f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, "", str(getattr(reason, "strerror", None) or reason)


def read_node(host: str, host_vars: dict, units: list[str], timeout: float, checks: list[dict] | None = None,
              window: float = 1.0, weights: dict | None = None) -> NodeStatus:
    vendor = (host_vars.get("fleet_accelerator") or {}).get("vendor")
    script = node_script(units, vendor, checks, window, timeout, weights)
    argv = ["sh", "-s"] if host_vars.get("ansible_connection") == "local" else ssh_argv(host, host_vars, timeout)
    limit = timeout + 5 + (window + 3 * timeout if checks else 0)
    try:
        proc = subprocess.run(argv, input=script, capture_output=True, text=True, errors="replace", timeout=limit)
    except subprocess.TimeoutExpired:
        return NodeStatus(node=host, error=f"no answer over SSH within {limit:.0f} s", vendor=vendor)
    if proc.returncode == 255 or _MARK not in proc.stdout:
        error = " ".join(proc.stderr.strip().splitlines()[-2:]) or f"ssh exited with status {proc.returncode}"
        return NodeStatus(node=host, error=error, vendor=vendor)
    return parse_node_output(host, vendor, proc.stdout)


def status(inventory: str | os.PathLike, limit: str | None = None, *, window: float = 1.0, timeout: float = 5.0,
           secrets: dict | None = None, ssh: bool = True) -> StatusResult:
    """Read every model of the inventory's fleet nodes (within `limit`): see the module's docstring.

    `window`: seconds between the two /metrics reads that give tokens/s; `timeout`: per HTTP
    request and SSH connection; `secrets`: variables such as fleet_serve_api_key (sent to the
    engines, never printed: every message is scrubbed of them); `ssh=False` reads HTTP only,
    from the controller.
    """
    started = time.monotonic()
    hosts = inventory_hosts(inventory, limit, secrets)
    warnings = inventory_warnings(inventory, hosts)
    loaded = time.monotonic()
    rows: list[ModelStatus] = []
    keys: dict[int, str] = {}
    for host, host_vars in sorted(hosts.items()):
        for model in router.served_models(host_vars, host):
            direct = not router.unreachable_from("127.0.0.1", host, host_vars, model)
            address = router.node_address(host, host_vars, model) if direct else None
            url = (f"http://[{address}]:{model['port']}" if ":" in address else f"http://{address}:{model['port']}") \
                if direct else model["url"]
            row = ModelStatus(node=host, model=model["served_model_name"][0], name=model["name"], unit=model["unit"],
                              url=url, via="controller" if direct else "ssh", devices=list(model.get("devices") or []))
            keys[id(row)] = host_engine_api_key(host_vars, model["name"])
            rows.append(row)
    # The engines' keys and every value of `secrets`, at any depth (as the API masks them).
    secret_values = sorted({k for k in keys.values() if len(k.strip()) >= MIN_MASKED_LENGTH}
                           | set(all_secret_values(secrets or {}, secret_declarations(), secret=True)),
                           key=len, reverse=True)
    nodes: dict[str, NodeStatus] = {}
    lock = threading.Lock()
    items = {host: distribution.fetch_items(node_models(host_vars, host)[0]) for host, host_vars in hosts.items()}

    def node_job(host):
        mine = [r for r in rows if r.node == host]
        checks = [{"unit": r.unit, "url": r.url, "key": keys[id(r)]} for r in mine if r.via == "ssh"]
        # Every node is read, one without models too: its units may be orphans.
        result = read_node(host, hosts[host], [f"{r.unit}.service" for r in mine], timeout, checks, window,
                           weights_to_read(hosts[host], items[host]))
        with lock:
            nodes[host] = result

    def model_job(row):
        key = keys[id(row)]
        code, _, error = _get(row.url + "/health", key, timeout)
        t1 = time.monotonic()
        code1, text1, error1 = _get(row.url + "/metrics", key, timeout)
        first = {"code": code1, "error": error1, "t": (t1 + time.monotonic()) / 2, "text": text1}
        second = None
        if code1 == 200:
            time.sleep(max(0.0, window - (time.monotonic() - first["t"])))
            t2 = time.monotonic()
            code2, text2, error2 = _get(row.url + "/metrics", key, timeout)
            second = {"code": code2, "error": error2, "t": (t2 + time.monotonic()) / 2, "text": text2}
        apply_reads(row, {"health": code, "health_error": error, "first": first, "second": second})

    jobs = (([(node_job, h) for h in sorted(hosts)] if ssh else [])
            + [(model_job, r) for r in rows if r.via == "controller"])
    with ThreadPoolExecutor(max_workers=min(64, max(1, len(jobs)))) as pool:
        for future in [pool.submit(fn, arg) for fn, arg in jobs]:
            future.result()

    for host, node in nodes.items():
        node.orphaned = orphaned_units(node.installed, hosts[host].get("fleet_models"))
    for row in rows:
        node = nodes.get(row.node)
        if row.via == "ssh":
            if node is None:
                row.problems.append("listens on loopback only, where the controller does not reach; "
                                    "it is read over SSH, which --no-ssh turned off")
            elif node.http_error:
                row.problems.append(f"reading it on the node failed: {node.http_error}")
            elif row.unit in node.http:
                apply_reads(row, node.http[row.unit])
        if node is None:
            continue
        apply_node(row, node)
    if any((host_vars.get("groups") or {}).get("router") for host_vars in hosts.values()):
        for row in rows:
            if row.node in nodes:
                row.quarantined = quarantine_reason(row, nodes[row.node])
    result = StatusResult(inventory=str(inventory), limit=limit, rows=rows, nodes=nodes, window=window,
                          duration=time.monotonic() - started, read_at=time.time(), inventory_s=loaded - started,
                          warnings=warnings, weights=weights(hosts, items, nodes))
    # Defence in depth: no message may carry a key (an engine or a node could echo one back).
    for row in rows:
        row.problems = [scrub(p, secret_values) for p in row.problems]
        row.health = scrub(row.health, secret_values)
    for node in nodes.values():
        node.error, node.smi_error = scrub(node.error, secret_values), scrub(node.smi_error, secret_values)
        node.http_error = scrub(node.http_error, secret_values)
        node.http = {}  # raw reads, already in the rows
    return result


def _in_waves(host_vars: dict, source: dict) -> bool:
    """Whether the node fetches a model of `source` in waves: it asks for them, the model is a hub's and
    the fleet has its own mirror (roles/blocks/model_fetch: _model_fetch_waves)."""
    return (host_vars.get("model_fetch_distribution") == "waves" and source.get("type") in distribution.HUB_SOURCES
            and bool((host_vars.get("groups") or {}).get("mirror")))


def weights_to_read(host_vars: dict, items: list[dict]) -> dict:
    """What weights_script reads on a node: its items' directories and, where it fetches in waves,
    the revisions its share may serve."""
    return {"paths": sorted({str(i["path"]) for i in items if i.get("path")}),
            "share_dir": str(host_vars.get("model_fetch_share_dir") or ""),
            "shares": sorted({layout.model_path(i["source"]) for i in items if _in_waves(host_vars, i["source"])})}


def weights(hosts: dict[str, dict], items: dict[str, list[dict]], nodes: dict[str, NodeStatus]) -> list[dict]:
    """Per revision the nodes fetch (items: distribution.fetch_items of each node's models): the nodes
    that hold it (its completion marker, model_fetch's one sign of a complete model), those that lack
    it, those not read, and the bytes the next run would move (distribution.placement, moves,
    describe: the run's own account). A revision's size is what a holder has on disk, else the
    inventory's size_gb. Directories whose marker records another revision go to each node's `stale`."""
    read = [h for h in hosts if h in nodes and nodes[h].reachable]
    if not read:
        return []
    held: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    for host in read:
        node, held[host] = nodes[host], set()
        for item in items[host]:
            got = node.held.get(str(item.get("path")))
            if got is None:
                continue
            key = distribution.revision_key(item)
            held[host].add(key)
            recorded = distribution.revision_key({"source": got["source"]}) if got["source"] else key
            if recorded != key:
                node.stale[str(item["path"])] = recorded
            elif got["bytes"]:
                sizes[key] = max(sizes.get(key, 0), got["bytes"])
    mirror = any((hosts[h].get("groups") or {}).get("mirror") for h in hosts)
    rows = distribution.placement({h: items[h] for h in read}, held, sizes)
    for row in rows:
        path = layout.model_path(row["source"]) if row["source"].get("type") in distribution.HUB_SOURCES else None
        waves = {h for h in row["needing"] if _in_waves(hosts[h], row["source"])}
        row["sharing"] = [h for h in row["holders"] if path and path in nodes[h].shared]
        row["unread"] = [h for h in hosts if h not in read
                         and any(distribution.revision_key(i) == row["revision"] for i in items[h])]
        row["moves"] = distribution.moves(row, list(hosts), waves=waves, sharing=row["sharing"])
        row["line"] = distribution.describe(row, row["moves"], "the mirror" if mirror else "its source")
    return rows


def orphaned_units(installed: dict[str, str], fleet_models) -> dict[str, str]:
    """The installed units (unit -> state) whose model the node's inventory no longer lists
    (vllm_fleet.state.leftover_units says the same to a converge)."""
    names = [str(m["name"]) for m in fleet_models or [] if isinstance(m, dict) and "name" in m]
    listed = {unit_name(n, program) for n in names for program in ("vllm", "ray")}
    orphaned = set(leftover_units(list(installed), [], list(listed))["orphaned"])
    return {u: s for u, s in sorted(installed.items()) if u in orphaned}


def apply_reads(row: ModelStatus, reads: dict) -> None:
    """Fill a row from one /health and two /metrics reads ({health, health_error, first, second},
    each read {code, error, t, text}), wherever they were made."""
    code = reads.get("health")
    row.health = "ok" if code == 200 else (reads.get("health_error") or f"HTTP {code}")
    first, second = reads.get("first") or {}, reads.get("second") or {}
    if first.get("code") != 200:
        if not (code is None and first.get("error") == reads.get("health_error")):  # said once, by HEALTH
            row.problems.append(f"/metrics: {first.get('error') or 'HTTP ' + str(first.get('code'))}")
        return
    a = parse_metrics(first.get("text", ""))
    b = parse_metrics(second.get("text", "")) if second.get("code") == 200 else {}
    if second and second.get("code") != 200:
        row.problems.append(f"/metrics (second read): {second.get('error') or 'HTTP ' + str(second.get('code'))}")
    latest = b or a
    row.running, row.waiting, row.kv_cache = latest.get(RUNNING), latest.get(WAITING), latest.get("kv_cache")
    if b:
        row.tokens_per_s = token_rate(a, b, float(second["t"]) - float(first["t"]))


def quarantine_reason(row: ModelStatus, node: NodeStatus) -> str:
    """What the node's health agent tells the routers about the row's model, from the same
    listing and the vendor contract's healthy states: "" (healthy, or nothing read), else its
    devices outside those states ("device 1 Critical")."""
    if not node.reachable or node.vendor not in vendors.ACCELERATORS or not node.devices:
        return ""
    healthy = set(vendors.contract(node.vendor)["driver"]["healthy"])
    mine = [d for d in node.devices if not row.devices or d.get("index") in row.devices]
    return ", ".join(f"device {d.get('index')} {d.get('health')}" for d in mine if d.get("health") not in healthy)


def unserved(rows: list[ModelStatus]) -> list[str]:
    """The served names (of rows read) whose every replica is down or quarantined."""
    by_model: dict[str, list[ModelStatus]] = {}
    for row in rows:
        by_model.setdefault(row.model, []).append(row)
    return sorted(name for name, replicas in by_model.items()
                  if any(r.quarantined for r in replicas) and all(r.down or r.quarantined for r in replicas))


def apply_node(row: ModelStatus, node: NodeStatus) -> None:
    """Fill a row's unit state and device health from what its node said over SSH."""
    if not node.reachable:
        return
    props = node.units.get(f"{row.unit}.service")
    if props:
        row.unit_state = ("not installed" if props.get("LoadState") == "not-found"
                          else f"{props.get('ActiveState')} ({props.get('SubState')})")
        row.since = props.get("_since")
        restarts = props.get("NRestarts")
        row.restarts = int(restarts) if restarts and restarts.isdigit() else None
    if node.device_health == "n/a":
        row.device_health = "n/a"
    elif node.devices:
        mine = [d for d in node.devices if d.get("index") in row.devices] or node.devices
        row.device_health = _accel().overall_health(mine)
