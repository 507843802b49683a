"""A converged fleet drifts in eight ways; the next run repairs exactly those and the one after changes
nothing, on the fast path (playbooks/tasks/converge-node.yml: one read of each node's state). The
record that read compares with holds every path a fresh converge wrote (a part it forgot would be a
false "converged")."""

from __future__ import annotations

import json
import os
import re

from tests.lab.conftest import LAB, changed_tasks, recap, run_doc_command, run_playbook
from vllm_fleet_lab.paths import STATE_DIR

HOSTS = ("ascend-01", "ascend-02", "nvidia-01", "nvidia-02")
UNIT = "vllm-gpt-oss-120b"
TIKTOKEN = "/opt/vllm-fleet/tiktoken/o200k_base.tiktoken"
TIKTOKEN_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
CURRENT = "/opt/vllm-fleet/current"
# A directory beside the releases that is none of them (no release id, no marker): never pruned.
ELSEWHERE = "/opt/vllm-fleet/releases/by-hand"
ETC = "/etc/vllm-fleet"
# The ascend nodes' model (roles/blocks/model_fetch's completion marker in its directory).
MODEL = "gpt-oss-120b"
MODEL_MARKER = "/home/models/GPT-OSS/.vllm-fleet-complete"
# The nvidia nodes' driver package, held by roles/blocks/apt_packages.
DRIVER = "nvidia-driver-570"


# What a node holds that is not a converge's doing, or is a converge's through dpkg (its status file,
# in the record, has every package's version and hold): the lab's own files (SSH, the simulated
# hardware), what the system writes while it runs (Debian's dpkg-db-backup.timer writes /var/backups
# at midnight: a run across it found them), and what packages install.
NOT_CONVERGE = ("/proc", "/sys", "/run", "/tmp", "/var/tmp", "/var/log", "/var/cache", "/var/backups",
                "/var/lib/systemd", "/var/lib/apt", "/var/lib/dpkg", "/var/lib/vllm-fleet", "/root", "/etc/ssh",
                "/etc/vllm-fleet-lab",
                "/usr/local/lib/vllm-fleet-lab", "/etc/machine-id", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf",
                "/etc/shadow", "/etc/gshadow", "/etc/.pwd.lock", "/etc/passwd-", "/etc/group-", "/etc/shadow-",
                "/etc/gshadow-", "/etc/ld.so.cache", "/usr/bin", "/usr/lib", "/usr/sbin", "/usr/share", "/lib",
                "/etc/init.d", "/etc/logrotate.d", *(f"/etc/rc{n}.d" for n in range(7)))
STEPS = re.compile(r"^included: \S*/converge-steps\.yml for (.+)$", re.M)


def took_steps(stdout: str) -> set[str]:
    """The hosts that went through their full converge (the include of tasks/converge-steps.yml)."""
    return {host.strip() for line in STEPS.findall(stdout) for host in line.split(",")}


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def test_the_record_holds_every_path_a_converge_wrote(lab):
    """Each node's overlay holds every file the lab's boot and the converges wrote on it: each one is
    under the record's roots (or a directory above them), or is no converge's."""
    run_playbook(check=True)
    for host in HOSTS:
        node = STATE_DIR / LAB / "nodes" / host
        record = json.loads((node / "root" / "var/lib/vllm-fleet/state.json").read_text())
        covered = [*record["roots"], *record["installs"], *record["dirs"], *record["skip"]]
        assert covered and record["entries"], host
        forgotten = []
        for top, dirs, files in os.walk(node / "upper"):
            for name in dirs + files:
                path = "/" + os.path.relpath(os.path.join(top, name), node / "upper")
                if _under(path, covered) or _under(path, NOT_CONVERGE):
                    continue
                if any(root.startswith(path + "/") for root in [*covered, *NOT_CONVERGE]):
                    continue  # a directory above a root
                forgotten.append(path)
        assert forgotten == [], f"{host}: a converge wrote these, the record of its state does not hold them"


def test_a_run_repairs_exactly_what_drifted_and_the_next_changes_nothing(lab):
    # Converged first (other tests may have changed things), then proven quiet, on the fast path: the second
    # run is docs/lab.md's, as written ("again: reports changed=0 on every node"), this lab its inventories/lab.
    run_playbook(check=True)
    quiet = run_doc_command("docs/lab.md", "inventories/lab")
    assert quiet.returncode == 0, quiet.stdout[-3000:] + quiet.stderr[-2000:]
    assert {h: recap(quiet.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), quiet.stdout[-3000:]
    assert took_steps(quiet.stdout) == set(), quiet.stdout[-3000:]
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
    assert took_steps(fix.stdout) == set(HOSTS), fix.stdout[-3000:]
    changed = changed_tasks(fix.stdout)
    assert set(changed) == set(HOSTS), changed
    assert "blocks/vllm_service : Write the launcher, the readiness helper and each model's environment and unit" \
        in changed["ascend-01"]
    assert "blocks/vllm_service : Restart the units whose files changed" in changed["ascend-01"]
    assert "stages/node_base : Create vllm-fleet's directories" in changed["ascend-01"]
    assert changed["ascend-02"] == [
        f"blocks/model_fetch : Take over the staging directory that vllm-fleet made, or make it - {MODEL}",
        f"blocks/model_fetch : Download from ModelScope - {MODEL}",
        f"blocks/model_fetch : Mark complete {MODEL}",
        f"blocks/model_fetch : Move into place {MODEL}",
        "blocks/vllm_service : Enable and start the units that are not",
    ], changed["ascend-02"]
    assert changed["nvidia-01"] == [
        "blocks/apt_packages : Hold the packages not held yet",
        "blocks/python_env : Install the pinned packages",
    ], changed["nvidia-01"]
    assert "blocks/tiktoken_cache : Download with its checksum checked o200k_base" in changed["nvidia-02"]
    assert "blocks/fleet_release : Mark the release complete, make it current, record it and prune old releases" \
        in changed["nvidia-02"]
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
    # What current pointed at is no release of the fleet's: left alone.
    assert lab.run(LAB, "nvidia-02", f"test -d {ELSEWHERE} && echo kept").strip() == "kept"

    again = run_playbook(check=True)
    assert {h: recap(again.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), again.stdout[-3000:]
    assert took_steps(again.stdout) == set(), again.stdout[-3000:]

    # Tidied away by hand: a path under the record's roots is gone, which the run names. --full (the
    # extra var fleet_full) takes every node through its steps anyway, and they change nothing.
    lab.run(LAB, "nvidia-02", f"rmdir {ELSEWHERE}")
    full = run_playbook("-e", json.dumps({"fleet_full": True}), check=True)
    assert took_steps(full.stdout) == set(HOSTS), full.stdout[-3000:]
    assert f"{ELSEWHERE} is gone" in full.stdout, full.stdout[-3000:]
    assert {h: recap(full.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0), full.stdout[-3000:]
