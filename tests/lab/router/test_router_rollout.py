"""Rolling changes through the router (vllm-fleet rollout, roles/fleet_rollout) on the router's
lab (conftest.py), after the router's own tests and the front door's, whose last rollout (a flag
change through the vLLM router's pool) left --max-num-seqs 128 on both nodes. While a client sends
requests through HAProxy's own policy without pause, a release whose engine does not start (the
lab's vllm 0.11.2.post1, a fixture release whose `vllm serve` fails at start-up) rolls out: the
first node fails its readiness gate, goes back to its previous release by itself and serves
again, the second node is never touched; the exit code and the summary name the node and the
reason. No request fails."""

from __future__ import annotations

import json
import time

import pytest

from tests.lab.router.conftest import (
    BASE,
    NODES,
    UNIT,
    Client,
    answered,
    chat,
    current,
    delta,
    engine_args,
    flag,
    group_matrix,
    on_node,
    server_status,
    set_host_vars,
    vllm_fleet,
)
from vllm_fleet.vendors import vendor_release_id


@pytest.fixture(scope="module")
def routed_quiet(routed):
    """The lab with both servers UP (the router's tests drained and stopped nodes)."""
    lab_api, port = routed
    deadline = time.monotonic() + 60
    while set(server_status(lab_api).values()) != {"UP"}:
        assert time.monotonic() < deadline, server_status(lab_api)
        time.sleep(0.5)
    return lab_api, port


def test_a_release_whose_engine_fails_rolls_the_first_node_back_and_never_touches_the_second(routed_quiet):
    lab_api, port = routed_quiet
    matrix = group_matrix()
    good = vendor_release_id(matrix, "nvidia")
    bad_matrix = {**matrix, "vllm": {**matrix["vllm"], "version": "0.11.2.post1"},
                  "vllm_image": {**matrix["vllm_image"], "tag": "v0.11.2.post1"}}
    bad = vendor_release_id(bad_matrix, "nvidia")
    assert {current(lab_api, node) for node in NODES} == {f"releases/{good}"}
    second_pid = on_node(lab_api, NODES[1], f"systemctl show -p MainPID --value {UNIT}")
    for node in NODES:
        set_host_vars(node, fleet_matrix=bad_matrix)
    try:
        start = time.monotonic()
        with Client(port) as client:
            proc = vllm_fleet("rollout", "--json")
        took = time.monotonic() - start
    finally:
        for node in NODES:
            set_host_vars(node, fleet_matrix=None)
    print(f"\nrollout of a bad release: stopped after {took:.1f} s, {client.sent} requests through the router, "
          f"{len(client.failures)} failed")
    result = json.loads(proc.stdout)
    # Exit code 2 (a node failed); the summary names the node, what failed, and where it is.
    assert proc.returncode == 2, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert result["rollout"]["reached"] == [NODES[0]] and result["rollout"]["not_reached"] == [NODES[1]]
    (failure,) = result["failures"]
    assert failure["host"] == NODES[0]
    assert "CUDA error: no kernel image is available" in failure["message"], failure
    assert f"back on release {good}, serving" in failure["message"], failure
    assert result["releases"][NODES[0]]["to"] == good
    assert client.failures == [], client.failures[:5]

    # The first node: the bad release installed beside the good one, current back on the good one, serving.
    assert current(lab_api, NODES[0]) == f"releases/{good}"
    assert bad in on_node(lab_api, NODES[0], f"ls {BASE}/releases").split()
    assert flag(engine_args(lab_api, NODES[0]), "--max-num-seqs") == "128"
    # The second node: never touched (same engine process, no bad release).
    assert on_node(lab_api, NODES[1], f"systemctl show -p MainPID --value {UNIT}") == second_pid
    assert current(lab_api, NODES[1]) == f"releases/{good}"
    assert bad not in on_node(lab_api, NODES[1], f"ls {BASE}/releases").split()
    assert set(server_status(lab_api).values()) == {"UP"}
    before = answered(lab_api)
    for _ in range(8):
        chat(port)
    assert min(delta(before, answered(lab_api)).values()) >= 2
