"""roles/blocks/fleet_release on this machine (connection local, a temporary fleet_base_dir): each
converge of a new matrix makes its release current and keeps fleet_releases_keep of them;
a switch to the previous release (what rollback does before restarting the units) moves
only the link and the history; a release without its completion marker is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook
from vllm_fleet.vendors import vendor_release_id

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]


def matrix(version: str) -> dict:
    return {"python": "3.11", "vllm": {"version": version}, "torch": "2.13.0+cpu", "huggingface_hub": "2.4.0"}


def run(tmp_path: Path, version: str, tasks: list[dict], keep: int = 2) -> subprocess.CompletedProcess:
    base = tmp_path / "fleet"
    playbook = tmp_path / "release.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Releases", "hosts": "all", "gather_facts": False,
        "vars": {"fleet_accelerator": {"vendor": "cpu", "model": "x86", "count": 1}, "fleet_base_dir": str(base),
                 "fleet_matrix": matrix(version), "fleet_releases_keep": keep},
        "roles": [{"role": "stages/fleet"}],
        "tasks": tasks + [{"name": "Save the state", "ansible.builtin.copy": {
            "content": "{{ fleet_release_state | to_json }}", "dest": str(tmp_path / "state.json"), "mode": "0644"}}],
    }]))
    return ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            str(playbook))


# What a converge does around the role: the vendor's role installs into the release's
# directory (here: creates it), then the role marks, switches and prunes.
CONVERGE = [
    {"name": "Install the release", "ansible.builtin.file": {"path": "{{ _fleet_release_venv }}", "state": "directory",
                                                             "mode": "0755"}},
    {"name": "Release", "ansible.builtin.import_role": {"name": "blocks/fleet_release"}},
]
ROLLBACK = [
    {"name": "Read", "ansible.builtin.include_role": {"name": "blocks/fleet_release", "tasks_from": "read.yml"}},
    {"name": "Target", "ansible.builtin.set_fact": {"target": "{{ fleet_release_state.previous }}"}},
    {"name": "Switch", "ansible.builtin.include_role": {"name": "blocks/fleet_release", "tasks_from": "switch.yml"},
     "vars": {"fleet_release_target": "{{ target }}"}},
]


def changed(proc: subprocess.CompletedProcess) -> int:
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("localhost"))
    return int(recap.split("changed=")[1].split()[0])


def test_converges_keep_two_releases_and_a_switch_goes_back_without_touching_them(tmp_path):
    base = tmp_path / "fleet"
    ids = {v: vendor_release_id(matrix(v), "cpu") for v in ("1.0", "2.0", "3.0")}

    first = run(tmp_path, "1.0", CONVERGE)
    assert first.returncode == 0, first.stdout[-3000:]
    assert os.readlink(base / "current") == f"releases/{ids['1.0']}"
    marker = json.loads((base / "releases" / ids["1.0"] / ".vllm-fleet-release.json").read_text())
    assert marker == {"vendor": "cpu", "matrix": {"python": "3.11", "torch": "2.13.0+cpu", "vllm": {"version": "1.0"}}}
    assert json.loads((tmp_path / "state.json").read_text())["previous"] == ""

    again = run(tmp_path, "1.0", CONVERGE)
    assert changed(again) == 1, again.stdout[-3000:]  # only the state file this test writes

    for version in ("2.0", "3.0"):
        proc = run(tmp_path, version, CONVERGE)
        assert proc.returncode == 0, proc.stdout[-3000:]
    assert os.readlink(base / "current") == f"releases/{ids['3.0']}"
    # fleet_releases_keep 2: the current one and the one before it.
    assert sorted(p.name for p in (base / "releases").iterdir()) == sorted([ids["2.0"], ids["3.0"], "history"])
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["current"] == ids["3.0"] and state["previous"] == ids["2.0"] and state["switched_from"] == ids["2.0"]

    # Rollback's switch: current goes back to 2.0; the release directories are not touched.
    venv = base / "releases" / ids["2.0"] / "venv"
    before = venv.stat().st_mtime_ns
    back = run(tmp_path, "3.0", ROLLBACK)
    assert back.returncode == 0, back.stdout[-3000:]
    assert os.readlink(base / "current") == f"releases/{ids['2.0']}"
    assert (base / "releases" / "history").read_text().split() == [ids["3.0"], ids["2.0"]]
    assert venv.stat().st_mtime_ns == before
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["switched_from"] == ids["3.0"] and state["previous"] == ids["3.0"]


def test_a_release_without_its_marker_is_not_switched_to(tmp_path):
    base = tmp_path / "fleet"
    assert run(tmp_path, "1.0", CONVERGE).returncode == 0
    # An install of another release that did not finish: a directory, no marker.
    (base / "releases" / "0123456789ab" / "venv").mkdir(parents=True)
    proc = run(tmp_path, "1.0", [
        {"name": "Read", "ansible.builtin.include_role": {"name": "blocks/fleet_release", "tasks_from": "read.yml"}},
        {"name": "Switch", "ansible.builtin.include_role": {"name": "blocks/fleet_release", "tasks_from": "switch.yml"},
         "vars": {"fleet_release_target": "0123456789ab"}}])
    assert proc.returncode != 0
    assert "release 0123456789ab is not installed completely" in proc.stdout
    assert os.readlink(base / "current") == f"releases/{vendor_release_id(matrix('1.0'), 'cpu')}"
