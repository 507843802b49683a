"""Ascend end to end on lab nodes, and the failures that must stop one host only:
a wrong checksum, a commit missing from every mirror, too little disk."""

from __future__ import annotations

import copy

from vllm_fleet.vendors import vendor_release_id

from .conftest import (
    ASCEND_INSTALL,
    DOWNLOADS,
    LAB,
    MODELS,
    fresh_nodes,
    group_vars,
    host_vars_set,
    recap,
    run_doc_command,
    run_playbook,
    write_overrides,
)


def ascend_matrix() -> dict:
    return copy.deepcopy(group_vars("ascend-nodes")["fleet_matrix"])


def test_wrong_checksum_stops_that_host_and_leaves_no_file(lab):
    fresh_nodes(lab, ["ascend-01"], leftovers=(f"{DOWNLOADS}/*", ASCEND_INSTALL))  # nothing fetched or installed
    matrix = ascend_matrix()
    driver_file = matrix["npu_driver"]["file"]
    matrix["npu_driver"]["sha256"] = "f" * 64
    # docs/index.md's one command, as written, with ascend-01's matrix wrong in the inventory.
    with host_vars_set("ascend-01", fleet_matrix=matrix):
        proc = run_doc_command("docs/index.md", "-l ascend-nodes")
    counts = recap(proc.stdout)
    assert counts["ascend-01"]["failed"] == 1, proc.stdout[-3000:]
    assert counts["ascend-02"]["failed"] == 0 and counts["ascend-02"]["unreachable"] == 0, proc.stdout[-3000:]
    assert f"ascend-01: could not fetch {driver_file} (version 25.2.0)" in proc.stdout
    assert "sha256 mismatch, expected " + "f" * 64 in proc.stdout
    left = lab.run(LAB, "ascend-01", "ls /var/cache/vllm-fleet/downloads/ 2>/dev/null; ls /usr/local/Ascend 2>&1")
    assert driver_file not in left and "No such file" in left
    # The other node went all the way to serving.
    answer = lab.run(LAB, "ascend-02", "systemctl is-active vllm-gpt-oss-120b.service").strip()
    assert answer == "active"


def test_commit_in_no_mirror_stops_that_host_and_leaves_no_checkout(lab):
    matrix = ascend_matrix()
    missing = "0123456789abcdef0123456789abcdef01234567"
    matrix["vllm"]["commit"] = missing
    proc = run_playbook("-l", "ascend-01", overrides=write_overrides({"ascend-01": {"fleet_matrix": matrix}}))
    assert recap(proc.stdout)["ascend-01"]["failed"] == 1
    assert f"ascend-01: commit {missing} of vllm is in none of its sources: http://127.0.0.1:9/" in proc.stdout
    assert "/git/vllm.git: " in proc.stdout
    # The commit names a release of its own, whose checkout directory holds nothing.
    left = lab.run(LAB, "ascend-01", f"ls -a /opt/vllm-fleet/releases/{vendor_release_id(matrix, 'ascend')}/src/ 2>&1")
    assert "vllm" not in left.split(), left


def test_too_little_disk_stops_before_any_download(lab):
    fresh_nodes(lab, ["ascend-01"], leftovers=(f"{MODELS}/*",))  # no model fetched
    models = copy.deepcopy(group_vars("ascend-nodes")["fleet_models"])
    models[0]["size_gb"] = 1000000
    proc = run_playbook("-l", "ascend-01", overrides=write_overrides({"ascend-01": {"fleet_models": models}}))
    assert recap(proc.stdout)["ascend-01"]["failed"] == 1
    assert "ascend-01: /home/models (filesystem /) has" in proc.stdout
    assert "1000000 GB for the models not yet on the node (gpt-oss-120b)" in proc.stdout
    assert lab.run(LAB, "ascend-01", "ls /home/models").strip() == ""


def test_check_mode_reports_drift_and_changes_nothing(lab):
    unit = "/etc/systemd/system/vllm-gpt-oss-120b.service"
    clean = run_playbook("-l", "ascend-02", "--check", check=True)
    assert recap(clean.stdout)["ascend-02"]["changed"] == 0, clean.stdout[-3000:]
    before = lab.run(LAB, "ascend-02", f"sed -i 's/--port /--port  /' {unit} && sha256sum {unit}")
    drift = run_playbook("-l", "ascend-02", "--check", check=True)
    assert recap(drift.stdout)["ascend-02"]["changed"] >= 1, drift.stdout[-3000:]
    assert lab.run(LAB, "ascend-02", f"sha256sum {unit}") == before
    fixed = run_playbook("-l", "ascend-02", check=True)
    assert recap(fixed.stdout)["ascend-02"]["changed"] >= 1
    assert lab.run(LAB, "ascend-02", f"sha256sum {unit}") != before


def test_doctor_passes_then_names_the_changed_component(lab):
    ok = run_playbook("-l", "ascend-02", playbook="playbooks/doctor.yml", check=True)
    assert "14 components match the matrix" in ok.stdout
    lab.run(LAB, "ascend-02", "/opt/vllm-fleet/current/venv/bin/pip install -q transformers==4.56.0", timeout=120)
    try:
        bad = run_playbook("-l", "ascend-02", playbook="playbooks/doctor.yml")
    finally:
        lab.run(LAB, "ascend-02", "/opt/vllm-fleet/current/venv/bin/pip install -q transformers==4.57.1", timeout=120)
    assert bad.returncode != 0
    assert "ascend-02 differs from the matrix:\n  - transformers: expected 4.57.1, installed 4.56.0" in bad.stdout


def test_the_model_answers_the_seed_question(lab):
    exec_start = lab.run(LAB, "ascend-02", "systemctl show -p ExecStart vllm-gpt-oss-120b.service")
    port = exec_start.split("--port ")[1].split()[0]
    out = lab.run(LAB, "ascend-02",
                  f"curl -s http://127.0.0.1:{port}/v1/chat/completions -H 'Content-Type: application/json' "
                  "-d '{\"model\":\"gpt-oss-120b-bf16\", "
                  "\"messages\":[{\"role\":\"user\",\"content\":\"who are you\"}]}'")
    assert '"model": "gpt-oss-120b-bf16"' in out or '"model":"gpt-oss-120b-bf16"' in out
    assert "who are you" in out
