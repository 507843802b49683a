"""`vllm-fleet status` on the converged lab: one row per unit the nodes really have, read in
seconds; tokens/s follows real requests; a stopped unit and a device the SMI tool reports
Critical are down (exit 5). The module converges the lab first (`converged`), so it reads the
nodes it made, whatever ran before it; after test_drift, that converge is a no-op on the fast path."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import venv_tool
from tests.lab.conftest import INVENTORY, LAB, ROOT, run_doc_command

HOSTS = ("ascend-01", "ascend-02", "nvidia-01", "nvidia-02")
#: The node whose unit is stopped (its models are down, the others up).
STOPPED = "ascend-02"


def status(*args: str) -> tuple[int, dict, float]:
    started = time.monotonic()
    proc = subprocess.run([venv_tool("vllm-fleet"), "status", "-i", str(INVENTORY), "--json", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - started


def units_on(lab, host: str) -> set[str]:
    """The model units on the node: those roles/blocks/vllm_service wrote (its marker is in each)."""
    out = lab.run(LAB, host, "grep -l 'Managed by vllm-fleet (roles/vllm_service)' "
                             "/etc/systemd/system/*.service")
    return {Path(line.strip()).name.removesuffix(".service") for line in out.splitlines() if line.strip()}


def complete(url: str, model: str, n: int) -> int:
    """n completions; the tokens the engine reports it generated."""
    tokens = 0
    for _ in range(n):
        body = json.dumps({"model": model, "prompt": "who are you", "max_tokens": 16}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as response:  # noqa: S310 - the lab's engine
            tokens += json.loads(response.read())["usage"]["completion_tokens"]
    return tokens


@pytest.fixture(scope="module")
def converged(lab):
    # monitoring.md's converge of the whole site, as written.
    proc = run_doc_command("docs/operations/monitoring.md", "site.yml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return lab


def test_status_shows_every_unit_and_tokens_per_second_follow_requests(converged):
    lab = converged
    rc, idle, wall = status("--window", "1")
    assert rc == 0, idle
    rows = idle["rows"]
    assert {(r["node"], r["unit"]) for r in rows} == {(h, u) for h in HOSTS for u in units_on(lab, h)}
    for r in rows:
        assert (r["health"], r["unit_state"], r["device_health"], r["via"]) == ("ok", "active (running)", "OK",
                                                                               "controller"), r
        assert r["since"] and r["running"] == 0 and r["waiting"] == 0 and r["tokens_per_s"] == 0, r
    # Read side by side: one window, whatever the number of models and nodes (the wall time,
    # figures in docs/performance.md, includes loading the inventory and this machine's load).
    assert idle["duration_s"] - idle["inventory_s"] < 1 + 4, idle  # one after the other: >= 4 windows
    print(f"status on {len(HOSTS)} nodes: {wall:.2f} s wall, {idle['duration_s']} s in status, "
          f"{idle['inventory_s']} s of it loading the inventory")

    # Requests sent to one model during the window: its tokens/s is what it generated, the others stay 0.
    target = next(r for r in rows if r["node"] == "nvidia-01")
    sent: list[int] = []
    stop = threading.Event()

    def load():
        while not stop.is_set():
            sent.append(complete(target["url"], target["model"], 1))
            time.sleep(0.05)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        rc, busy, _ = status("--window", "2", "-l", "nvidia-01,ascend-01")
    finally:
        stop.set()
        worker.join()
    assert rc == 0, busy
    by_node = {r["node"]: r for r in busy["rows"]}
    assert set(by_node) == {"nvidia-01", "ascend-01"}
    assert by_node["nvidia-01"]["tokens_per_s"] > 0, by_node["nvidia-01"]
    # No more than the requests generated during the whole run (the window is part of it).
    assert by_node["nvidia-01"]["tokens_per_s"] * 2 <= sum(sent) + 16, (by_node["nvidia-01"], sum(sent))
    assert by_node["ascend-01"]["tokens_per_s"] == 0


def test_a_stopped_unit_is_down_and_exits_5(converged):
    lab = converged
    unit = next(iter(units_on(lab, STOPPED)))
    lab.run(LAB, STOPPED, f"systemctl stop {unit}.service")
    try:
        rc, data, _ = status("--window", "0.2", "-l", "ascend-nodes")
    finally:
        lab.run(LAB, STOPPED, f"systemctl start {unit}.service")
    assert rc == 5, data
    assert data["down"] == [f"{STOPPED}/{r['model']}" for r in data["rows"] if r["node"] == STOPPED]
    row = next(r for r in data["rows"] if r["node"] == STOPPED)
    assert row["unit_state"] == "inactive (dead)" and row["health"] != "ok" and row["down"], row


#: The node whose device 1 (one of its model's two GPUs) the lab's SMI tool reports Critical.
SICK = "nvidia-02"
HEALTH = ("python3 -c \"import json; p='/etc/vllm-fleet-lab/hardware.json'; h=json.load(open(p)); "
          "h['health']={}; json.dump(h, open(p, 'w'))\"")


def test_a_critical_device_puts_its_model_down(converged):
    lab = converged
    lab.run(LAB, SICK, HEALTH.format("{'1': 'Critical'}"))
    try:
        rc, data, _ = status("--window", "0.2", "-l", SICK)
    finally:
        lab.run(LAB, SICK, HEALTH.format("{}"))
    row = data["rows"][0]
    assert rc == 5 and row["device_health"] == "Critical" and row["down"], data
    assert row["health"] == "ok" and row["unit_state"] == "active (running)"  # the engine itself still answers
    assert data["nodes"][SICK]["device_health"] == "Critical"
