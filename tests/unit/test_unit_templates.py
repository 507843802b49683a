"""systemd units the roles write, rendered by their own templates through Ansible (the fleet
role's contract of a CPU node, the roles' defaults and vars): inventory strings reach them
through systemd_text, plain_word and systemd_command, so each stays on its line and in its
setting, `%` is no specifier, and what cannot be written safely is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "roles" / "blocks" / "vllm_service"
MONITORING = ROOT / "roles" / "services" / "monitoring"


def render(tmp_path: Path, **extra) -> tuple[object, dict[str, str]]:
    play_vars = {
        **yaml.safe_load((SERVICE / "defaults/main.yml").read_text()),
        **yaml.safe_load((MONITORING / "defaults/main.yml").read_text()),
        "fleet_accelerator": {"vendor": "cpu", "model": "x86", "count": 1},
        "fleet_base_dir": str(tmp_path / "fleet"), "fleet_matrix": {"python": "3.11"},
        "fleet_models": [{"name": "tiny", "kind": "chat", "path": "/m/tiny",
                          "serve": {"served_model_name": "tiny 100% [chat]"}}],
        **extra}
    units = {"vllm-tiny.service": (SERVICE / "templates/etc/systemd/system/vllm-model.service.j2",
                                   {"vllm_service_model": "{{ _vllm_service_models[0] }}"}),
             "device-health.service": (MONITORING / "templates/etc/systemd/system/vllm-fleet-device-health.service.j2",
                                       {}),
             "device-health.timer": (MONITORING / "templates/etc/systemd/system/vllm-fleet-device-health.timer.j2", {})}
    book = tmp_path / "units.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Units", "hosts": "all", "gather_facts": False, "vars": play_vars,
        "vars_files": [str(SERVICE / "vars/main.yml"), str(MONITORING / "vars/main.yml")],
        "roles": [{"role": "stages/fleet"}],
        "tasks": [{"name": f"Render {name}", "ansible.builtin.template": {
            "src": str(src), "dest": str(tmp_path / name), "mode": "0644"}, "vars": task_vars}
            for name, (src, task_vars) in units.items()],
    }]))
    proc = ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            str(book))
    return proc, {name: (tmp_path / name).read_text() for name in units if (tmp_path / name).exists()}


def settings(text: str) -> dict[str, list[str]]:
    """A unit's settings as systemd reads its lines (comments and sections aside)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_free_text_is_one_line_with_its_percent_doubled_and_commands_are_quoted(tmp_path):
    proc, units = render(tmp_path, monitoring_textfile_dir="/var/lib/node exporter",
                         monitoring_device_health_interval="1min 30s")
    assert proc.returncode == 0, proc.stdout[-3000:]
    model = settings(units["vllm-tiny.service"])
    assert model["Description"] == ["vLLM serving tiny 100%% [chat] (tiny)"]
    assert model["User"] == ["vllm"] and model["EnvironmentFile"] == ["/etc/vllm-fleet/vllm-tiny.env"]
    health = settings(units["device-health.service"])
    assert health["ExecStart"][0].endswith('--output "/var/lib/node exporter/vllm_fleet_device_health.prom"')
    assert settings(units["device-health.timer"])["OnUnitActiveSec"] == ["1min 30s"]


def test_a_value_that_would_break_its_line_is_refused(tmp_path):
    proc, units = render(tmp_path, fleet_service_user="vllm\nExecStartPre=/bin/sh -c id",
                         monitoring_device_health_interval="30s\nOnCalendar=minutely")
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "plain_word: 'vllm\\nExecStartPre=/bin/sh -c id' is not one plain word" in text, text[-3000:]
    assert "vllm-tiny.service" not in units


def test_apt_sources_take_each_value_as_one_word_or_refuse_it(tmp_path):
    apt = ROOT / "roles" / "blocks" / "apt_packages" / "templates" / "etc" / "apt"

    def sources(uris: list[str]) -> object:
        book = tmp_path / "apt.yml"
        book.write_text(yaml.safe_dump([{"name": "Apt", "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "Sources", "ansible.builtin.template": {
                "src": str(apt / "sources.list.d/repository.sources.j2"), "dest": str(tmp_path / "x.sources"),
                "mode": "0644"},
             "vars": {"apt_packages_set": "nvidia-driver",
                      "_apt_packages_key_file": "/etc/apt/keyrings/vllm-fleet-nvidia-driver-mirror.asc",
                      "apt_packages_repository": {"name": "mirror", "uris": uris, "suites": ["jammy"]}}},
            {"name": "Pins", "ansible.builtin.template": {
                "src": str(apt / "preferences.d/pinned.j2"), "dest": str(tmp_path / "pinned"), "mode": "0644"},
             "vars": {"apt_packages_set": "nvidia-driver",
                      "apt_packages_pinned": {"nvidia-container-toolkit": "1.17.4-1~ubuntu22.04"}}}]}]))
        return ansible_playbook("-i", "localhost,", "-c", "local", "-e",
                                f"ansible_python_interpreter={sys.executable}", str(book))

    proc = sources(["https://user:p%40ss@mirror.example/ubuntu"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "URIs: https://user:p%40ss@mirror.example/ubuntu\n" in (tmp_path / "x.sources").read_text()
    assert "Pin: version 1.17.4-1~ubuntu22.04\n" in (tmp_path / "pinned").read_text()
    (tmp_path / "x.sources").unlink()
    proc = sources(["https://mirror.example/ubuntu\nTrusted: yes"])
    assert proc.returncode != 0 and not (tmp_path / "x.sources").exists()
    assert "single_word: " in proc.stdout, proc.stdout[-3000:]
