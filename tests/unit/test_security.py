"""What the plan of the example inventory installs is safe: every host-mode vLLM unit is
sandboxed (systemd-analyze security rates it OK), listens where the inventory says, and an
API key given as a secret reaches only the 0600 secret environment file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ansible_playbook, example_hosts, starts_ansible
from tests.systemd_syntax import exec_start

ROOT = Path(__file__).resolve().parents[2]
KEY = "plan-key-3f9d2b7c5a1e"
#: systemd-analyze security's "OK" band ends at 4.0 (the issue's target).
MAX_EXPOSURE = 4.0
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.fixture(scope="module")
@starts_ansible
def keyed_plan(tmp_path_factory):
    """The example's plan with every model listening on all interfaces and a key given as
    `--secrets FILE` gives it (-e @file), with the run's own output."""
    tmp = tmp_path_factory.mktemp("security")
    secrets = tmp / "secrets.yml"
    secrets.write_text(f"fleet_serve_api_key: {KEY}\n")
    out = tmp / "plan"
    proc = ansible_playbook("-i", "inventories/example", "playbooks/plan.yml", "-e", f"plan_dir={out}",
                            "-e", "fleet_serve_listen=0.0.0.0", "-e", f"@{secrets}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out, proc.stdout + proc.stderr


def host_units(plan: Path) -> list[Path]:
    units = sorted(plan.glob("*/etc/systemd/system/vllm-*.service"))
    assert len(units) >= len(example_hosts()), units
    return units


@pytest.mark.ansible
def test_the_key_is_only_in_the_secret_files_and_masked_there(keyed_plan):
    plan, output = keyed_plan
    assert KEY not in output
    files = [p for p in plan.rglob("*") if p.is_file()]
    assert [p for p in files if KEY in p.read_text(errors="replace")] == []
    secret_files = sorted(plan.glob("*/etc/vllm-fleet/*.secret.env"))
    assert len(secret_files) == len(host_units(plan))
    for secret in secret_files:
        assert "VLLM_API_KEY=********" in secret.read_text().splitlines()


def test_units_listen_where_the_inventory_says_and_read_the_secret_file(keyed_plan):
    plan, _ = keyed_plan
    for unit in host_units(plan):
        text = unit.read_text()
        argv = exec_start(text)
        assert argv[argv.index("--host") + 1] == "0.0.0.0", unit
        assert f"EnvironmentFile=/etc/vllm-fleet/{unit.stem}.secret.env" in text.splitlines(), unit


def test_units_keep_caches_in_their_own_directory_and_open_only_their_vendors_devices(keyed_plan):
    plan, _ = keyed_plan
    expected = {"ascend-01": [f"/dev/davinci{i}" for i in range(8)] + ["/dev/davinci_manager", "/dev/devmm_svm",
                                                                      "/dev/hisi_hdc"],
                "metax-01": ["char-drm", "/dev/mxcd"],
                "cpu-01": []}
    for unit in host_units(plan):
        lines = unit.read_text().splitlines()
        cache = f"/var/cache/vllm-fleet/{unit.stem}"
        assert f"CacheDirectory=vllm-fleet/{unit.stem}" in lines
        assert any(line.startswith("Environment=") and f"TRITON_CACHE_DIR={cache}/triton" in line for line in lines)
        assert "DevicePolicy=closed" in lines
        host = unit.relative_to(plan).parts[0]
        if host in expected:
            assert [line.split("=", 1)[1].removesuffix(" rw") for line in lines
                    if line.startswith("DeviceAllow=")] == expected[host], unit
    # MUSA's Triton cache left the shared /tmp.
    musa_env = "\n".join(p.read_text() for p in plan.glob("musa-01/etc/vllm-fleet/*.env"))
    assert "/tmp" not in musa_env


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_every_host_mode_unit_is_rated_ok_by_systemd_analyze(keyed_plan):
    plan, _ = keyed_plan
    rated = {}
    for unit in host_units(plan):
        proc = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
                              capture_output=True, text=True, timeout=60, check=False)
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
        assert found, proc.stdout[-2000:] + proc.stderr
        # A directive systemd does not know (a typo, or one too new for it) would not count.
        assert not re.search(r"Unknown (key|section)|Failed to parse", proc.stderr), proc.stderr
        rated[f"{unit.parent.parent.parent.parent.name}/{unit.name}"] = float(found.group(1))
    assert rated and max(rated.values()) <= MAX_EXPOSURE, rated


def test_containers_are_privileged_only_when_asked_for():
    from vllm_fleet import render
    from vllm_fleet.models import resolve_models

    (model,), _ = resolve_models([{"name": "m", "kind": "chat", "path": "/home/models/m"}],
                                 {"vendor": "ascend", "model": "910B3", "count": 8})
    settings = {"options": ["-u", "0", "--ipc=host"], "device_pattern": "/dev/davinci{index}",
                "control_devices": ["/dev/davinci_manager"]}
    argv = render.container_argv(model, settings, runtime="docker", env_files=[], image="img")
    assert "--privileged" not in argv and "--device=/dev/davinci0" in argv
    argv = render.container_argv(model, {**settings, "privileged": True}, runtime="docker", env_files=[], image="img")
    assert argv[argv.index("--ipc=host") + 1] == "--privileged"
