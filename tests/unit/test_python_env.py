"""The python_env role against a venv on this machine (connection local): a venv whose
creation was interrupted after bin/python was written but before pip was installed
(what `python -m venv --without-pip` leaves) is created again and its packages
installed; a complete one is left alone."""

from __future__ import annotations

import ensurepip
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
# The pip that ensurepip installs, pinned as the venv's package: installing it needs no index.
PIP = f"pip=={ensurepip.version()}"


def run_role(tmp_path: Path, venv: Path) -> subprocess.CompletedProcess:
    playbook = tmp_path / "venv.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "A venv", "hosts": "all", "gather_facts": False,
        "vars": {"fleet_pip_index_url": "http://127.0.0.1:9/simple", "fleet_pip_extra_index_urls": [],
                 "fleet_pip_trusted_hosts": [], "_fleet_release_venv": str(venv)},
        "roles": [{"role": "blocks/python_env", "python_env_path": str(venv), "python_env_interpreter": sys.executable,
                   "python_env_packages": [PIP]}],
    }]))
    return ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            str(playbook))


def changed(proc: subprocess.CompletedProcess) -> int:
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("localhost"))
    return int(recap.split("changed=")[1].split()[0])


def test_a_venv_left_without_pip_is_created_again_then_left_alone(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert (venv / "bin" / "python").exists() and not (venv / "bin" / "pip").exists()

    first = run_role(tmp_path, venv)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "TASK [blocks/python_env : Create the virtualenv]" in first.stdout
    pip = subprocess.run([str(venv / "bin" / "pip"), "--version"], capture_output=True, text=True)
    assert pip.returncode == 0 and pip.stdout.startswith(f"pip {ensurepip.version()} "), pip.stdout + pip.stderr
    assert "index-url = http://127.0.0.1:9/simple" in (venv / "pip.conf").read_text()

    again = run_role(tmp_path, venv)
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again) == 0, again.stdout[-3000:]
    assert "TASK [blocks/python_env : Create the virtualenv]" not in again.stdout


def test_a_directory_that_is_not_a_venv_is_never_cleared(tmp_path):
    # python_env_path pointed at someone's directory: venv --clear would empty it.
    venv = tmp_path / "opt"
    venv.mkdir()
    (venv / "data").write_text("keep\n")

    proc = run_role(tmp_path, venv)
    assert proc.returncode != 0
    assert "is not empty and not a virtualenv (no pyvenv.cfg): it was not made by vllm-fleet" in \
        " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert sorted(p.name for p in venv.iterdir()) == ["data"] and (venv / "data").read_text() == "keep\n"
