"""roles/blocks/model_fetch on this machine (connection local, a url source on file://): the role moves,
resumes or writes into only directories its fetch marker proves it made. A foreign directory at
a model's path, or at its staging path, stops the host and is left exactly as it was; a staging
directory of its own is resumed and the model ends complete."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

FETCH_MARKER = ".vllm-fleet-fetch"
COMPLETE_MARKER = ".vllm-fleet-complete"
FOREIGN = "was not made by vllm-fleet (no marker): move it away, or declare it with source type path"


def source(tmp_path: Path) -> dict:
    files = tmp_path / "hub"
    files.mkdir(exist_ok=True)
    (files / "config.json").write_text('{"model_type": "tiny"}\n')
    (files / "weights.bin").write_bytes(b"\0" * 64)
    return {"type": "url", "url": files.as_uri(), "files": [
        {"name": name, "sha256": hashlib.sha256((files / name).read_bytes()).hexdigest()}
        for name in ("config.json", "weights.bin")]}


def run(tmp_path: Path, path: Path) -> subprocess.CompletedProcess:
    playbook = tmp_path / "fetch.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Fetch", "hosts": "all", "gather_facts": False,
        "vars": {"fleet_accelerator": {"vendor": "cpu", "model": "x86", "count": 1},
                 "fleet_base_dir": str(tmp_path / "fleet"), "fleet_matrix": {"python": "3.11"},
                 "fleet_models": [{"name": "tiny", "kind": "chat", "path": str(path), "source": source(tmp_path)}]},
        "roles": [{"role": "stages/fleet"}],
        "tasks": [{"name": "Fetch", "ansible.builtin.import_role": {"name": "blocks/model_fetch"}}],
    }]))
    return ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            str(playbook))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root with its type, mode, inode and content: what 'untouched' means."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            found[str(p.relative_to(root))] = (st.st_mode, st.st_ino, st.st_mtime_ns,
                                               p.read_bytes() if p.is_file() else None)
    st = root.lstat()
    found["."] = (st.st_mode, st.st_ino, st.st_mtime_ns, None)
    return found


def test_a_foreign_directory_at_the_path_stops_the_host_untouched(tmp_path):
    path = tmp_path / "models" / "tiny"
    (path / "sub").mkdir(parents=True)
    (path / "config.json").write_text("mine\n")
    (path / "sub" / "notes").write_text("keep\n")
    before = snapshot(path)

    proc = run(tmp_path, path)
    assert proc.returncode != 0
    assert f"localhost: model tiny: {path} {FOREIGN}" in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert snapshot(path) == before
    assert not Path(f"{path}.partial").exists()


def test_a_staging_directory_of_its_own_is_resumed_and_the_model_ends_complete(tmp_path):
    path = tmp_path / "models" / "tiny"
    partial = Path(f"{path}.partial")
    # What an interrupted fetch left: the marker and one of the two files.
    partial.mkdir(parents=True)
    (partial / FETCH_MARKER).write_text(json.dumps(source(tmp_path)) + "\n")
    (partial / "config.json").write_text('{"model_type": "tiny"}\n')

    proc = run(tmp_path, path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not partial.exists()
    assert json.loads((path / COMPLETE_MARKER).read_text())["type"] == "url"
    assert (path / "weights.bin").read_bytes() == b"\0" * 64
    # A model the role made from nothing gets its fetch marker before any file.
    fresh = tmp_path / "models" / "fresh"
    assert run(tmp_path, fresh).returncode == 0
    assert json.loads((fresh / FETCH_MARKER).read_text()) == source(tmp_path)
    assert (fresh / COMPLETE_MARKER).is_file()


def test_a_foreign_staging_directory_is_refused_untouched(tmp_path):
    path = tmp_path / "models" / "tiny"
    partial = Path(f"{path}.partial")
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("someone else's\n")
    before = snapshot(partial)

    proc = run(tmp_path, path)
    assert proc.returncode != 0
    assert f"localhost: model tiny: {partial} {FOREIGN}" in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert snapshot(partial) == before
    assert not path.exists()
