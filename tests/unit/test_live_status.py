"""`vllm-fleet status` (vllm_fleet/live_status.py) against engines served in this process.

Each test writes a small inventory whose hosts use `ansible_connection: local`, so the node
script (systemctl show, the SMI tool, the node-side HTTP reader) runs here through `sh -s`,
with fake `systemctl` and `nvidia-smi` first on PATH; the engines are HTTP servers in this
process that answer /health and /metrics (vLLM's Prometheus names) and record the
Authorization header they were sent.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from vllm_fleet import api, cli, live_status
from vllm_fleet.live_status import GENERATION_TOKENS, RUNNING, WAITING

ROOT = Path(__file__).resolve().parents[2]
SMI = ROOT / "tests" / "unit" / "fixtures" / "smi"
GROUP_KEY = "group-key-5f1c9a"
MODEL_KEY = "model-key-77d0e2"

# A V1 engine's /metrics as vLLM 0.11 prints it (abridged): two engines under data parallelism.
V1_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3"} 3.0
vllm:num_requests_running{engine="1",model_name="qwen3"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3"} 1.0
vllm:num_requests_waiting{engine="1",model_name="qwen3"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen3"} 0.5
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="qwen3"} 500.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="qwen3"} 1.76e+09
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="qwen3"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="qwen3"} 9.0
"""


# ------------------------------------------------------------------ parsing


def test_metrics_are_summed_over_engines_and_kv_usage_is_the_fullest():
    figures = live_status.parse_metrics(V1_METRICS)
    assert figures == {RUNNING: 5.0, WAITING: 1.0, GENERATION_TOKENS: 1500.0, "kv_cache": 0.5}


def test_older_engines_kv_name_is_read_and_the_new_one_wins_when_both_are_there():
    old = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.75\nvllm:num_requests_running{model_name="m"} 1\n'
    assert live_status.parse_metrics(old)["kv_cache"] == 0.75
    both = old + 'vllm:kv_cache_usage_perc{model_name="m"} 0.125\n'
    assert live_status.parse_metrics(both)["kv_cache"] == 0.125
    assert live_status.parse_metrics("") == {}


@pytest.mark.parametrize("first, second, seconds, expected", [
    ({GENERATION_TOKENS: 100.0}, {GENERATION_TOKENS: 350.0}, 2.5, 100.0),
    ({GENERATION_TOKENS: 100.0}, {GENERATION_TOKENS: 100.0}, 1.0, 0.0),
    ({GENERATION_TOKENS: 900.0}, {GENERATION_TOKENS: 20.0}, 1.0, None),   # the engine restarted
    ({}, {GENERATION_TOKENS: 20.0}, 1.0, None),
    ({GENERATION_TOKENS: 1.0}, {GENERATION_TOKENS: 2.0}, 0.0, None),
])
def test_token_rate(first, second, seconds, expected):
    assert live_status.token_rate(first, second, seconds) == expected


def test_units_and_since_from_systemctl_show():
    text = ("Id=vllm-a.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
            "StateChangeTimestampMonotonic=5000000\nNRestarts=2\n\n"
            "Id=vllm-b.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\n"
            "StateChangeTimestampMonotonic=0\nNRestarts=0\n")
    units = live_status.parse_units(text)
    assert sorted(units) == ["vllm-a.service", "vllm-b.service"]
    # Changed 5 s after boot; the node is now 65 s after boot at unix time 1000: since 940.
    assert live_status.unit_since(units["vllm-a.service"], 65_000_000, 1000.0) == 940.0
    assert live_status.unit_since(units["vllm-b.service"], 65_000_000, 1000.0) is None


def test_node_output_uses_the_facts_modules_parser_for_device_health():
    listing = (SMI / "nvidia-smi-query-unknown-error.csv").read_text()
    out = (f"{live_status._MARK}clock\n1000.0 65.0\n{live_status._MARK}units\nId=vllm-a.service\nActiveState=active\n"
           f"{live_status._MARK}smi\n{listing}{live_status._MARK}smi-rc 0\n")
    node = live_status.parse_node_output("n", "nvidia", out)
    assert [d["health"] for d in node.devices] == ["OK", "Critical"]
    assert node.device_health == "Critical"
    failed = live_status.parse_node_output(
        "n", "nvidia", f"{live_status._MARK}smi\nFailed to initialize NVML: Driver/library version mismatch\n"
        f"{live_status._MARK}smi-rc 18\n")
    assert (failed.device_health, failed.smi_error) == (
        "unknown", "Failed to initialize NVML: Driver/library version mismatch")


# ------------------------------------------------------------------ engines in this process


class Engine:
    """/health and /metrics of one model; generation tokens grow at `rate` per second."""

    def __init__(self, name: str, rate: float = 100.0):
        self.name, self.rate, self.started = name, rate, time.monotonic()
        self.health = 200
        self.auth: list[str] = []
        self.metrics_reads: list[float] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                engine.auth.append(self.headers.get("Authorization", ""))
                if self.path == "/health":
                    body = b""
                    code = engine.health
                elif self.path == "/metrics":
                    engine.metrics_reads.append(time.monotonic())
                    tokens = engine.rate * (time.monotonic() - engine.started)
                    body = (f'vllm:num_requests_running{{model_name="{engine.name}"}} 2\n'
                            f'vllm:num_requests_waiting{{model_name="{engine.name}"}} 1\n'
                            f'vllm:kv_cache_usage_perc{{model_name="{engine.name}"}} 0.375\n'
                            f'vllm:generation_tokens_total{{model_name="{engine.name}"}} {tokens}\n').encode()
                    code = 200
                else:
                    body, code = b"", 404
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """Two nodes: node-a (the controller reaches its models) and node-b (`localhost`: its model
    listens on loopback, so the node reads it); fake systemctl and nvidia-smi on PATH."""
    a1, a2, b1 = Engine("qwen3"), Engine("gpt-oss", rate=50.0), Engine("bge")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    units = tmp_path / "units.json"
    units.write_text(json.dumps({}))
    (bin_dir / "systemctl").write_text(f"""#!{sys.executable}
import json, sys, time
states = json.load(open({str(units)!r}))
names = sys.argv[sys.argv.index("--") + 1:]
blocks = []
for name in names:
    state = states.get(name, "active")
    changed = int((time.monotonic() - 90) * 1e6)
    blocks.append("\\n".join([f"Id={{name}}", "LoadState=" + ("not-found" if state == "missing" else "loaded"),
                              "ActiveState=" + ("inactive" if state == "missing" else state),
                              "SubState=" + ("running" if state == "active" else "dead"),
                              f"StateChangeTimestampMonotonic={{changed}}", "NRestarts=1"]))
print("\\n\\n".join(blocks))
""")
    smi = tmp_path / "smi.txt"
    smi.write_text((SMI / "nvidia-smi-query-a100-x8.csv").read_text())
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncat {smi}\nexit ${{SMI_RC:-0}}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    # The node script's python3 (clock, node-side reader): this one, not a slow shim.
    (bin_dir / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SMI_RC", raising=False)

    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "nvidia-nodes").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"fleet": {"children": {"nvidia-nodes": {
        "hosts": {"node-a": {"ansible_host": "127.0.0.1",
                             "fleet_models": [
                                 {"name": "qwen3", "kind": "chat", "path": "/m/q", "port": a1.port, "devices": [0]},
                                 {"name": "gpt-oss", "kind": "chat", "path": "/m/g", "port": a2.port, "devices": [1],
                                  "secret_env": {"VLLM_API_KEY": MODEL_KEY}}]},
                  "node-b": {"ansible_host": "localhost",
                             "fleet_models": [{"name": "bge", "kind": "embedding", "path": "/m/b", "port": b1.port}]}},
    }}}}}}))
    (inventory / "group_vars" / "nvidia-nodes" / "fleet.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "fleet_accelerator": {"vendor": "nvidia", "model": "A100", "count": 8},
        "fleet_serve_api_key": "{{ lookup('env', 'STATUS_TEST_KEY') }}",
    }))
    monkeypatch.setenv("STATUS_TEST_KEY", GROUP_KEY)
    yield {"inventory": inventory, "engines": {"qwen3": a1, "gpt-oss": a2, "bge": b1}, "units": units, "smi": smi}
    for engine in (a1, a2, b1):
        engine.stop()


def rows(result):
    return {r.model: r for r in result.rows}


def test_every_model_is_read_with_its_rate_unit_and_devices(fleet):
    result = api.status(fleet["inventory"], window=1.0)
    got = rows(result)
    assert sorted(got) == ["bge", "gpt-oss", "qwen3"]
    qwen, gpt, bge = got["qwen3"], got["gpt-oss"], got["bge"]
    assert (qwen.via, gpt.via, bge.via) == ("controller", "controller", "ssh")
    for row in got.values():
        assert (row.health, row.running, row.waiting, row.kv_cache) == ("ok", 2, 1, 0.375), row
        assert row.unit_state == "active (running)" and row.restarts == 1
        assert abs(result.read_at - row.since - 90) < 5, row.since
    # The engines' counters grow at 100, 50 and 100 tokens/s (read times are taken on this side
    # of the wire: a loaded machine skews them a little).
    assert 70 < qwen.tokens_per_s < 130 and 35 < gpt.tokens_per_s < 65 and 70 < bge.tokens_per_s < 130
    assert (qwen.device_health, gpt.device_health) == ("OK", "OK")
    assert result.exit_code == live_status.EXIT_OK and result.ok
    # The controller reads its models side by side: every first /metrics read comes before any
    # second one. The node reads its own model on its own clock (its reads wait for ssh, which
    # on a loaded machine can take longer than the window), still a window apart.
    engines = fleet["engines"]
    reads = [engines[name].metrics_reads for name in ("qwen3", "gpt-oss")]
    assert all(len(r) == 2 for r in reads) and max(r[0] for r in reads) < min(r[1] for r in reads), reads
    node_reads = engines["bge"].metrics_reads
    assert len(node_reads) == 2 and node_reads[1] - node_reads[0] >= 0.9, node_reads
    text = str(result)
    assert text.splitlines()[0].split() == ["NODE", "MODEL", "UNIT", "STATE", "SINCE", "HEALTH", "RUN", "WAIT", "KV%",
                                            "TOK/S", "DEVICES"]
    assert "node-a  qwen3" in text and "37.5" in text and "all up" in text


def test_api_keys_are_sent_as_bearer_and_printed_nowhere(fleet, capsys):
    fleet["smi"].write_text(f"NVML: token {GROUP_KEY} refused\n")  # a tool that echoes a secret
    os.environ["SMI_RC"] = "9"
    code = cli.main(["status", "-i", str(fleet["inventory"]), "--json", "--window", "0.2"])
    out = capsys.readouterr()
    engines = fleet["engines"]
    assert set(engines["qwen3"].auth) == {f"Bearer {GROUP_KEY}"}
    assert set(engines["gpt-oss"].auth) == {f"Bearer {MODEL_KEY}"}       # the model's own key wins
    assert set(engines["bge"].auth) == {f"Bearer {GROUP_KEY}"}           # read on the node, same key
    for key in (GROUP_KEY, MODEL_KEY):
        assert key not in out.out + out.err
    data = json.loads(out.out)
    assert data["nodes"]["node-a"]["smi_error"] == f"NVML: token {api.MASK} refused"
    assert code == live_status.EXIT_OK  # an SMI tool that fails leaves health unknown, not down
    # and the node script, which carries the keys, is in no command line: it goes on stdin
    argv = live_status.ssh_argv("n", {"ansible_host": "192.0.2.1", "fleet_serve_api_key": GROUP_KEY}, 5)
    assert argv[-1] == "sh -s" and not any(GROUP_KEY in a for a in argv)


def test_every_secret_given_is_masked_at_any_depth(fleet):
    nested = "hf_Nested-Token-0123456789"  # a secret given as a structure, e.g. a token per hub
    fleet["smi"].write_text(f"NVML: {nested} and 12345678901 refused\n")
    os.environ["SMI_RC"] = "9"
    result = live_status.status(fleet["inventory"], window=0.2,
                                secrets={"model_fetch_tokens": {"hf": nested}, "some_secret": 12345678901})
    assert result.nodes["node-a"].smi_error == f"NVML: {api.MASK} and {api.MASK} refused"


def test_a_stopped_unit_a_dead_engine_and_a_critical_device_are_down(fleet):
    fleet["units"].write_text(json.dumps({"vllm-bge.service": "inactive"}))
    fleet["engines"]["qwen3"].stop()
    fleet["smi"].write_text((SMI / "nvidia-smi-query-unknown-error.csv").read_text())  # GPU 1 needs a reset
    result = live_status.status(fleet["inventory"], window=0.2)
    got = rows(result)
    assert got["bge"].unit_state == "inactive (dead)" and got["bge"].down
    assert got["qwen3"].health != "ok" and got["qwen3"].down and got["qwen3"].tokens_per_s is None
    assert got["gpt-oss"].device_health == "Critical" and got["gpt-oss"].down   # devices [1]
    assert got["qwen3"].device_health == "OK"                                    # devices [0]
    assert result.exit_code == live_status.EXIT_DOWN == 5
    assert "3 down" in str(result)


def test_limit_and_an_unreachable_node(fleet):
    # node-b over SSH to a port where nothing listens: its model cannot be read, nothing is down.
    inventory_dir = fleet["inventory"]
    (inventory_dir / "host_vars").mkdir()
    (inventory_dir / "host_vars" / "node-b.yml").write_text(yaml.safe_dump(
        {"ansible_connection": "ssh", "ansible_port": free_port(), "ansible_ssh_host_key_checking": False}))
    only_a = live_status.status(fleet["inventory"], limit="node-a", window=0.1)
    assert {r.node for r in only_a.rows} == {"node-a"} and only_a.exit_code == live_status.EXIT_OK
    with pytest.raises(ValueError, match="no host of the group fleet"):
        live_status.status(fleet["inventory"], limit="nobody")
    # A variable that does not template names its host (exit 64), no traceback.
    broken = inventory_dir.parent / "broken"
    shutil.copytree(inventory_dir, broken)
    (broken / "host_vars" / "node-a.yml").write_text("fleet_serve_api_key: '{{ not_defined_anywhere }}'\n")
    assert cli.main(["status", "-i", str(broken), "-l", "node-a"]) == cli.EXIT_USAGE
    result = live_status.status(inventory_dir, window=0.1, timeout=2)
    assert result.unreachable_nodes == ["node-b"]
    assert "refused" in result.nodes["node-b"].error.lower() or "connect" in result.nodes["node-b"].error.lower()
    assert rows(result)["bge"].health == "unknown" and not rows(result)["bge"].down
    assert result.exit_code == live_status.EXIT_UNREACHABLE == 3


def test_watch_prints_a_reading_per_refresh(fleet):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "vllm_fleet.cli", "status", "-i", str(fleet["inventory"]),
                             "--json", "--window", "0.1", "--watch", "0.3"], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        deadline = time.monotonic() + 30
        while len(lines) < 2 and time.monotonic() < deadline:
            lines.append(proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    readings = [json.loads(line) for line in lines]
    assert len(readings) == 2 and readings[1]["read_at"] > readings[0]["read_at"]
    assert all(len(r["rows"]) == 3 for r in readings)


# ------------------------------------------------------------------ weights: which nodes hold which revisions

MARKER = ".vllm-fleet-complete"
SOURCE = {"type": "huggingface", "repo": "org/m", "revision": "r1"}


@pytest.fixture
def weights_fleet(tmp_path, monkeypatch):
    """Four CPU nodes in waves, with a mirror: node-a holds org/m@r1 verified (its completion marker,
    written as model_fetch writes it: the source, as JSON) and shares it; node-b lacks it and holds
    org/old at a directory whose marker records another revision; node-c lacks it and has a model
    of a path source; node-d is unreachable over SSH. The node script runs here (connection local)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    share = tmp_path / "share-a"

    def model(node, name, source, size_gb=None):
        entry = {"name": name, "kind": "chat", "path": str(tmp_path / node / name), "source": source,
                 "port": free_port()}
        return {**entry, "size_gb": size_gb} if size_gb else entry

    held = tmp_path / "node-a" / "m"
    held.mkdir(parents=True)
    (held / "model.safetensors").write_bytes(b"w" * 3000)
    (held / MARKER).write_text(json.dumps(SOURCE, indent=4) + "\n")
    (share / "models" / "org" / "m").mkdir(parents=True)
    (share / "models" / "org" / "m" / "r1").symlink_to(held)
    stale = tmp_path / "node-b" / "old"
    stale.mkdir(parents=True)
    (stale / MARKER).write_text(json.dumps({"type": "huggingface", "repo": "org/old", "revision": "r0"}) + "\n")
    old = {"type": "huggingface", "repo": "org/old", "revision": "r1"}
    nodes = {
        "node-a": [model("node-a", "m", SOURCE)],
        "node-b": [model("node-b", "m", SOURCE), model("node-b", "old", old, size_gb=2)],
        "node-c": [model("node-c", "m", SOURCE), {**model("node-c", "local", {"type": "path"})}],
        "node-d": [model("node-d", "m", SOURCE)],
    }
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "cpu-nodes").mkdir(parents=True)
    (inventory / "host_vars").mkdir()
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "fleet": {"children": {"cpu-nodes": {"hosts": {
            host: {"ansible_host": "127.0.0.1", "fleet_models": models} for host, models in nodes.items()}}}},
        "mirror": {"hosts": {"mirror-01": {"ansible_host": "127.0.0.1"}}}}}}))
    (inventory / "group_vars" / "cpu-nodes" / "fleet.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "fleet_accelerator": {"vendor": "cpu", "model": "x86_64", "count": 2},
        "model_fetch_distribution": "waves"}))
    (inventory / "host_vars" / "node-a.yml").write_text(yaml.safe_dump({"model_fetch_share_dir": str(share)}))
    (inventory / "host_vars" / "node-d.yml").write_text(yaml.safe_dump(
        {"ansible_connection": "ssh", "ansible_port": free_port(), "ansible_ssh_host_key_checking": False}))
    return {"inventory": inventory, "held": held, "stale": stale}


def test_status_says_which_nodes_hold_each_revision_and_what_the_next_run_moves(weights_fleet, capsys):
    result = api.status(weights_fleet["inventory"], window=0.1, timeout=2)
    node_a = result.nodes["node-a"]
    size = 3000  # its files' bytes, the marker aside
    assert node_a.held[str(weights_fleet["held"])] == {"bytes": size, "source": SOURCE}
    assert node_a.shared == ["models/org/m/r1"]
    rows = {row["revision"]: row for row in result.weights}
    # A path source is checked in place, never fetched: not in the account.
    assert sorted(rows) == ["org/m@r1", "org/old@r1"]
    m = rows["org/m@r1"]
    assert (m["holders"], m["needing"], m["unread"], m["sharing"]) == (["node-a"], ["node-b", "node-c"], ["node-d"],
                                                                       ["node-a"])
    # Its size is node-a's copy on disk; in waves node-b fetches from node-a and the mirror, node-c
    # from node-a and node-b (the mirror a spare): the mirror serves half a copy.
    assert m["size"] == size and m["bytes"] == 2 * size
    assert m["moves"] == {"total": 2 * size, "mirror": round(size / 2), "peers": 2 * size - round(size / 2)}
    # node-b's directory of org/old records r0: model_fetch counts it complete (its marker), so the next
    # run moves nothing there, and status says whose revision it really holds.
    old = rows["org/old@r1"]
    assert (old["holders"], old["needing"], old["moves"]["total"]) == (["node-b"], [], 0)
    assert result.nodes["node-b"].stale == {str(weights_fleet["stale"]): "org/old@r0"}
    text = str(result)
    assert "weights (completion markers on the nodes; the next run's bytes):" in text
    assert ("  org/m@r1: held by node-a; to fetch on node-b, node-c: 6.0 KB (about 1.5 KB from the mirror, 4.5 KB "
            "from peers); not read on node-d") in text.splitlines()
    assert f"node-b: {weights_fleet['stale']} holds org/old@r0 (its completion marker)" in text
    # --json: the same rows, and each node's holdings.
    cli.main(["status", "-i", str(weights_fleet["inventory"]), "--json", "--window", "0.1"])
    data = json.loads(capsys.readouterr().out)
    assert [row["revision"] for row in data["weights"]] == ["org/m@r1", "org/old@r1"]
    assert data["weights"][0]["moves"] == m["moves"]
    assert data["nodes"]["node-a"]["shared"] == ["models/org/m/r1"]
    assert data["nodes"]["node-b"]["stale"] == {str(weights_fleet["stale"]): "org/old@r0"}


def test_without_ssh_status_reads_no_weights(weights_fleet):
    result = live_status.status(weights_fleet["inventory"], window=0.1, timeout=2, ssh=False)
    assert result.weights == [] and "weights" not in str(result)
