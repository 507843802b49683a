"""A converged fleet drifts in eight ways; the next run repairs exactly those and the one after changes nothing."""

from __future__ import annotations

from tests.lab.conftest import LAB, changed_tasks, recap, run_playbook

HOSTS = ("ascend-01", "ascend-02", "nvidia-01", "nvidia-02")
UNIT = "vllm-gpt-oss-120b"
TIKTOKEN = "/opt/vllm-fleet/tiktoken/o200k_base.tiktoken"
TIKTOKEN_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
CURRENT = "/opt/vllm-fleet/current"
# A directory beside the releases that is none of them (no release id, no marker): never pruned.
ELSEWHERE = "/opt/vllm-fleet/releases/by-hand"
ETC = "/etc/vllm-fleet"
# The ascend nodes' model (roles/model_fetch's completion marker in its directory).
MODEL = "gpt-oss-120b"
MODEL_MARKER = "/home/models/GPT-OSS/.vllm-fleet-complete"
# The nvidia nodes' driver package, held by roles/apt_packages.
DRIVER = "nvidia-driver-570"


def test_a_run_repairs_exactly_what_drifted_and_the_next_changes_nothing(lab):
    # Converged first (other tests may have changed things), then proven quiet.
    run_playbook(check=True)
    quiet = run_playbook(check=True)
    assert {h: recap(quiet.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), quiet.stdout[-3000:]
    release = lab.run(LAB, "nvidia-02", f"readlink {CURRENT}").strip()
    assert release.startswith("releases/"), release
    assert DRIVER in lab.run(LAB, "nvidia-01", "apt-mark showhold").split()

    # 1. a unit file edited by hand, 2. a unit stopped, 3. a pinned package moved, 4. a cache file deleted,
    # 5. a directory's mode changed, 6. a model's completion marker deleted, 7. an apt hold removed,
    # 8. the current release link pointed elsewhere.
    lab.run(LAB, "ascend-01", f"sed -i 's/^RestartSec=.*/RestartSec=99/' /etc/systemd/system/{UNIT}.service")
    lab.run(LAB, "ascend-01", f"chmod 0777 {ETC}")
    lab.run(LAB, "ascend-02", f"systemctl stop {UNIT}.service")
    lab.run(LAB, "ascend-02", f"rm -f {MODEL_MARKER}")
    lab.run(LAB, "nvidia-01", "/opt/vllm-fleet/current/venv/bin/pip install -q transformers==4.56.0", timeout=120)
    lab.run(LAB, "nvidia-01", f"apt-mark unhold {DRIVER}")
    lab.run(LAB, "nvidia-02", f"rm -f {TIKTOKEN}")
    lab.run(LAB, "nvidia-02", f"mkdir -p {ELSEWHERE} && ln -sfn releases/by-hand {CURRENT}")
    # The drifts took (lab.run does not check exit statuses).
    assert lab.run(LAB, "ascend-01", f"stat -c %a {ETC}").strip() == "777"
    assert lab.run(LAB, "ascend-02", f"test -e {MODEL_MARKER} || echo gone").strip() == "gone"
    assert DRIVER not in lab.run(LAB, "nvidia-01", "apt-mark showhold").split()
    assert lab.run(LAB, "nvidia-02", f"readlink {CURRENT}").strip() == "releases/by-hand"

    fix = run_playbook(check=True)
    changed = changed_tasks(fix.stdout)
    assert set(changed) == set(HOSTS), changed
    assert "vllm_service : Write the launcher, the readiness helper and each model's environment and unit" \
        in changed["ascend-01"]
    assert "vllm_service : Restart the units whose files changed" in changed["ascend-01"]
    assert "node_base : Create vllm-fleet's directories" in changed["ascend-01"]
    assert changed["ascend-02"] == [
        f"model_fetch : Take over the staging directory that vllm-fleet made, or make it - {MODEL}",
        f"model_fetch : Download from ModelScope - {MODEL}",
        f"model_fetch : Mark complete {MODEL}",
        f"model_fetch : Move into place {MODEL}",
        "vllm_service : Enable and start the units that are not",
    ], changed["ascend-02"]
    assert changed["nvidia-01"] == [
        "apt_packages : Hold the packages not held yet",
        "python_env : Install the pinned packages",
    ], changed["nvidia-01"]
    assert "tiktoken_cache : Download with its checksum checked o200k_base" in changed["nvidia-02"]
    assert "fleet_release : Point current at the release" in changed["nvidia-02"]
    # The units already run the release current points at again: none restarts.
    assert not any("vllm_service" in t for t in changed["nvidia-02"]), changed["nvidia-02"]

    assert "RestartSec=10" in lab.run(LAB, "ascend-01", f"cat /etc/systemd/system/{UNIT}.service")
    assert lab.run(LAB, "ascend-01", f"stat -c %a {ETC}").strip() == "755"
    assert lab.run(LAB, "ascend-02", f"systemctl is-active {UNIT}.service").strip() == "active"
    assert MODEL_MARKER in lab.run(LAB, "ascend-02", f"ls -d {MODEL_MARKER}")
    assert "Version: 4.57.1" in lab.run(LAB, "nvidia-01", "/opt/vllm-fleet/current/venv/bin/pip show transformers")
    assert DRIVER in lab.run(LAB, "nvidia-01", "apt-mark showhold").split()
    assert lab.run(LAB, "nvidia-02", f"sha256sum {TIKTOKEN}").split()[0] == TIKTOKEN_SHA256
    assert lab.run(LAB, "nvidia-02", f"readlink {CURRENT}").strip() == release
    # What current pointed at is no release of the fleet's: left alone, then tidied away by hand.
    assert lab.run(LAB, "nvidia-02", f"test -d {ELSEWHERE} && echo kept").strip() == "kept"
    lab.run(LAB, "nvidia-02", f"rmdir {ELSEWHERE}")

    again = run_playbook(check=True)
    assert {h: recap(again.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), again.stdout[-3000:]
