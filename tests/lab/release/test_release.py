"""Versioned releases on a lab of their own: one NVIDIA node converged on release A, the
matrix moved (transformers 4.57.1 -> 4.56.0, both on the lab's index) and converged on
release B with A kept, `vllm-fleet rollback` back to A (timed; the lab's web server must
see no request), the model answering, then a converge on B that does nothing but the
switch back.

NVIDIA because its host mode is a plain venv from the pip index (python_env), which is
what every versioned vendor has, and its stack converges in under a minute with the
engine stand-in; the CPU node's real engine would add about 2 minutes of install and
2 GB per release and prove nothing more about switching releases. Moore Threads keeps
its environment in place (no releases)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import venv_tool
from tests.lab.conftest import (
    answer_text,
    changed_tasks,
    chat_completion,
    lab_session,
    recap,
    run_doc_command,
    run_kept,
)
from vllm_fleet.vendors import vendor_release_id

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "release"
WORK = ROOT / ".cache" / "release-test"
INVENTORY = WORK / "inventory"
NODE = "nvidia-01"
MODEL = "gpt-oss-20b"
UNIT = f"vllm-{MODEL}"
BASE = "/opt/vllm-fleet"


def converge() -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = run_kept([venv_tool("ansible-playbook"), "-i", str(INVENTORY), "site.yml"])
    return proc, time.monotonic() - start


def set_matrix(matrix: dict | None) -> None:
    """The node's own matrix (None: the group's), in the lab inventory's host_vars beside the lab's
    own values (its ports), so that `vllm-fleet` sees it too."""
    path = INVENTORY / "host_vars" / f"{NODE}.yml"
    values = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
    values.pop("fleet_matrix", None)
    path.write_text(yaml.safe_dump({**values, **({"fleet_matrix": matrix} if matrix else {})}))


def group_matrix() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars/nvidia-nodes/matrix.yml").read_text())["fleet_matrix"]


@pytest.fixture(scope="module")
def lab():
    with lab_session(LAB, INVENTORY, ["nvidia"]) as lab_api:
        # One model, without its LoRA adapters: the releases are the subject, not the models.
        models_file = INVENTORY / "group_vars/nvidia-nodes/models.yml"
        models = yaml.safe_load(models_file.read_text())
        models["fleet_models"] = [{**m, "lora_adapters": []} for m in models["fleet_models"] if m["name"] == MODEL]
        for model in models["fleet_models"]:
            model["serve"] = {k: v for k, v in model["serve"].items() if "lora" not in k}
        models_file.write_text(yaml.safe_dump(models))
        yield lab_api


def on_node(lab_api, command: str) -> str:
    return lab_api.run(LAB, NODE, command, timeout=120)


def current(lab_api) -> str:
    return on_node(lab_api, f"readlink {BASE}/current").strip()


def unit_release(lab_api) -> str:
    """The release the unit's environment names, and the running engine's own environment."""
    pid = on_node(lab_api, f"systemctl show -p MainPID --value {UNIT}").strip()
    environ = on_node(lab_api, f"tr '\\0' '\\n' < /proc/{pid}/environ")
    return next(line.split("=", 1)[1] for line in environ.splitlines() if line.startswith("FLEET_RELEASE="))


def transformers(lab_api, venv: str) -> str:
    out = on_node(lab_api, f"{venv}/bin/python -c 'import importlib.metadata as m; print(m.version(\"transformers\"))'")
    return out.strip()


def chat(lab_api) -> str:
    """A chat completion from the model, at the port its unit serves on."""
    unit = on_node(lab_api, f"cat /etc/systemd/system/{UNIT}.service")
    port = int(re.search(r"^# on port (\d+),", unit, re.M).group(1))
    return answer_text(chat_completion(port, MODEL))


def web_requests(lab_api) -> list[str]:
    from vllm_fleet_lab.paths import lab_paths

    log = lab_paths(LAB).root / "web.log"
    return log.read_text(errors="replace").splitlines() if log.exists() else []


def test_release_switch_and_rollback(lab):
    matrix_a = group_matrix()
    release_a = vendor_release_id(matrix_a, "nvidia")
    matrix_b = {**matrix_a, "transformers": "4.56.0"}
    release_b = vendor_release_id(matrix_b, "nvidia")
    assert release_a != release_b

    # 1. Release A.
    proc, took_a = converge()
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    print(f"\nconverge A (fresh node) {took_a:.1f} s")
    assert current(lab) == f"releases/{release_a}"
    assert unit_release(lab) == release_a
    assert chat(lab)

    # 2. The matrix moves: release B is installed beside A and made current.
    set_matrix(matrix_b)
    proc, took_b = converge()
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    print(f"converge B (new release) {took_b:.1f} s")
    assert current(lab) == f"releases/{release_b}"
    assert unit_release(lab) == release_b
    assert transformers(lab, f"{BASE}/current/venv") == "4.56.0"
    assert transformers(lab, f"{BASE}/releases/{release_a}/venv") == "4.57.1"
    assert on_node(lab, f"cat {BASE}/releases/history").split() == [release_a, release_b]
    assert chat(lab)

    # 3. Rollback: back on A, no request to the lab's web server (no download), in seconds.
    requests_before = len(web_requests(lab))
    start = time.monotonic()
    rollback = run_doc_command("docs/operations/releases.md", "vllm-fleet rollback", inventory=INVENTORY)
    took_rollback = time.monotonic() - start
    print(f"vllm-fleet rollback {took_rollback:.1f} s")
    assert rollback.returncode == 0, rollback.stdout[-5000:] + rollback.stderr[-2000:]
    assert f"{NODE}: release {release_b} -> {release_a}" in rollback.stdout, rollback.stdout
    assert current(lab) == f"releases/{release_a}"
    assert unit_release(lab) == release_a
    assert transformers(lab, f"{BASE}/current/venv") == "4.57.1"
    assert web_requests(lab)[requests_before:] == []
    assert chat(lab)
    # A switch, not a reinstall: proven by no download above, not by the clock (the figure is
    # printed; a loaded CI machine doubles it). The bound only catches a rollback that hangs.
    assert took_rollback <= 180, f"rollback took {took_rollback:.1f} s"

    # 4. The matrix still says B: the next converge switches back, restarts, and changes nothing else.
    proc, took_back = converge()
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    print(f"converge B again (installed release) {took_back:.1f} s")
    assert current(lab) == f"releases/{release_b}"
    assert unit_release(lab) == release_b
    changed = set(changed_tasks(proc.stdout).get(NODE, []))
    # The switch and the history are the release step's one module run (library/fleet_releases.py).
    assert changed == {
        "blocks/fleet_release : Mark the release complete, make it current, record it and prune old releases",
        "blocks/vllm_service : Write the launcher, the readiness helper and each model's environment and unit",
        "blocks/vllm_service : Restart the units whose files changed",
    }, changed
    assert recap(proc.stdout)[NODE]["changed"] == 3
    assert chat(lab)

    # 5. Nothing left to do, and both releases kept (fleet_releases_keep 2).
    proc, _ = converge()
    assert recap(proc.stdout)[NODE]["changed"] == 0, changed_tasks(proc.stdout)
    kept = on_node(lab, f"ls {BASE}/releases").split()
    assert sorted(kept) == sorted([release_a, release_b, "history"]), kept

    # 6. The pages' other ways, as written: the rollback without the CLI (back on A), then rollouts.md's
    #    rollouts: the first moves the node to B again, the others find nothing to do.
    proc = run_doc_command("docs/operations/releases.md", "playbooks/rollback.yml", inventory=INVENTORY)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert current(lab) == f"releases/{release_a}" and unit_release(lab) == release_a
    assert chat(lab)
    rollouts = [run_doc_command("docs/operations/rollouts.md", "vllm-fleet rollout", "-l nvidia-nodes",
                                inventory=INVENTORY)]
    assert current(lab) == f"releases/{release_b}" and unit_release(lab) == release_b, rollouts[-1].stdout
    rollouts.append(run_doc_command("docs/operations/rollouts.md", "--serial 25%", inventory=INVENTORY))
    rollouts.append(run_doc_command("docs/operations/rollouts.md", "fleet_rollout_serial=1", inventory=INVENTORY))
    for proc in rollouts:
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert recap(rollouts[-1].stdout)[NODE]["changed"] == 0, changed_tasks(rollouts[-1].stdout)
    assert current(lab) == f"releases/{release_b}" and unit_release(lab) == release_b
    assert chat(lab)


def test_the_lab_page_s_down_as_written_removes_every_trace_of_the_lab(lab):
    """docs/lab.md's last line, as written, on this lab (its name in VLLM_FLEET_LAB_NAME), the module's
    last test: "removes every trace". Its nodes stop answering, no mount or process of theirs is left,
    its state, port block and inventory are gone; the lab fixture's own down after it finds nothing."""
    import socket

    from vllm_fleet_lab.paths import known_labs, lab_paths

    paths = lab_paths(LAB)
    ports = [int(row["ssh"].rsplit(":", 1)[1]) for row in lab.status(LAB)]
    assert ports and INVENTORY.is_dir() and paths.root.is_dir()
    proc = run_doc_command("docs/lab.md", "vllm-fleet lab down", inventory=INVENTORY, lab=LAB)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert LAB not in known_labs() and lab.status(LAB) == []
    assert not paths.root.exists() and not INVENTORY.exists()
    assert str(paths.root) not in Path("/proc/mounts").read_text()
    running = subprocess.run(["pgrep", "-af", str(paths.root)], capture_output=True, text=True, check=False).stdout
    assert running == "", running
    for port in [*ports, paths.web_port]:
        with socket.socket() as sock:
            sock.settimeout(2)
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
