"""Rolling changes through the router (vllm-fleet rollout, roles/fleet_rollout) on the router's
lab (conftest.py), after the router's own tests: while a client sends requests through the
router without pause,

1. a flag change rolls out one node at a time: no request fails, both engines run the new flag;
2. a release whose engine does not start (the lab's vllm 0.11.2.post1, a fixture release whose
   `vllm serve` fails at start-up) rolls out: the first node fails its readiness gate, goes back
   to its previous release by itself and serves again, the second node is never touched; the
   exit code and the summary name the node and the reason. No request fails either."""

from __future__ import annotations

import json
import threading
import time
import urllib.error

import pytest

from tests.lab.conftest import answer_text
from tests.lab.router.conftest import (
    BASE,
    LAB,
    NODES,
    UNIT,
    answered,
    chat,
    delta,
    group_matrix,
    host_vars,
    server_status,
    set_host_vars,
    vllm_fleet,
)
from vllm_fleet.vendors import vendor_release_id


class Client(threading.Thread):
    """Chat completions through the router, one after another, until stopped; every failure kept."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.sent = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.sent += 1
            try:
                assert answer_text(chat(self.port, timeout=60))
            except (OSError, AssertionError, urllib.error.HTTPError, ValueError) as exc:
                self.failures.append(f"request {self.sent}: {exc!r}")
            time.sleep(0.05)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(timeout=90)


def on_node(lab_api, node: str, command: str) -> str:
    return lab_api.run(LAB, node, command, timeout=120).strip()


def engine_args(lab_api, node: str) -> list[str]:
    """The running engine's command line."""
    pid = on_node(lab_api, node, f"systemctl show -p MainPID --value {UNIT}")
    return on_node(lab_api, node, f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def current(lab_api, node: str) -> str:
    return on_node(lab_api, node, f"readlink {BASE}/current")


@pytest.fixture(scope="module")
def routed_quiet(routed):
    """The lab with both servers UP (the router's tests drained and stopped nodes)."""
    lab_api, port = routed
    deadline = time.monotonic() + 60
    while set(server_status(lab_api).values()) != {"UP"}:
        assert time.monotonic() < deadline, server_status(lab_api)
        time.sleep(0.5)
    return lab_api, port


def test_a_flag_change_rolls_out_node_by_node_without_a_failed_request(routed_quiet):
    lab_api, port = routed_quiet
    before_args = {node: engine_args(lab_api, node) for node in NODES}
    assert {flag(args, "--max-num-seqs") for args in before_args.values()} == {"256"}
    for node in NODES:
        (model,) = host_vars(node)["fleet_models"]
        set_host_vars(node, fleet_models=[{**model, "serve": {**model["serve"], "max_num_seqs": 128}}])

    start = time.monotonic()
    with Client(port) as client:
        proc = vllm_fleet("rollout", "--serial", "1", "--json")
        time.sleep(1)  # a few requests after the last node is back
    took = time.monotonic() - start
    result = json.loads(proc.stdout)
    print(f"\nrollout of a flag change over 2 nodes {took:.1f} s, {client.sent} requests through the router, "
          f"{len(client.failures)} failed")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert result["rollout"]["reached"] == list(NODES) and result["rollout"]["not_reached"] == []
    assert client.failures == [] and client.sent >= 10, client.failures[:5]
    for node in NODES:
        assert flag(engine_args(lab_api, node), "--max-num-seqs") == "128", node
    assert set(server_status(lab_api).values()) == {"UP"}
    # Both nodes take requests again.
    before = answered(lab_api)
    for _ in range(8):
        chat(port)
    assert min(delta(before, answered(lab_api)).values()) >= 2


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
