"""library/fleet_state.py: a converged node's record, and every kind of drift that must break it.

The module runs in-process on a temporary tree laid out like a node (vllm-fleet's directories,
a release's venv, a git checkout, a model with its marker, a vendor installation, a conda
installation with an environment); each drift of the battery must turn `converged` false and
name the path, and a tree left alone must stay converged.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import ansible.module_utils
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))

from ansible.module_utils import vllm_fleet_state as vs  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402

from tests.conftest import load_module  # noqa: E402
from vllm_fleet import project, state  # noqa: E402

fleet_state = load_module(REPO / "library" / "fleet_state.py")
MARKER = ".vllm-fleet-complete"


@pytest.fixture
def node(tmp_path):
    """A node's tree; returns {name: path} of what the drifts touch."""
    base = tmp_path / "opt" / "vllm-fleet"
    venv = base / "releases" / "r1" / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "torch-2.5.1.dist-info").mkdir()
    (site / "torch").mkdir()
    (site / "torch" / "big.so").write_bytes(b"x" * 10)
    src = base / "releases" / "r1" / "src" / "vllm"
    src.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "CMakeLists.txt").write_text("url https://mirror/\n")
    subprocess.run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], check=True)
    subprocess.run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
                   check=True)
    (base / "current").symlink_to("releases/r1")
    home = base / "home"
    (home / ".cache").mkdir(parents=True)
    etc = tmp_path / "etc" / "vllm-fleet"
    etc.mkdir(parents=True)
    (etc / "m.env").write_text("A=1\n")
    units = tmp_path / "etc" / "systemd" / "system"
    (units / "multi-user.target.wants").mkdir(parents=True)
    (units / "vllm-m.service").write_text("[Service]\nRestartSec=10\n")
    (units / "multi-user.target.wants" / "vllm-m.service").symlink_to(units / "vllm-m.service")
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"w" * 100)
    (model / MARKER).write_text("sha\n")
    vendor = tmp_path / "usr" / "local" / "Ascend"
    vendor.mkdir(parents=True)
    (vendor / "version.info").write_text("Version=24.1\n")
    conda = tmp_path / "conda"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "conda-meta" / "python-3.10.json").write_text("{}")
    env = conda / "envs" / "aimodule"
    (env / "conda-meta").mkdir(parents=True)
    (env / "conda-meta" / "vllm-0.4.json").write_text("{}")
    (env / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    return {"tmp": tmp_path, "base": base, "venv": venv, "site": site, "src": src, "home": home, "etc": etc,
            "units": units, "model": model, "vendor": vendor, "conda": conda, "env": env}


def run(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        fleet_state.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0, result
    return result


def args(node, **extra):
    tmp = node["tmp"]
    return {"path": str(tmp / "state.json"), "inputs": "digest-1",
            "roots": [str(node["base"]), str(tmp / "etc"), str(tmp / "models"), str(node["conda"])],
            "installs": [str(node["vendor"])], "skip": [str(node["home"])], "markers": [MARKER],
            "unit_dir": str(node["units"]), **extra}


def recorded(node, capsys, monkeypatch):
    # No systemd here: the unit is reported active by a stand-in of `systemctl show`.
    monkeypatch.setattr(fleet_state, "unit_states", lambda module, units: dict.fromkeys(units, "active"))
    result = run(dict(args(node), state="record"), capsys)
    assert result["changed"] is True
    return result


def check(node, capsys, **extra):
    return run(args(node, **extra), capsys)


DRIFTS = {
    "a unit file edited": lambda n: (n["units"] / "vllm-m.service").write_text("[Service]\nRestartSec=99\n"),
    "a unit disabled": lambda n: (n["units"] / "multi-user.target.wants" / "vllm-m.service").unlink(),
    "an environment file's mode": lambda n: os.chmod(n["etc"] / "m.env", 0o666),
    "an environment file's owner": lambda n: os.chown(n["etc"] / "m.env", 1, 1),
    "a directory's mode": lambda n: os.chmod(n["etc"], 0o777),
    "a pinned package moved": lambda n: (n["site"] / "torch-2.5.1.dist-info").rename(
        n["site"] / "torch-2.6.0.dist-info"),
    "a package added": lambda n: (n["site"] / "extra-1.0.dist-info").mkdir(),
    "the current link moved": lambda n: ((n["base"] / "current").unlink(), (n["base"] / "current").symlink_to("x")),
    "a checkout's build file reverted": lambda n: (n["src"] / "CMakeLists.txt").write_text("url https://github.com/\n"),
    "a checkout at another commit": lambda n: subprocess.run(
        ["git", "-C", str(n["src"]), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
         "-m", "d"], check=True),
    "a model's marker deleted": lambda n: (n["model"] / MARKER).unlink(),
    "a file added where vllm-fleet writes": lambda n: (n["etc"] / "stray.env").write_text("B=2\n"),
    "a vendor's installation replaced": lambda n: (n["vendor"] / "version.info").write_text("Version=24.2\n"),
    "a conda environment's package moved": lambda n: (n["env"] / "conda-meta" / "vllm-0.4.json").rename(
        n["env"] / "conda-meta" / "vllm-0.5.json"),
    "a unit file removed": lambda n: (n["units"] / "multi-user.target.wants" / "vllm-m.service").unlink()
    or (n["units"] / "vllm-m.service").unlink(),
}


def test_a_node_left_alone_stays_converged(node, capsys, monkeypatch):
    recorded(node, capsys, monkeypatch)
    # What the services write while they run, and what a module import compiles, is not state.
    (node["home"] / ".cache" / "kernel.bin").write_bytes(b"k")
    (node["src"] / "__pycache__").mkdir()
    (node["model"] / "weights.bin").write_bytes(b"v" * 100)  # inside a model: the marker speaks for it
    (node["site"] / "torch" / "big.so").write_bytes(b"y" * 10)  # inside a package: its version speaks for it
    result = check(node, capsys)
    assert result["converged"] is True, result["reasons"]
    assert result["reasons"] == []
    assert result["changed"] is False
    assert result["checked"]["units"] == 1
    # Recording the same state again changes nothing.
    again = run(dict(args(node), state="record"), capsys)
    assert again["changed"] is False


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_every_drift_breaks_the_record(node, capsys, monkeypatch, drift):
    recorded(node, capsys, monkeypatch)
    DRIFTS[drift](node)
    result = check(node, capsys)
    assert result["converged"] is False, drift
    assert result["reasons"], drift


def test_the_reasons_name_the_path(node, capsys, monkeypatch):
    recorded(node, capsys, monkeypatch)
    os.chmod(node["etc"], 0o777)
    (node["units"] / "vllm-m.service").write_text("[Service]\nRestartSec=99\n")
    reasons = check(node, capsys)["reasons"]
    assert f"{node['etc']} changed (mode or owner)" in reasons
    assert f"{node['units'] / 'vllm-m.service'} changed (content)" in reasons


def test_a_stopped_unit_and_a_silent_engine_break_the_record(node, capsys, monkeypatch):
    recorded(node, capsys, monkeypatch)
    monkeypatch.setattr(fleet_state, "unit_states", lambda module, units: dict.fromkeys(units, "failed"))
    assert check(node, capsys)["reasons"] == ["unit vllm-m.service is failed"]


def test_health_urls_must_answer(node, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(fleet_state, "unit_states", lambda module, units: dict.fromkeys(units, "active"))
    # Port 9 (discard) on loopback: nothing listens in a test environment.
    run(dict(args(node), state="record", health=["http://127.0.0.1:9/health"], timeout=1), capsys)
    result = check(node, capsys)
    assert result["converged"] is False
    assert result["reasons"][0].startswith("http://127.0.0.1:9/health: no answer"), result["reasons"]


def test_other_inputs_or_no_record_take_the_full_path(node, capsys, monkeypatch):
    assert check(node, capsys)["reasons"][0].startswith("no record of a converge")
    recorded(node, capsys, monkeypatch)
    result = check(node, capsys, inputs="digest-2")
    assert result["converged"] is False
    assert result["reasons"] == [
        "the inputs differ from those of the last converge (inventory, matrix or vllm-fleet itself)"]


def test_check_mode_records_nothing(node, capsys, monkeypatch):
    monkeypatch.setattr(fleet_state, "unit_states", lambda module, units: {})
    run(dict(args(node), state="record", _ansible_check_mode=True), capsys)
    assert not (node["tmp"] / "state.json").exists()


def test_the_record_is_private(node, capsys, monkeypatch):
    recorded(node, capsys, monkeypatch)
    assert oct((node["tmp"] / "state.json").stat().st_mode & 0o777) == "0o600"


def test_an_accelerator_change_breaks_the_record():
    saved = {"version": 1, "inputs": "d", "entries": {}, "units": {},
             "accelerators": vs.accelerator_summary({"vendor": "ascend", "count": 8, "health": "OK"})}
    assert vs.compare(saved, "d", {}, {}, {}, {"vendor": "ascend", "count": 8, "health": "OK"}) == []
    assert vs.compare(saved, "d", {}, {}, {}, {"vendor": "ascend", "count": 8, "health": "Critical"}) == [
        "accelerators: health was OK, is Critical"]


class TestInputsDigest:
    def test_how_a_run_goes_is_not_an_input(self):
        base = {"fleet_matrix": {"vllm": {"commit": "a"}}, "group_names": ["fleet"]}
        digest = state.inputs_digest(base, "code")
        # scripts/demo's -e report_dir=... once made its second run (the README's "run it again") take
        # the full path on every node: every variable of a role that writes nothing on a node is left out.
        for run_only in ({"fleet_full": True}, {"fleet_rollout_serial": 1}, {"ansible_host": "10.0.0.9"},
                         {"ansible_port": 2222}, {"report_dir": "/tmp/report"}, {"doctor_fail_on_mismatch": True},
                         {"validate_inventory_strict_checksums": False}, {"fleet_rollout_steps": "x.yml"}):
            assert state.inputs_digest({**base, **run_only}, "code") == digest, run_only

    def test_the_run_roles_are_roles_of_the_project(self):
        from vllm_fleet.role_specs import role_names

        assert set(state.RUN_ROLES) <= role_names()

    def test_a_variable_the_code_or_a_group_changes_the_digest(self):
        base = {"fleet_matrix": {"vllm": {"commit": "a"}}, "group_names": ["fleet"]}
        digest = state.inputs_digest(base, "code")
        assert state.inputs_digest({**base, "fleet_matrix": {"vllm": {"commit": "b"}}}, "code") != digest
        assert state.inputs_digest({**base, "group_names": ["fleet", "canary"]}, "code") != digest
        assert state.inputs_digest(base, "other code") != digest
        # The inventory's groups: a router or monitoring host added gives every node steps to take.
        groups = {"fleet": ["n1"], "router": []}
        digest = state.inputs_digest(base, "code", groups)
        assert state.inputs_digest(base, "code", {"router": [], "fleet": ["n1"]}) == digest
        assert state.inputs_digest(base, "code", {**groups, "router": ["r1"]}) != digest

    def test_the_code_digest_follows_the_project_files(self, tmp_path):
        (tmp_path / "roles" / "r").mkdir(parents=True)
        (tmp_path / "roles" / "r" / "main.yml").write_text("a\n")
        before = project.code_digest(tmp_path)
        (tmp_path / "roles" / "r" / "__pycache__").mkdir()
        (tmp_path / "roles" / "r" / "__pycache__" / "x.pyc").write_bytes(b"c")
        assert project.code_digest(tmp_path) == before
        (tmp_path / "roles" / "r" / "main.yml").write_text("b\n")
        assert project.code_digest(tmp_path) != before


def test_a_record_takes_the_accelerators_the_run_read_last(node, capsys, monkeypatch):
    """The record step is given the run's own facts (preflight's, or the driver gate's): it reads no
    device itself, and what it records is what a later check compares with."""
    monkeypatch.setattr(fleet_state, "unit_states", lambda module, units: {})
    monkeypatch.setattr(fleet_state, "gather", lambda module, params: pytest.fail("the devices were read again"))
    facts = {"vendor": "ascend", "count": 8, "device_node_count": 4, "driver_version": "24.1", "health": "OK"}
    result = run(dict(args(node), state="record", vendor="ascend", accelerators=facts), capsys)
    assert "ansible_facts" not in result or not result["ansible_facts"]
    saved = json.loads((node["tmp"] / "state.json").read_text())
    assert saved["accelerators"] == vs.accelerator_summary(facts)
