"""roles/blocks/health_agent's agent, asked as HAProxy's agent-check asks it, over the lab's stand-in
nvidia-smi; and `vllm-fleet status`'s reading of the same quarantine."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.simulated_node import BIN, Node
from vllm_fleet import live_status

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "roles" / "blocks" / "health_agent" / "files" / "vllm-fleet-health-agent"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(port: int, line: bytes) -> str:
    """One agent-check: connect, send the line (HAProxy's agent-send), read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(line)
        return conn.makefile("rb").readline().decode().rstrip("\n")


@pytest.fixture
def agent(tmp_path):
    """The agent on a simulated 4-GPU node; yields (port, set_health, set_tool)."""
    node = Node(tmp_path, "nvidia", count=4)
    root, set_health = node.root, node.set_health
    # The tool the agent runs: the lab's stand-in, or a broken one.
    tool = tmp_path / "nvidia-smi"

    def set_tool(broken: bool) -> None:
        tool.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"
                        if broken else f"#!/bin/sh\nexec {sys.executable} {BIN / 'nvidia-smi'} \"$@\"\n")
        tool.chmod(0o755)

    set_tool(broken=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(AGENT, bin_dir / AGENT.name)
    shutil.copy(ROOT / "module_utils" / "vllm_fleet_accel.py", bin_dir / "vllm_fleet_accel.py")
    port = free_port()
    config = tmp_path / "health-agent.json"
    config.write_text(json.dumps({"listen": "127.0.0.1", "port": port, "vendor": "nvidia",
                                  "healthy": ["OK", "unknown", "Warning"], "interval": 0.2, "smi_path": str(tool),
                                  "models": {"qwen": [0, 1], "embedder": [2]}}))
    proc = subprocess.Popen([sys.executable, str(bin_dir / AGENT.name), "--config", str(config)],
                            env={**os.environ, "VLLM_FLEET_LAB_ROOT": str(root)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            ask(port, b"qwen\n")
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
    yield port, set_health, set_tool
    proc.terminate()
    proc.wait(timeout=10)


def settled(port: int, line: bytes, expected: str) -> str:
    """The agent's answer once it read the listing again (it reads it every 0.2 s here)."""
    deadline = time.monotonic() + 10
    while (got := ask(port, line)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def test_a_model_whose_device_turns_critical_gets_weight_0_and_comes_back(agent):
    port, set_health, _ = agent
    assert [ask(port, b"qwen\n"), ask(port, b"embedder\n")] == ["100%", "100%"]
    set_health({"1": "Critical"})
    # The model on device 1 leaves the pools; the one on device 2 stays; a name the agent does not
    # know (or none) is judged by the node's devices as a whole.
    assert settled(port, b"qwen\n", "0% #quarantined: device 1 Critical") == "0% #quarantined: device 1 Critical"
    assert ask(port, b"embedder\n") == "100%"
    assert ask(port, b"other\n") == "0% #quarantined: device 1 Critical"
    set_health({})
    assert settled(port, b"qwen\n", "100%") == "100%"


def test_an_unreadable_listing_quarantines_nothing_and_says_why(agent):
    port, set_health, set_tool = agent
    set_health({"0": "Critical"})
    assert settled(port, b"qwen\n", "0% #quarantined: device 0 Critical").startswith("0%")
    set_tool(broken=True)
    got = settled(port, b"qwen\n", "")
    deadline = time.monotonic() + 10
    while not got.startswith("100%") and time.monotonic() < deadline:
        time.sleep(0.1)
        got = ask(port, b"qwen\n")
    assert got.startswith("100% #device health unknown:") and "could not communicate" in got, got


def test_a_client_that_sends_nothing_gets_the_nodes_answer(agent):
    port, set_health, _ = agent
    set_health({"3": "Critical"})
    settled(port, b"nothing\n", "0% #quarantined: device 3 Critical")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        assert conn.makefile("rb").readline().decode().rstrip("\n") == "0% #quarantined: device 3 Critical"


# ---------------------------------------------------------------- status

def _row(node: str, devices: list[int], **kw) -> live_status.ModelStatus:
    return live_status.ModelStatus(node=node, model="qwen", name="qwen", unit="vllm-qwen", url=None,
                                   devices=devices, **kw)


def test_status_says_why_a_model_is_quarantined_with_the_vendors_healthy_states():
    node = live_status.NodeStatus(node="n1", reachable=True, vendor="nvidia",
                                  devices=[{"index": 0, "health": "OK"}, {"index": 1, "health": "Critical"},
                                           {"index": 2, "health": "Warning"}])
    assert live_status.quarantine_reason(_row("n1", [0, 1]), node) == "device 1 Critical"
    # NVIDIA's contract counts Warning as healthy.
    assert live_status.quarantine_reason(_row("n1", [2]), node) == ""
    assert live_status.quarantine_reason(_row("n1", []), node) == "device 1 Critical"
    unread = live_status.NodeStatus(node="n1", reachable=True, vendor="nvidia", devices=[])
    assert live_status.quarantine_reason(_row("n1", [0]), unread) == ""


def test_status_says_loudly_when_no_replica_of_a_model_is_left():
    sick = _row("n1", [1], quarantined="device 1 Critical", unit_state="active (running)", health="ok")
    well = _row("n2", [0], unit_state="active (running)", health="ok")
    assert live_status.unserved([sick, well]) == []
    stopped = _row("n2", [0], unit_state="inactive (dead)", health="ok")
    assert live_status.unserved([sick, stopped]) == ["qwen"]
    result = live_status.StatusResult(inventory="i", limit=None, rows=[sick, stopped], nodes={}, window=1,
                                      duration=1, read_at=time.time())
    text = str(result)
    assert "n1/qwen: quarantined (no new request from the routers): device 1 Critical" in text
    assert "qwen: NO HEALTHY REPLICA LEFT" in text
