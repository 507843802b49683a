"""roles/vendors/musa_aimodule's unpack on this machine (connection local, the archive given as a path):
the environment's directory is removed only when vllm-fleet's marks prove it made it. A conda
environment made by hand under the same name stops the host untouched; one the role began to
unpack (its mark, no record) is unpacked again and recorded."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

FOREIGN = "was not made by vllm-fleet (no marker): move it away, or set musa_aimodule_env_name to another name"


def archive(tmp_path: Path) -> dict:
    path = tmp_path / "aimodule.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in ("bin/python", "bin/conda-unpack"):
            data = b"#!/bin/sh\nexit 0\n"
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return {"version": "1.4.2", "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "path": str(path)}


def run(tmp_path: Path, env: Path) -> object:
    book = tmp_path / "unpack.yml"
    book.write_text(yaml.safe_dump([{
        "name": "Unpack", "hosts": "all", "gather_facts": False,
        "vars": {"_musa_env_dir": str(env), "fleet_matrix": {"aimodule": archive(tmp_path)}},
        "tasks": [{"name": "Unpack", "ansible.builtin.include_role": {
            "name": "vendors/musa_aimodule", "tasks_from": "environment.yml", "rolespec_validate": False}}],
    }]))
    return ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            str(book))


def test_a_conda_environment_made_by_hand_is_left_as_it_is(tmp_path):
    env = tmp_path / "miniforge3" / "envs" / "v1.4.2"
    (env / "lib").mkdir(parents=True)
    (env / "lib" / "mine.so").write_text("keep\n")

    proc = run(tmp_path, env)
    assert proc.returncode != 0
    assert f"localhost: the AIModule environment {env} {FOREIGN}" in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert sorted(p.name for p in env.rglob("*")) == ["lib", "mine.so"]


def test_an_unpack_the_role_began_is_done_again_and_recorded(tmp_path):
    env = tmp_path / "miniforge3" / "envs" / "v1.4.2"
    env.mkdir(parents=True)
    (env / ".vllm-fleet-aimodule-unpack.json").write_text("{}\n")
    (env / "half-written").write_text("x\n")

    proc = run(tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not (env / "half-written").exists() and (env / "bin" / "conda-unpack").is_file()
    assert json.loads((env / ".vllm-fleet-aimodule.json").read_text())["version"] == "1.4.2"
