"""Every warning reaches the person (issue 35, item 3): what validation warns about (placeholder
checksums wherever a variable holds one, a pinned vLLM release whose serve flags cannot be
checked, the precedence surprises) is printed by plan, provision, doctor and status, kept in
--json, and refused with exit 4 under --strict."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE, ROOT
from vllm_fleet import cli, live_status, validation
from vllm_fleet.api import PlanResult, RunResult
from vllm_fleet.validation import serve
from vllm_fleet_dev import argcheck

UNDESCRIBED = "0.11.1"


def _fleet(hosts: dict) -> dict:
    """The example's hosts with the groups Ansible gives them."""
    for host, host_vars in hosts.items():
        host_vars["group_names"] = ["fleet", f"{host.split('-')[0]}-nodes"]
    return hosts


def _pin_undescribed(host_vars: dict) -> None:
    host_vars["fleet_matrix"]["vllm"]["version"] = UNDESCRIBED
    host_vars["fleet_matrix"]["vllm_image"]["tag"] = f"v{UNDESCRIBED}"  # the container of the same release
    host_vars["fleet_models"][0]["serve"]["max_num_seqz"] = 3


# ---------------------------------------------------------------- placeholder checksums, wherever they are

def test_a_checksum_outside_the_matrix_is_found(example):
    # The example's NVIDIA apt sources carry placeholder key_sha256 values: the matrix-only scan missed them.
    repos = example["nvidia-01"]["nvidia_driver_apt_repositories"]
    assert validation.placeholder_checksums(repos, "nvidia_driver_apt_repositories") == [
        "nvidia_driver_apt_repositories[0].key_sha256"]
    (warning,) = validation.placeholder_warnings({"nvidia-01": example["nvidia-01"]})
    assert warning.startswith("nvidia_container_toolkit_apt_repositories[0].key_sha256, "
                              "nvidia_driver_apt_repositories[0].key_sha256 carry placeholder sha256 values "
                              "(on nvidia-01)")


def test_every_example_node_is_warned_about_with_its_host(example):
    warnings = validation.run_warnings(_fleet(example), sorted(example), [str(EXAMPLE)])["checksums"]
    for host in sorted(set(example) - {"cpu-01"}):  # the CPU node downloads nothing with a checksum
        assert any(f"(on {host})" in w for w in warnings), (host, warnings)
    assert any(w.startswith("fleet_matrix.cann_kernels,") and "(on ascend-01)" in w for w in warnings)
    assert not any("tiktoken_o200k" in w for w in warnings)  # a real checksum


# ---------------------------------------------------------------- a pin without a parser description

def test_a_pin_without_description_is_a_warning_naming_hosts_group_pin_and_command(example):
    hosts = _fleet(example)
    _pin_undescribed(hosts["nvidia-01"])
    # The flag check cannot run: the misspelt option is no problem...
    assert not [p for p in validation.validate_hosts(hosts) if "max_num_seqz" in p]
    # ...and that is said, once per release, naming where it is pinned and how to describe it.
    (warning,) = validation.run_warnings(hosts, sorted(hosts), [])["serve"]
    assert warning.startswith(f"vLLM {UNDESCRIBED} (fleet_matrix.vllm.version of nvidia-01, group nvidia-nodes) "
                              "has no description of its `vllm serve` options")
    assert "the serve flags of these hosts were not checked" in warning
    assert f"`.venv/bin/python -m vllm_fleet_dev.argcheck --describe {UNDESCRIBED}`" in warning


def test_described_pins_give_no_serve_warning(example):
    hosts = _fleet(example)
    assert validation.run_warnings(hosts, sorted(hosts), [])["serve"] == []


def test_an_ascend_pin_is_named_by_its_release_key(example):
    hosts = _fleet(example)
    hosts["ascend-01"]["fleet_matrix"]["vllm"]["release"] = "0.9.9"
    (warning,) = validation.unchecked_serve_warnings({"ascend-01": hosts["ascend-01"]})
    assert "vLLM 0.9.9 (fleet_matrix.vllm.release of ascend-01, group ascend-nodes)" in warning


@pytest.fixture
def serve_options_file(tmp_path, monkeypatch):
    """A copy of the shipped serve options file that validation reads, and a describe() that
    needs no parser environment (it answers with 0.11.2's options under the asked release)."""
    copy = tmp_path / "serve_options.json"
    shutil.copy(argcheck.SERVE_OPTIONS_FILE, copy)
    monkeypatch.setattr(serve, "SERVE_OPTIONS_FILE", copy)
    serve.serve_options.cache_clear()
    serve.json_options.cache_clear()
    shipped = json.loads(argcheck.SERVE_OPTIONS_FILE.read_text())["releases"]
    asked = []

    def describe(release, **kwargs):
        asked.append(release)
        return {"vllm_version": release, "options": shipped["0.11.2"]["options"]}

    monkeypatch.setattr(argcheck, "describe", describe)
    yield copy, asked
    serve.serve_options.cache_clear()
    serve.json_options.cache_clear()


def test_the_warnings_command_describes_any_release_and_then_the_flags_are_checked(example, serve_options_file):
    copy, asked = serve_options_file
    hosts = _fleet(example)
    _pin_undescribed(hosts["nvidia-01"])
    (warning,) = validation.unchecked_serve_warnings({"nvidia-01": hosts["nvidia-01"]})
    command = shlex.split(warning.split("`")[-2])
    assert command[:3] == [".venv/bin/python", "-m", "vllm_fleet_dev.argcheck"]
    # The command as the warning gives it (into the file validation reads): the release joins the others.
    assert argcheck.main([*command[3:], "--output", str(copy)]) == 0
    assert asked == [UNDESCRIBED]
    releases = list(json.loads(copy.read_text())["releases"])
    assert releases == sorted(set(argcheck.pinned_releases()) | {UNDESCRIBED}, key=argcheck._release_order)
    serve.serve_options.cache_clear()
    assert validation.unchecked_serve_warnings({"nvidia-01": hosts["nvidia-01"]}) == []
    (problem,) = [p for p in validation.validate_hosts(hosts) if "max_num_seqz" in p]
    assert f"vLLM {UNDESCRIBED}'s `vllm serve` has no option --max-num-seqz (did you mean 'max_num_seqs'?)" in problem


def test_describing_every_release_keeps_the_ones_a_user_added(serve_options_file, monkeypatch):
    copy, asked = serve_options_file
    doc = json.loads(copy.read_text())
    doc["releases"][UNDESCRIBED] = doc["releases"]["0.11.2"]
    copy.write_text(json.dumps(doc))
    monkeypatch.setattr(argcheck, "SERVE_OPTIONS_FILE", copy)
    monkeypatch.setattr(argcheck, "described_releases",
                        lambda path=copy: list(json.loads(Path(path).read_text())["releases"]))
    assert argcheck.main(["--describe", "--output", str(copy)]) == 0
    assert UNDESCRIBED in asked and set(argcheck.pinned_releases()) <= set(asked)


# ---------------------------------------------------------------- the report: warned, or refused with --strict

def _filters():
    sys.path.insert(0, str(ROOT / "filter_plugins"))
    try:
        import fleet  # noqa: PLC0415 - filter_plugins/fleet.py, as Ansible loads it
    finally:
        sys.path.pop(0)
    return fleet


@pytest.mark.parametrize("strict,checksums", [(False, False), (True, False), (False, True)])
def test_strict_refuses_every_warning_and_strict_checksums_the_checksums(example, strict, checksums):
    hosts = _fleet(example)
    _pin_undescribed(hosts["nvidia-01"])
    report = _filters().fleet_inventory_report(hosts, ["nvidia-01"], [], strict=strict, checksums=checksums)
    checksum = [w for w in report["problems"] + report["warnings"] if "key_sha256" in w]
    unchecked = [w for w in report["problems"] + report["warnings"] if f"--describe {UNDESCRIBED}" in w]
    assert len(checksum) == len(unchecked) == 1
    assert (checksum[0] in report["problems"]) == (strict or checksums)
    assert (unchecked[0] in report["problems"]) == strict
    assert all(p in checksum + unchecked for p in report["problems"])


# ---------------------------------------------------------------- every summary prints them

def _run(**kwargs) -> RunResult:
    return RunResult(playbook="playbooks/plan.yml", inventory="inv", limit=None, check=False, status="successful",
                     rc=0, **kwargs)


def test_a_successful_plan_prints_its_warnings():
    result = PlanResult(run=_run(warnings=["x carry placeholder sha256 values"]), out_dir="/p", files={}, commands={})
    assert result.ok and "warning: x carry placeholder sha256 values" in str(result).splitlines()


def test_a_failed_plan_prints_its_warnings_once():
    run = _run(warnings=["w1"], problems=["host a: bad"])
    assert str(PlanResult(run=run, out_dir="/p", files={}, commands={})).count("warning: w1") == 1


def test_status_prints_the_inventorys_warnings(example):
    hosts = _fleet(example)
    warnings = live_status.inventory_warnings(EXAMPLE, {"nvidia-01": hosts["nvidia-01"]})
    assert len(warnings) == 1 and "key_sha256" in warnings[0]
    result = live_status.StatusResult(inventory="inv", limit=None, rows=[], nodes={}, window=1.0, duration=0.1,
                                      read_at=0.0, warnings=warnings)
    assert f"warning: {warnings[0]}" in str(result).splitlines()
    assert result.to_dict()["warnings"] == warnings and result.exit_code == 0


# ---------------------------------------------------------------- end to end: vllm-fleet plan

@pytest.fixture(scope="module")
def undescribed_inventory(tmp_path_factory) -> Path:
    """The example, its NVIDIA group pinned to a release without description and a misspelt flag."""
    inv = tmp_path_factory.mktemp("warnings") / "inv"
    shutil.copytree(EXAMPLE, inv)
    matrix = inv / "group_vars" / "nvidia-nodes" / "matrix.yml"
    text = matrix.read_text()
    assert text.count('  vllm:\n    version: "0.11.2"') == text.count("    tag: v0.11.2\n") == 1
    matrix.write_text(text.replace('  vllm:\n    version: "0.11.2"', f'  vllm:\n    version: "{UNDESCRIBED}"')
                      .replace("    tag: v0.11.2\n", f"    tag: v{UNDESCRIBED}\n"))
    models = inv / "group_vars" / "nvidia-nodes" / "models.yml"
    doc = yaml.safe_load(models.read_text())
    doc["fleet_models"][0]["serve"]["max_num_seqz"] = 3
    models.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inv


@pytest.mark.ansible
def test_plan_prints_the_warnings_and_strict_refuses_them(undescribed_inventory, tmp_path, capsys):
    code = cli.main(["plan", "-i", str(undescribed_inventory), "-l", "nvidia-nodes", "-o", str(tmp_path / "p"), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "--max-num-seqz 3" in out  # unchecked: it would reach vllm serve
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert any("nvidia_driver_apt_repositories[0].key_sha256" in w and "(on nvidia-01)" in w for w in warnings), out
    assert any(w.startswith(f"warning: vLLM {UNDESCRIBED} (fleet_matrix.vllm.version of nvidia-01, group nvidia-nodes)")
               and f"--describe {UNDESCRIBED}`" in w for w in warnings), out

    code = cli.main(["plan", "-i", str(undescribed_inventory), "-l", "nvidia-nodes", "-o", str(tmp_path / "s"), "-q",
                     "--strict", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 4 and out["run"]["exit_code"] == 4 and out["run"]["warnings"] == []
    assert any("key_sha256" in p for p in out["run"]["problems"])
    assert any(f"--describe {UNDESCRIBED}`" in p for p in out["run"]["problems"])
