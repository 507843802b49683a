"""A model spanning two lab nodes on a real Ray cluster (roles/blocks/ray_cluster), on a lab of its own.

Two NVIDIA nodes (host mode converges fastest: a venv from the lab's pip index), each with
its own loopback address (fleet_cluster_address 127.0.0.N: the nodes share the host's
network namespace, and Ray tells its nodes apart by address). Ray is the real package from
PyPI (the lab's index serves its wheel); the engine on top is the stand-in, which joins the
cluster (ray.init) and checks that it holds tensor x pipeline parallel devices, one stage per
node, before it serves, and ends when a node is lost.

1. a span with wrong sizes is refused by validation, before any node is touched;
   a worker whose route to the head is blocked (nftables, tests/lab/conftest.py) stops the
   converge at the fabric check, on the worker and on the head, before any Ray unit starts;
2. converge (timed): Ray head, worker, gate, vllm serve on the head; the model answers there;
3. converge again: changed=0;
4. the worker's Ray unit stopped: the model turns unhealthy, verify fails naming it;
5. converge: the worker rejoins, the model answers again.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest
import yaml

from tests.conftest import venv_tool
from tests.lab.conftest import (
    RUN_TIMEOUT,
    answer_text,
    blocked_route,
    changed_tasks,
    chat_completion,
    lab_session,
    recap,
    run_kept,
)

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "ray"
WORK = ROOT / ".cache" / "ray-test"
INVENTORY = WORK / "inventory"
HEAD, WORKER = "nvidia-01", "nvidia-02"
MODEL = "gpt-oss-20b"
RAY_UNIT = f"ray-{MODEL}"
UNIT = f"vllm-{MODEL}"


def playbook(*args: str, timeout: int = RUN_TIMEOUT) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = run_kept([venv_tool("ansible-playbook"), "-i", str(INVENTORY), *args], timeout=timeout)
    return proc, time.monotonic() - start


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-6000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def lab():
    from vllm_fleet_lab.paths import lab_paths

    start = time.monotonic()
    with lab_session(LAB, INVENTORY, ["nvidia"], nodes=2) as lab_api:
        print(f"\nlab up (2 NVIDIA nodes) {time.monotonic() - start:.1f} s")
        # One model, without its LoRA adapters, spanning both nodes: both GPUs of each node
        # (tensor parallel 2), one pipeline stage per node (pipeline parallel 2). Ray's port is
        # one of the head's lab service ports (unique across labs on this host).
        models_file = INVENTORY / "group_vars/nvidia-nodes/models.yml"
        models = yaml.safe_load(models_file.read_text())
        (model,) = [m for m in models["fleet_models"] if m["name"] == MODEL]
        model["lora_adapters"] = []
        model["serve"] = {k: v for k, v in model["serve"].items() if "lora" not in k}
        model["serve"].update({"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
        model["span"] = {"nodes": [HEAD, WORKER], "head": HEAD, "port": lab_paths(LAB).service_port(0, 10)}
        models["fleet_models"] = [model]
        models_file.write_text(yaml.safe_dump(models))
        # Ray pinned in the matrix, at the release the lab's index serves.
        versions = yaml.safe_load((ROOT / "lab/inventory/versions.yml").read_text())
        matrix_file = INVENTORY / "group_vars/nvidia-nodes/matrix.yml"
        matrix = yaml.safe_load(matrix_file.read_text())
        matrix["fleet_matrix"]["ray"] = versions["nvidia"]["ray"]
        matrix_file.write_text(yaml.safe_dump(matrix))
        yield lab_api


def on_node(lab_api, node: str, command: str) -> str:
    return lab_api.run(LAB, node, command, timeout=120)


def chat(lab_api) -> str:
    """A chat completion from the model through the head, at the port its unit serves on."""
    port = int(yaml.safe_load((INVENTORY / "host_vars" / f"{HEAD}.yml").read_text())["fleet_serve_base_port"])
    return answer_text(chat_completion(port, MODEL))


def test_model_spanning_two_nodes(lab, tmp_path):
    timings = {}
    # 1. Wrong sizes: refused by validation before any node is touched (no node has a unit yet).
    bad = yaml.safe_load((INVENTORY / "group_vars/nvidia-nodes/models.yml").read_text())
    bad["fleet_models"][0]["serve"]["pipeline_parallel_size"] = 3
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(bad))
    proc, timings["refused"] = playbook("site.yml", "-e", f"@{tmp_path / 'bad.yml'}", timeout=300)
    assert proc.returncode != 0
    assert f"model {MODEL}: spans 2 nodes but serve.pipeline_parallel_size is 3; set it to 2" in proc.stdout, out(proc)
    assert "Gathering Facts" not in proc.stdout and "preflight" not in proc.stdout, out(proc)
    assert on_node(lab, HEAD, f"ls /etc/systemd/system/{RAY_UNIT}.service 2>/dev/null || true").strip() == ""

    # 1b. The worker's route to the head's Ray port is blocked: the fabric check stops both nodes
    # (the worker in its own play, the head asking the worker) before either starts a Ray unit.
    span = yaml.safe_load((INVENTORY / "group_vars/nvidia-nodes/models.yml").read_text())["fleet_models"][0]["span"]
    head_address, worker_address = (yaml.safe_load((INVENTORY / "host_vars" / f"{n}.yml").read_text())
                                    ["fleet_cluster_address"] for n in (HEAD, WORKER))
    with blocked_route(LAB, worker_address, head_address, span["port"]):
        proc, timings["blocked route"] = playbook("site.yml")
    assert proc.returncode != 0
    unreached = (f"{WORKER}: cannot reach the Ray head {HEAD} of model {MODEL} at {head_address}:{span['port']} "
                 f"from {worker_address} (no answer within 3 s).")
    assert f"failed: [{WORKER}] (item=" in proc.stdout and f"failed: [{HEAD} -> {WORKER}" in proc.stdout, out(proc)
    assert proc.stdout.count(unreached) >= 2, out(proc)
    for node in (HEAD, WORKER):
        assert on_node(lab, node, f"ls /etc/systemd/system/{RAY_UNIT}.service 2>/dev/null || true").strip() == ""
    assert on_node(lab, HEAD, f"systemctl is-active {UNIT} || true").strip() != "active"

    # 2. Converge: head, worker, gate, then vllm serve on the head only.
    proc, timings["converge"] = playbook("site.yml")
    assert proc.returncode == 0, out(proc)
    assert on_node(lab, HEAD, f"systemctl is-active {RAY_UNIT} {UNIT}").split() == ["active", "active"]
    assert on_node(lab, WORKER, f"systemctl is-active {RAY_UNIT}").strip() == "active"
    assert on_node(lab, WORKER, f"systemctl cat {UNIT} >/dev/null 2>&1 && echo yes || echo no").strip() == "no"
    # The engine saw the real cluster: both members, each with its two GPUs.
    journal = on_node(lab, HEAD, f"journalctl -u {UNIT} --no-pager -o cat | grep 'Ray cluster:' | tail -1")
    assert "127.0.0.2 (2 GPU)" in journal and "127.0.0.3 (2 GPU)" in journal, journal
    assert chat(lab)

    # 3. Nothing left to do.
    proc, timings["converge again"] = playbook("site.yml")
    assert proc.returncode == 0, out(proc)
    assert {h: r["changed"] for h, r in recap(proc.stdout).items()} == {HEAD: 0, WORKER: 0}, changed_tasks(proc.stdout)

    # 4. The worker's Ray member stops: the engine loses a pipeline stage and ends; verify names the model.
    on_node(lab, WORKER, f"systemctl stop {RAY_UNIT}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chat(lab)
        except (urllib.error.URLError, ConnectionError, OSError):
            break
        time.sleep(2)
    else:
        pytest.fail("the model still answers 60 s after its worker's Ray member stopped")
    proc, timings["verify (member down)"] = playbook("playbooks/verify.yml", timeout=300)
    assert proc.returncode != 0
    assert f"model {MODEL} spans {HEAD}, {WORKER} but its Ray cluster" in proc.stdout, out(proc)
    assert "is not in the cluster" in proc.stdout, out(proc)

    # 5. The next converge brings the member back, and the model with it.
    proc, timings["converge (member back)"] = playbook("site.yml")
    assert proc.returncode == 0, out(proc)
    assert on_node(lab, WORKER, f"systemctl is-active {RAY_UNIT}").strip() == "active"
    assert chat(lab)
    proc, timings["verify"] = playbook("playbooks/verify.yml", timeout=300)
    assert proc.returncode == 0, out(proc)

    print("\n" + "\n".join(f"{name}: {took:.1f} s" for name, took in timings.items()))
