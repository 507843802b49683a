"""The router (roles/services/router, HAProxy) in front of two NVIDIA nodes serving the same model
(the lab and its helpers: conftest.py): balancing, health checks, drain and ready, streaming,
and the quarantine of a node whose devices turn Critical (roles/blocks/health_agent)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request

from tests.conftest import venv_tool
from tests.lab.conftest import answer_text, recap, run_doc_command
from tests.lab.conftest import lab_env as env
from tests.lab.router.conftest import (
    INVENTORY,
    LAB,
    MODEL,
    ROOT,
    ROUTER,
    UNIT,
    answered,
    chat,
    delta,
    host_vars,
    on_node,
    playbook,
    server_status,
    set_host_vars,
    wait_status,
)


def test_requests_through_the_router_reach_both_nodes(routed):
    lab_api, port = routed
    assert server_status(lab_api) == {"nvidia-01": "UP", "nvidia-02": "UP"}
    before = answered(lab_api)
    for _ in range(10):
        assert answer_text(chat(port))
    spread = delta(before, answered(lab_api))
    assert sum(spread.values()) == 10 and min(spread.values()) >= 3, spread


def test_a_stopped_node_is_taken_out_and_requests_still_succeed(routed):
    lab_api, port = routed
    lab_api.run(LAB, "nvidia-01", f"systemctl stop {UNIT}")
    try:
        # Before the health check notices: a refused connection is sent to the other node.
        for _ in range(5):
            chat(port)
        took = wait_status(lab_api, "nvidia-01", "DOWN")
        print(f"\nnvidia-01 marked DOWN {took:.1f} s after the 5 requests")
        before = answered(lab_api)
        for _ in range(5):
            chat(port)
        assert delta(before, answered(lab_api)) == {"nvidia-01": 0, "nvidia-02": 5}
    finally:
        lab_api.run(LAB, "nvidia-01", f"systemctl start {UNIT}")
    print(f"nvidia-01 back UP in {wait_status(lab_api, 'nvidia-01', 'UP', timeout=60):.1f} s")


def test_drain_stops_new_requests_and_ready_brings_them_back(routed):
    """router.md's two commands, as written."""
    lab_api, port = routed
    wait_status(lab_api, "nvidia-01", "UP", timeout=60)
    start = time.monotonic()
    proc = run_doc_command("docs/operations/router.md", "router-drain.yml", inventory=INVENTORY,
                           lacks=("router_drain_state",))
    print(f"\ndrain playbook {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert server_status(lab_api)["nvidia-01"] == "DRAIN"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api)) == {"nvidia-01": 0, "nvidia-02": 6}

    proc = run_doc_command("docs/operations/router.md", "router_drain_state=ready", inventory=INVENTORY)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert server_status(lab_api)["nvidia-01"] == "UP"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api))["nvidia-01"] >= 2


def test_drain_of_a_node_that_serves_no_such_model_fails(routed):
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=nvidia-03",
                    playbook="playbooks/router-drain.yml")
    assert proc.returncode != 0
    assert "nvidia-03 is no server of gpt-oss-20b on this router" in proc.stdout


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


# The lab's SMI tools read each device's health from the node's hardware profile.
HEALTH = ("python3 -c \"import json; p='/etc/vllm-fleet-lab/hardware.json'; h=json.load(open(p)); "
          "h['health']={}; json.dump(h, open(p + '.new', 'w'))\" && mv /etc/vllm-fleet-lab/hardware.json.new "
          "/etc/vllm-fleet-lab/hardware.json")


def routed_chat(port: int) -> str:
    """One chat completion through the router; the node HAProxy sent it to (X-Vllm-Fleet-Node)."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "who are you"}],
                       "max_tokens": 8}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 200 and answer_text(json.loads(answer.read()))
        return answer.headers["X-Vllm-Fleet-Node"]


def test_a_node_whose_device_turns_critical_leaves_the_pool_and_comes_back(routed):
    """Issue 23's quarantine: nvidia-02's devices turn Critical while a client loops through the
    router; its health agent answers HAProxy's agent-check with a weight of 0, so requests stop
    reaching it, and once the devices are healthy they come back. No request fails, and status
    says the model is quarantined and why."""
    lab_api, port = routed
    wait_status(lab_api, "nvidia-01", "UP", timeout=60)
    log: list[tuple[float, str | None, str | None]] = []  # (sent at, node that answered, error)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            sent = time.monotonic()
            try:
                log.append((sent, routed_chat(port), None))
            except (OSError, AssertionError, urllib.error.HTTPError, ValueError, KeyError) as exc:
                log.append((sent, None, repr(exc)))
            time.sleep(0.05)

    def landed_on(node: str, since: float) -> list[float]:
        return [t for t, n, _ in list(log) if n == node and t >= since]

    client = threading.Thread(target=loop, daemon=True)
    client.start()
    try:
        time.sleep(3)
        sick = time.monotonic()
        lab_api.run(LAB, "nvidia-02", HEALTH.format({str(i): "Critical" for i in range(8)}))
        try:
            # Out of the pool: 10 s in a row with no request reaching it (at most 45 s).
            while time.monotonic() - sick < 45 and time.monotonic() - max([sick, *landed_on("nvidia-02", sick)]) < 10:
                time.sleep(0.5)
            rc, data = status_of("nvidia-02")
        finally:
            healed = time.monotonic()
            lab_api.run(LAB, "nvidia-02", HEALTH.format({}))
        while time.monotonic() - healed < 45 and not landed_on("nvidia-02", healed):
            time.sleep(0.5)
        time.sleep(2)
    finally:
        stop.set()
        client.join(timeout=90)
    out_s = max([sick, *[t for t in landed_on("nvidia-02", sick) if t < healed]]) - sick
    back = landed_on("nvidia-02", healed)
    print(f"\nquarantine: {len(log)} requests, out of the pool {out_s:.1f} s after Critical, "
          f"back {(back[0] - healed) if back else float('nan'):.1f} s after healthy")
    assert [e for _, _, e in log if e] == []
    assert out_s <= 30, f"nvidia-02 still answered {out_s:.1f} s after its devices turned Critical"
    assert back and back[0] - healed <= 30, "nvidia-02 did not come back within 30 s of being healthy"
    assert landed_on("nvidia-01", sick), "nvidia-01 answered nothing while nvidia-02 was out"
    row = next(r for r in data["rows"] if r["node"] == "nvidia-02")
    assert rc == 5 and row["quarantined"].startswith("device ") and "Critical" in row["quarantined"], data


def status_of(node: str) -> tuple[int, dict]:
    proc = subprocess.run([venv_tool("vllm-fleet"), "status", "-i", str(INVENTORY), "--json",
                           "--window", "0.2", "-l", node], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env())
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_replicas_that_differ_in_max_model_len_are_refused_before_any_node_is_touched(routed):
    """Issue 23's replica consistency on the lab: nvidia-02's model given another max_model_len than
    nvidia-01's behind the same router name; site.yml stops at validation, naming both hosts, and
    no node is contacted (no fact gathered, no engine restarted)."""
    lab_api, port = routed
    before = on_node(lab_api, "nvidia-02", f"systemctl show -p MainPID --value {UNIT}")
    (model,) = host_vars("nvidia-02")["fleet_models"]
    changed = {**model, "serve": {**model["serve"], "max_model_len": 1024}}
    set_host_vars("nvidia-02", fleet_models=[changed])
    try:
        proc = playbook()
    finally:
        set_host_vars("nvidia-02", fleet_models=[model])
    assert proc.returncode != 0
    assert ("nvidia-01 and nvidia-02 serve it with a different max_model_len") in proc.stdout, proc.stdout[-3000:]
    assert "Gathering Facts" not in proc.stdout and "preflight" not in proc.stdout, proc.stdout[-3000:]
    assert on_node(lab_api, "nvidia-02", f"systemctl show -p MainPID --value {UNIT}") == before
    assert answer_text(chat(port))
