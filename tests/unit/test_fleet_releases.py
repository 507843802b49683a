"""library/fleet_releases.py through the ansible CLI, as roles/blocks/fleet_release runs it: one call
reads the release directories, the complete ones, where current points and the history; one
call of a converge marks the new release complete, makes it current, records it and prunes."""

from __future__ import annotations

import ast
import json
import os
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
A, B, C = "a" * 12, "b" * 12, "c" * 12


def run_module(base: Path, check: bool = False, **args) -> dict:
    args = {"releases_dir": str(base / "releases"), "current": str(base / "current"), **args}
    return ansible_module("fleet_releases", args, check=check)


def tree(base: Path) -> dict[str, str]:
    """Every path under base with what it is: a link's target, a file's text, or 'dir'."""
    out = {}
    for path in sorted(base.rglob("*")):
        key = str(path.relative_to(base))
        out[key] = ("-> " + os.readlink(path) if path.is_symlink()
                    else path.read_text() if path.is_file() else "dir")
    return out


def node(base: Path) -> Path:
    """A node on release B (A before it), and C installed but not yet marked complete."""
    releases = base / "releases"
    for rid in (A, B, C):
        (releases / rid / "venv").mkdir(parents=True)
    for rid in (A, B):
        (releases / rid / MARKER).write_text("{}\n")
    (releases / "history").write_text(f"{A}\n{B}\n")
    (base / "current").symlink_to(f"releases/{B}")
    return base


def test_a_node_without_releases_reads_empty(tmp_path):
    result = run_module(tmp_path, wanted=C)
    assert result["changed"] is False
    assert result["state"] == {"current": "", "wanted": C, "installed": [], "incomplete": [], "wanted_complete": False,
                               "previous": "", "prune": [], "history": [], "switched_from": "", "pruned": []}


def test_a_read_changes_nothing_and_says_what_the_node_holds(tmp_path):
    base = node(tmp_path)
    (base / "releases" / ".half.tmp").mkdir()  # hidden: not a release
    before = tree(base)
    state = run_module(base, check=True, wanted=C)["state"]
    assert (state["current"], state["installed"], state["incomplete"], state["previous"]) == (B, [A, B], [C], A)
    assert state["switched_from"] == B and state["pruned"] == []
    assert tree(base) == before


def test_current_that_is_a_directory_is_no_release(tmp_path):
    (tmp_path / "releases" / A).mkdir(parents=True)
    (tmp_path / "current").mkdir()
    assert run_module(tmp_path)["state"]["current"] == ""


def test_a_converge_marks_switches_records_and_prunes_in_one_call_then_changes_nothing(tmp_path):
    base = node(tmp_path)
    record = '{"vendor": "cpu"}\n'
    args = {"wanted": C, "record": record, "target": C, "keep": 2, "prune": True}
    # Check mode: it says it would change, and changes nothing.
    before = tree(base)
    preview = run_module(base, check=True, **args)
    assert preview["changed"] is True and preview["state"]["current"] == C and preview["state"]["pruned"] == [A]
    assert tree(base) == before

    result = run_module(base, **args)
    assert result["changed"] is True
    assert (base / "releases" / C / MARKER).read_text() == record
    assert os.readlink(base / "current") == f"releases/{C}"  # relative: moves with its parent
    assert (base / "releases" / "history").read_text() == f"{B}\n{C}\n"
    assert sorted(p.name for p in (base / "releases").iterdir()) == sorted([B, C, "history"])
    state = result["state"]
    assert (state["current"], state["previous"], state["switched_from"], state["pruned"]) == (C, B, B, [A])
    assert state["installed"] == [B, C] and state["prune"] == []
    assert preview["state"] == state

    again = run_module(base, **args)
    assert again["changed"] is False
    assert again["state"] == {**state, "switched_from": C, "pruned": []}


def test_a_release_without_its_marker_is_refused_and_nothing_moves(tmp_path):
    base = node(tmp_path)
    before = tree(base)
    result = run_module(base, wanted=A, target=C)
    assert "state" not in result  # failed
    assert result["msg"] == (f"release {C} is not installed completely in {base / 'releases'} "
                             f"(installed: {A}, {B})")
    assert tree(base) == before


def test_a_record_for_a_release_never_installed_is_refused(tmp_path):
    result = run_module(node(tmp_path), wanted="d" * 12, record="{}\n", target="d" * 12)
    assert "state" not in result and "was never installed" in result["msg"]


def test_documentation_matches_argument_spec():
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-doc"), "-M", str(REPO / "library"), "-j", "fleet_releases"],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)["fleet_releases"]
    source = ast.parse((REPO / "library" / "fleet_releases.py").read_text())
    spec = next(kw.value for call in ast.walk(source) if isinstance(call, ast.Call)
                for kw in call.keywords if kw.arg == "argument_spec")
    assert set(doc["doc"]["options"]) == {kw.arg for kw in spec.keywords}
    assert set(doc["return"]) == {"state"}
    assert doc["examples"].strip()
