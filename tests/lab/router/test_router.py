"""The router on a lab of its own: two Moore Threads nodes serving the same model behind
one HAProxy router node.

Moore Threads because its stack converges fastest in the lab (no reboot, a conda archive,
the engine stand-in answers at once) and each node is cut down to one model: the real CPU
engine would take about 2 minutes and 2 GB per node and proves nothing more about routing.
Which node answered is read from each node's engine access log (its journal)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import recap

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "router"
WORK = ROOT / ".cache" / "router-test"
INVENTORY = WORK / "inventory"
OVERRIDES = WORK / "overrides.yml"
MODEL = "gptq-qwen3-8b"
UNIT = f"vllm-{MODEL}"
NODES = ("musa-01", "musa-02")
ROUTER = "router-01"


def playbook(*args: str, playbook: str = "site.yml") -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(INVENTORY), "-i", str(OVERRIDES), playbook, *args]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def routed():
    """The lab booted and converged; yields (lab API, router port). Timings go to the test's output."""
    from vllm_fleet import lab as lab_api
    from vllm_fleet.lab.paths import lab_paths

    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    lab_api.down(LAB, log=lambda m: None)
    start = time.monotonic()
    lab_api.up(LAB, vendors=["musa"], nodes_per_vendor=2, routers=1, inventory_dir=INVENTORY, log=lambda m: None)
    booted = time.monotonic()
    port = lab_paths(LAB).service_port(2, 0)  # router-01 is the third node (index 2)
    models = yaml.safe_load((INVENTORY / "group_vars/musa-nodes/models.yml").read_text())["fleet_models"]
    OVERRIDES.write_text(yaml.safe_dump({"all": {"hosts": {
        **{node: {"fleet_models": [m for m in models if m["name"] == MODEL]} for node in NODES},
        ROUTER: {"router_models": [{"name": MODEL, "port": port}], "router_check_interval": "1s"}}}}))
    proc = playbook()
    converged = time.monotonic()
    print(f"\nlab up {booted - start:.1f} s, site.yml {converged - booted:.1f} s")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert set(recap(proc.stdout)) == {*NODES, ROUTER}
    yield lab_api, port
    if not os.environ.get("VLLM_FLEET_KEEP_LAB"):
        lab_api.down(LAB, log=lambda m: None)


def chat(port: int) -> dict:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "who are you"}],
                       "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
        return json.loads(answer.read())


def answered(lab_api) -> dict[str, int]:
    """Chat completions each node's engine has logged so far."""
    return {node: int(lab_api.run(LAB, node, f"journalctl -u {UNIT} -o cat | grep -c 'POST /v1/chat/completions' "
                                  "|| true").strip() or 0) for node in NODES}


def server_status(lab_api) -> dict[str, str]:
    """HAProxy's view of each server of the model's backend (UP, DOWN, DRAIN, ...)."""
    out = lab_api.run(LAB, ROUTER, 'echo "show stat" | socat stdio unix-connect:/run/haproxy/admin.sock')
    rows = [line.split(",") for line in out.splitlines() if line.startswith(f"model_{MODEL},")]
    return {row[1]: row[17] for row in rows if row[1] in NODES}


def wait_status(lab_api, node: str, status: str, timeout: float = 20) -> float:
    start = time.monotonic()
    while server_status(lab_api).get(node) != status:
        assert time.monotonic() - start < timeout, f"{node} not {status}: {server_status(lab_api)}"
        time.sleep(0.2)
    return time.monotonic() - start


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {node: after[node] - before[node] for node in NODES}


def test_requests_through_the_router_reach_both_nodes(routed):
    lab_api, port = routed
    assert server_status(lab_api) == {"musa-01": "UP", "musa-02": "UP"}
    before = answered(lab_api)
    for _ in range(10):
        assert chat(port)["choices"][0]["message"]["content"]
    spread = delta(before, answered(lab_api))
    assert sum(spread.values()) == 10 and min(spread.values()) >= 3, spread


def test_a_stopped_node_is_taken_out_and_requests_still_succeed(routed):
    lab_api, port = routed
    lab_api.run(LAB, "musa-01", f"systemctl stop {UNIT}")
    try:
        # Before the health check notices: a refused connection is sent to the other node.
        for _ in range(5):
            chat(port)
        took = wait_status(lab_api, "musa-01", "DOWN")
        print(f"\nmusa-01 marked DOWN {took:.1f} s after the 5 requests")
        before = answered(lab_api)
        for _ in range(5):
            chat(port)
        assert delta(before, answered(lab_api)) == {"musa-01": 0, "musa-02": 5}
    finally:
        lab_api.run(LAB, "musa-01", f"systemctl start {UNIT}")
    print(f"musa-01 back UP in {wait_status(lab_api, 'musa-01', 'UP', timeout=60):.1f} s")


def test_drain_stops_new_requests_and_ready_brings_them_back(routed):
    lab_api, port = routed
    wait_status(lab_api, "musa-01", "UP", timeout=60)
    start = time.monotonic()
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=musa-02",
                    playbook="playbooks/router-drain.yml")
    print(f"\ndrain playbook {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert server_status(lab_api)["musa-02"] == "DRAIN"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api)) == {"musa-01": 6, "musa-02": 0}

    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=musa-02",
                    "-e", "router_drain_state=ready", playbook="playbooks/router-drain.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert server_status(lab_api)["musa-02"] == "UP"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api))["musa-02"] >= 2


def test_drain_of_a_node_that_serves_no_such_model_fails(routed):
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=musa-03",
                    playbook="playbooks/router-drain.yml")
    assert proc.returncode != 0
    assert "musa-03 is no server of gptq-qwen3-8b on this router" in proc.stdout


def test_streamed_answers_pass_chunk_by_chunk(routed):
    _, port = routed
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "who are you"}],
                       "max_tokens": 8, "stream": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.headers.get_content_type() == "text/event-stream"
        events = [line for line in answer.read().decode().splitlines() if line.startswith("data: ")]
    assert len(events) >= 3 and events[-1] == "data: [DONE]"


def test_a_second_run_changes_nothing_on_the_router(routed):
    proc = playbook("-l", ROUTER)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc.stdout)[ROUTER]["changed"] == 0
