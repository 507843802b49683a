"""library/fleet_releases.py through the ansible CLI, as roles/fleet_release runs it: one
call reads the release directories, the complete ones, where current points and the history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ansible_module

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_BIN = Path(sys.executable).parent
MARKER = ".vllm-fleet-release.json"


def run_module(base: Path, check: bool = False) -> dict:
    args = {"releases_dir": str(base / "releases"), "marker": MARKER, "current": str(base / "current"),
            "history": str(base / "releases" / "history")}
    return ansible_module("fleet_releases", args, check=check)


def test_a_node_without_releases_reads_empty(tmp_path):
    result = run_module(tmp_path)
    assert (result["releases"], result["complete"], result["current"], result["history"]) == ([], [], "", "")
    assert result["changed"] is False


def test_releases_markers_current_and_history(tmp_path):
    releases = tmp_path / "releases"
    for name in ("nvidia-a", "nvidia-b", "nvidia-c", ".nvidia-d.tmp"):
        (releases / name).mkdir(parents=True)
    (releases / "nvidia-a" / MARKER).write_text("{}\n")
    (releases / "nvidia-c" / MARKER).write_text("{}\n")
    (releases / "nvidia-b" / "venv").mkdir()  # an install that did not finish: no marker
    (releases / "history").write_text("nvidia-a\nnvidia-c\n")
    (tmp_path / "current").symlink_to("releases/nvidia-c")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = run_module(tmp_path, check=True)
    assert result["releases"] == [str(releases / n) for n in ("nvidia-a", "nvidia-b", "nvidia-c")]
    assert result["complete"] == [str(releases / "nvidia-a"), str(releases / "nvidia-c")]
    assert result["current"] == "nvidia-c"
    assert result["history"] == "nvidia-a\nnvidia-c\n"
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_current_that_is_a_directory_is_no_release(tmp_path):
    (tmp_path / "releases" / "nvidia-a").mkdir(parents=True)
    (tmp_path / "current").mkdir()
    assert run_module(tmp_path)["current"] == ""


def test_documentation_matches_argument_spec():
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-doc"), "-M", str(REPO / "library"), "-j", "fleet_releases"],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)["fleet_releases"]
    assert set(doc["doc"]["options"]) == {"releases_dir", "marker", "current", "history"}
    assert set(doc["return"]) == {"releases", "complete", "current", "history"}
    assert doc["examples"].strip()
