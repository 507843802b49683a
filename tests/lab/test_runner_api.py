"""The Python API and the CLI against lab nodes, and a planted secret that must appear
in no event, artifact, summary or plan."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import vllm_fleet
from tests.conftest import venv_tool

from .conftest import INVENTORY, LAB

PLANTED = "ms-PLANTED-8c1f0e7d-do-not-print"


def test_api_provision_returns_per_host_results(lab):
    result = vllm_fleet.provision(str(INVENTORY), limit="nvidia-02")
    assert result.ok, str(result)
    assert list(result.hosts) == ["nvidia-02"]
    host = result.hosts["nvidia-02"]
    assert host.failed == 0 and host.unreachable == 0 and host.ok > 0
    # A converged node takes the one-module path (its state read, then its report): a full
    # converge or the no-op one, both are this host's results.
    assert "Read the node's whole state against its last converge" in result.task_durations, \
        sorted(result.task_durations)
    assert Path(result.artifacts_dir, "job_events").is_dir()
    assert "nvidia-02" in str(result)


def test_cli_names_the_unreachable_host_and_exits_3(lab):
    lab.stop(LAB, "nvidia-02")
    try:
        proc = subprocess.run([venv_tool("vllm-fleet"), "provision", "-i", str(INVENTORY), "-l", "nvidia-02",
                               "--json"], capture_output=True, text=True, timeout=300)
    finally:
        lab.start(LAB, "nvidia-02")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["hosts"]["nvidia-02"]["status"] == "unreachable"
    assert out["failures"][0]["host"] == "nvidia-02" and out["failures"][0]["unreachable"]


def test_planted_secret_appears_nowhere(lab, tmp_path):
    events: list[dict] = []
    pdd = tmp_path / "runner"
    # A hub token used for real: ascend-01 has not fetched its model yet, so the
    # ModelScope client runs with it in its environment.
    result = vllm_fleet.provision(str(INVENTORY), limit="ascend-01", private_data_dir=pdd,
                                  secrets={"model_fetch_tokens": {"modelscope": PLANTED}},
                                  event_handler=events.append)
    assert result.ok, str(result)
    assert any(e.get("event_data", {}).get("task", "").startswith("Download from ModelScope") for e in events), \
        "the model was not fetched, so the token was not exercised"
    assert PLANTED not in json.dumps(events)
    assert PLANTED not in str(result) and PLANTED not in json.dumps(result.to_dict())
    leaks = [str(p) for p in pdd.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    assert leaks == []
    # Nor on the node: not in the unit, not in the environment files, not in the journal.
    found = lab.run(LAB, "ascend-01", f"grep -rl {PLANTED} /etc/systemd/system /etc/vllm-fleet 2>/dev/null; "
                                       f"journalctl --no-pager | grep -c {PLANTED} || true")
    assert found.strip() == "0", found


def test_plan_with_a_secret_masks_it(tmp_path):
    # The secret is a variable of its own, referenced from the (not secret) model.
    models = [{"name": "m", "kind": "chat", "path": "/home/models/m",
               "secret_env": {"VLLM_API_KEY": "{{ vllm_api_key }}"}}]
    plan = vllm_fleet.plan("inventories/example", tmp_path / "plan", limit="nvidia-nodes",
                           extravars={"fleet_models": models}, secrets={"vllm_api_key": PLANTED})
    assert plan.ok, str(plan)
    assert plan.commands["nvidia-01"]["vllm-m"].startswith("/opt/vllm-fleet/current/venv/bin/vllm serve /home/models/m")
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    assert leaks == []
    assert "VLLM_API_KEY=********" in (tmp_path / "plan/nvidia-01/etc/vllm-fleet/vllm-m.secret.env").read_text()
    assert PLANTED not in os.popen(f"grep -r {PLANTED} {plan.run.artifacts_dir} || true").read()
