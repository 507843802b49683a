"""The router (roles/router, HAProxy) in front of two NVIDIA nodes serving the same model
(the lab and its helpers: conftest.py): balancing, health checks, drain and ready, streaming."""

from __future__ import annotations

import json
import time
import urllib.request

from tests.lab.conftest import answer_text, recap
from tests.lab.router.conftest import (
    LAB,
    MODEL,
    ROUTER,
    UNIT,
    answered,
    chat,
    delta,
    playbook,
    server_status,
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
    lab_api, port = routed
    wait_status(lab_api, "nvidia-01", "UP", timeout=60)
    start = time.monotonic()
    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=nvidia-02",
                    playbook="playbooks/router-drain.yml")
    print(f"\ndrain playbook {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert server_status(lab_api)["nvidia-02"] == "DRAIN"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api)) == {"nvidia-01": 6, "nvidia-02": 0}

    proc = playbook("-e", f"router_drain_model={MODEL}", "-e", "router_drain_node=nvidia-02",
                    "-e", "router_drain_state=ready", playbook="playbooks/router-drain.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert server_status(lab_api)["nvidia-02"] == "UP"
    before = answered(lab_api)
    for _ in range(6):
        chat(port)
    assert delta(before, answered(lab_api))["nvidia-02"] >= 2


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
