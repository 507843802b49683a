"""library/fleet_files.py through the ansible CLI, as the roles run it: one call writes,
compares and removes a set of files, with copy's semantics."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ansible_module

# Every test here starts Ansible (tests/conftest.py checks the mark).
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_BIN = Path(sys.executable).parent


def run_module(args: dict, check: bool = False, diff: bool = False) -> dict:
    return ansible_module("fleet_files", args, check=check, diff=diff)


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def spec(tmp_path):
    owner = me()
    return {
        "directories": [{"path": str(tmp_path / "etc" / "deep"), "owner": owner, "mode": "0750"}],
        "files": [
            {"path": str(tmp_path / "etc" / "deep" / "a.env"), "content": "A=1\n", "owner": owner, "group": None,
             "mode": "0640"},
            {"path": str(tmp_path / "etc" / "deep" / "b.service"), "content": "[Unit]\n", "owner": owner,
             "mode": "0644"},
            {"path": str(tmp_path / "etc" / "gone.env"), "state": "absent"},
        ],
    }


def test_writes_all_files_once_then_changes_nothing(tmp_path, spec):
    spec["files"][1]["group"] = None
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "gone.env").write_text("old\n")
    preview = run_module(spec, check=True)
    assert preview["changed"] is True
    assert preview["changed_paths"] == [str(tmp_path / "etc" / "deep"), spec["files"][0]["path"],
                                        spec["files"][1]["path"], str(tmp_path / "etc" / "gone.env")]
    assert not (tmp_path / "etc" / "deep").exists() and (tmp_path / "etc" / "gone.env").exists()

    first = run_module(spec)
    assert first["changed_paths"] == preview["changed_paths"]
    a = Path(spec["files"][0]["path"])
    assert a.read_text() == "A=1\n" and stat.S_IMODE(a.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "etc" / "deep").stat().st_mode) == 0o750
    assert not (tmp_path / "etc" / "gone.env").exists()
    assert sorted(p.name for p in (tmp_path / "etc" / "deep").iterdir()) == ["a.env", "b.service"]

    again = run_module(spec)
    assert again == {**again, "changed": False, "changed_paths": []}


def test_reports_exactly_the_paths_that_drifted(tmp_path, spec):
    run_module(spec)
    a, b = Path(spec["files"][0]["path"]), Path(spec["files"][1]["path"])
    b.write_text("[Unit]\nDescription=edited by hand\n")
    a.chmod(0o666)
    drift = run_module(spec, check=True, diff=True)
    assert drift["changed_paths"] == [str(a), str(b)]
    assert b.read_text().endswith("by hand\n") and stat.S_IMODE(a.stat().st_mode) == 0o666
    fixed = run_module(spec)
    assert fixed["changed_paths"] == [str(a), str(b)]
    assert b.read_text() == "[Unit]\n" and stat.S_IMODE(a.stat().st_mode) == 0o640


def test_contents_stay_out_of_the_log(tmp_path):
    secret = "VLLM_API_KEY=sk-do-not-print\n"
    result = run_module({"files": [{"path": str(tmp_path / "x.secret.env"), "content": secret, "owner": me(),
                                    "mode": "0600"}]})
    assert result["changed"] is True
    assert "sk-do-not-print" not in json.dumps(result)


def test_refuses_relative_paths_and_missing_content(tmp_path):
    assert "not an absolute path" in run_module({"files": [{"path": "etc/x", "content": ""}]})["msg"]
    assert "has no content" in run_module({"files": [{"path": str(tmp_path / "x")}]})["msg"]


def test_documentation_matches_argument_spec():
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-doc"), "-M", str(REPO / "library"), "-j", "fleet_files"],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)["fleet_files"]
    options = doc["doc"]["options"]
    assert set(options) == {"directories", "files"}
    assert set(options["files"]["suboptions"]) == {"path", "content", "owner", "group", "mode", "state"}
    assert set(options["directories"]["suboptions"]) == {"path", "owner", "group", "mode"}
    assert set(doc["return"]) == {"changed_paths"}
    assert doc["examples"].strip()
