"""A converged fleet drifts in four ways; the next run repairs exactly those and the one after changes nothing."""

from __future__ import annotations

from tests.lab.conftest import LAB, changed_tasks, recap, run_playbook

HOSTS = ("ascend-01", "ascend-02", "nvidia-01", "nvidia-02")
UNIT = "vllm-gpt-oss-120b"
TIKTOKEN = "/opt/vllm-fleet/tiktoken/o200k_base.tiktoken"
TIKTOKEN_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def test_a_run_repairs_exactly_what_drifted_and_the_next_changes_nothing(lab):
    # Converged first (other tests may have changed things), then proven quiet.
    run_playbook(check=True)
    quiet = run_playbook(check=True)
    assert {h: recap(quiet.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), quiet.stdout[-3000:]

    # 1. a unit file edited by hand, 2. a unit stopped, 3. a pinned package moved, 4. a cache file deleted.
    lab.run(LAB, "ascend-01", f"sed -i 's/^RestartSec=.*/RestartSec=99/' /etc/systemd/system/{UNIT}.service")
    lab.run(LAB, "ascend-02", f"systemctl stop {UNIT}.service")
    lab.run(LAB, "nvidia-01", "/opt/vllm-fleet/current/venv/bin/pip install -q transformers==4.56.0", timeout=120)
    lab.run(LAB, "nvidia-02", f"rm -f {TIKTOKEN}")

    fix = run_playbook(check=True)
    changed = changed_tasks(fix.stdout)
    assert set(changed) == set(HOSTS), changed
    assert "vllm_service : Write the launcher, the readiness helper and each model's environment and unit" \
        in changed["ascend-01"]
    assert "vllm_service : Restart the units whose files changed" in changed["ascend-01"]
    assert changed["ascend-02"] == ["vllm_service : Enable and start the units that are not"]
    assert changed["nvidia-01"] == ["python_env : Install the pinned packages"]
    assert "tiktoken_cache : Download with its checksum checked o200k_base" in changed["nvidia-02"]
    assert not any("vllm_service" in t for t in changed["nvidia-02"]), changed["nvidia-02"]

    assert "RestartSec=10" in lab.run(LAB, "ascend-01", f"cat /etc/systemd/system/{UNIT}.service")
    assert lab.run(LAB, "ascend-02", f"systemctl is-active {UNIT}.service").strip() == "active"
    assert "Version: 4.57.1" in lab.run(LAB, "nvidia-01", "/opt/vllm-fleet/current/venv/bin/pip show transformers")
    assert lab.run(LAB, "nvidia-02", f"sha256sum {TIKTOKEN}").split()[0] == TIKTOKEN_SHA256

    again = run_playbook(check=True)
    assert {h: recap(again.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), again.stdout[-3000:]
