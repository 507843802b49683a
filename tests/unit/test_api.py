"""The Python API and CLI over ansible-runner: results parsed from recorded runner events,
secrets scrubbed, exit codes, progress, and argument parsing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from vllm_fleet import api, cli

FIXTURES = Path(__file__).parent / "fixtures" / "runner"


def recorded(name: str) -> list[dict]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def result(name: str, rc: int = 0) -> api.RunResult:
    return api.result_from_events(recorded(name), playbook="site.yml", inventory="inventories/lab", rc=rc,
                                  status="successful" if rc == 0 else "failed")


def test_success_counts_per_host():
    r = result("success")
    assert list(r.hosts) == ["ascend-01"]
    h = r.hosts["ascend-01"]
    assert (h.ok, h.changed, h.failed, h.unreachable, h.skipped) == (112, 0, 0, 0, 39)
    assert r.failures == [] and r.problems == []
    assert r.ok and r.exit_code == api.EXIT_OK
    assert h.status == "ok"
    # Timings come from the events: the slowest task of that run is known.
    assert max(r.task_durations.values()) > 0


def test_invalid_inventory_is_its_own_outcome():
    r = result("invalid_inventory", rc=2)
    assert r.invalid_inventory
    assert r.exit_code == api.EXIT_INVALID_INVENTORY
    assert "host ascend-01: fleet_matrix.python = 3.11 (a number): expected a version string in quotes, " \
           "e.g. \"8.3.RC1\" (YAML read it as a number: put it in quotes)" in r.problems
    assert len(r.problems) == 14
    text = str(r)
    assert "The inventory is invalid; nothing was changed on any host:" in text
    # The validation task's own failure is not repeated below the problems.
    assert "failed at 'The inventory is valid'" not in text


def test_unreachable_host_is_named_with_its_code():
    r = result("unreachable", rc=4)
    assert r.unreachable_hosts == ["ascend-01"] and r.failed_hosts == []
    assert r.exit_code == api.EXIT_UNREACHABLE
    (failure,) = r.failures
    assert failure.unreachable and failure.host == "ascend-01"
    assert "Unable to connect to port 22001 on 127.0.0.1" in failure.message
    assert "ascend-01: unreachable at 'Gather base facts and mounts'" in str(r)


def test_failed_host_carries_the_task_and_message():
    r = result("failed_host", rc=2)
    assert r.failed_hosts == ["ascend-01"] and r.exit_code == api.EXIT_FAILED
    (failure,) = r.failures
    assert failure.role == "stages/preflight" and failure.task == "The models' filesystem has enough free space"
    assert "needs 1000000.0 GB" in failure.message
    d = r.to_dict()
    assert d["hosts"]["ascend-01"]["status"] == "failed" and d["exit_code"] == 2
    assert json.dumps(d)


def test_events_are_scrubbed_before_anyone_sees_them():
    seen = []
    collector = api._Collector(["hf_planted_SECRET"], seen.append)
    event = {"event": "runner_on_failed", "event_data": {"host": "h", "task": "t", "res": {
        "msg": "token hf_planted_SECRET rejected", "cmd": ["x", "--token", "hf_planted_SECRET"]}}}
    assert collector(event) is True
    assert "hf_planted_SECRET" not in json.dumps(seen) and "hf_planted_SECRET" not in json.dumps(event)
    assert collector.failures[0].message == "token ******** rejected"


def test_secret_values_cover_nested_secrets():
    values = api._secret_values({"model_fetch_tokens": {"huggingface": "hf_abc123", "modelscope": "ms_xyz789"},
                                 "keys": ["sk-1234"], "short": "ab"})
    assert sorted(values) == ["hf_abc123", "ms_xyz789", "sk-1234"]
    assert len(values[0]) >= len(values[-1])  # longest first


@pytest.mark.parametrize("tree,masked,shown", [
    # A team's key is masked; its name, which status and the router's counters print, is not,
    # nor its limit (a suboption its spec does not mark no_log), which may equal a port.
    ({"router_api_keys": [{"name": "research", "key": "k" * 20, "requests_per_minute": 8000}]}, ["k" * 20],
     ["research", "8000"]),
    # Outside a secret's name, a --secrets file's strings are secrets, its numbers are not.
    ({"my_vault": {"value": "v" * 12, "port": 8443}}, ["v" * 12], ["8443"]),
    # Names are never secrets, even under a secret's name; numbers named like secrets are.
    ({"fleet_serve_api_key": "s" * 16, "api_tokens": {"name": "team-a", "pin": 123456}}, ["s" * 16, "123456"],
     ["team-a"]),
    ({"fleet_models": [{"name": "qwen-7b", "served_model_name": "org/qwen", "secret_env": {"HF_TOKEN": "hf_x1y2"}}]},
     ["hf_x1y2"], ["qwen-7b", "org/qwen"]),
])
def test_a_secrets_files_keys_are_masked_and_its_names_are_not(tree, masked, shown):
    values = api._secret_values(tree)
    assert sorted(values) == sorted(masked)
    text = api.secrets_mod.mask_text(" ".join(masked + shown), values)
    assert all(word in text.split() for word in shown) and not any(word in text for word in masked)


def test_scrub_tree_masks_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "stdout").write_text("x hf_abc123 y")
    api.scrub_tree(tmp_path, ["hf_abc123"])
    assert (tmp_path / "a" / "stdout").read_text() == "x ******** y"


@pytest.mark.parametrize("items,expected", [
    (["a=1 b=two"], {"a": "1", "b": "two"}),
    (['{"fleet_min_free_disk_gb": 100}'], {"fleet_min_free_disk_gb": 100}),
    (["a=1", '{"a": 2}'], {"a": 2}),
])
def test_extravars_like_ansible(items, expected):
    assert cli.parse_extravars(items) == expected


def test_extravars_from_file(tmp_path):
    f = tmp_path / "vars.yml"
    f.write_text("fleet_models: []\n")
    assert cli.parse_extravars([f"@{f}"]) == {"fleet_models": []}


def test_bad_extravars_is_a_usage_error():
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        cli.parse_extravars(["novalue"])


def test_progress_in_a_log_shows_plays_changes_and_failures():
    out = io.StringIO()
    progress = cli.Progress(out, live=False)
    for event in recorded("failed_host"):
        progress(event)
    progress.close()
    text = out.getvalue()
    assert "== Validate the inventory" in text
    assert "ascend-01      failed      stages/preflight : The models' filesystem has enough free space: ascend-01: " \
           "/home/models (filesystem /) has" in text
    assert "ok " not in text.replace("Look", "")  # ok results are counted, not listed


def test_progress_on_a_terminal_redraws_per_host_lines():
    out = io.StringIO()
    progress = cli.Progress(out, live=True)
    for event in recorded("success")[:80]:
        progress(event)
    progress.close()
    assert "\x1b[" in out.getvalue() and "ascend-01" in out.getvalue()


@pytest.mark.parametrize("fixture,rc,code", [("success", 0, 0), ("failed_host", 2, 2), ("unreachable", 4, 3),
                                             ("invalid_inventory", 2, 4)])
def test_cli_exit_codes(monkeypatch, capsys, fixture, rc, code):
    canned = result(fixture, rc=rc)
    monkeypatch.setattr(api, "provision", lambda *a, **k: canned)
    assert cli.main(["provision", "-i", "inventories/example", "--json", "-q"]) == code
    printed = json.loads(capsys.readouterr().out)
    assert printed["exit_code"] == code


def test_cli_usage_errors(capsys):
    assert cli.main(["provision", "-i", "/nonexistent/inventory", "-q"]) == cli.EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["frobnicate"]) == cli.EXIT_USAGE


def test_rescued_failures_do_not_count():
    """A mirror that fails before the next one serves: a failed event, a rescue, and a clean recap."""
    events = [
        {"event": "runner_on_failed",
         "event_data": {"host": "a", "task": "Fetch from mirror 1", "res": {"msg": "down"}}},
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "Fetch from mirror 2", "res": {"changed": True}}},
        {"event": "runner_on_failed",
         "event_data": {"host": "b", "task": "Fetch from mirror 1", "res": {"msg": "down"}}},
        {"event": "runner_on_failed", "event_data": {"host": "b", "task": "No source had it", "res": {"msg": "none"}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"a": 2, "b": 1}, "changed": {"a": 1},
                                                       "failures": {"b": 1}, "rescued": {"a": 1, "b": 1},
                                                       "processed": {"a": 1, "b": 1}}},
    ]
    r = api.result_from_events(events, rc=2)
    assert [(f.host, f.task) for f in r.failures] == [("b", "No source had it")]
    assert r.failed_hosts == ["b"] and r.hosts["a"].status == "changed"


def test_a_refusal_at_the_verdict_play_is_the_reports_problems_and_exit_4():
    """The refusal is no task event (the run stops at the verdict play's `hosts:`, rc 4): the problems
    are the validation report's, and no host is counted failed."""
    problem = "host a: fleet_serve_base_port = 80 (an integer): is out of range"
    events = [
        {"event": "runner_on_ok",
         "event_data": {"host": "a", "task": "Collect every problem", "role": api.VALIDATION_ROLE,
                        "res": {"ansible_facts": {"_validate_inventory_report": {"problems": [problem],
                                                                                 "warnings": ["w"]}}}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"a": 3}, "processed": {"a": 1}}},
    ]
    r = api.result_from_events(events, rc=4)
    assert r.problems == [problem] and r.warnings == ["w"] and r.failed_hosts == []
    assert r.exit_code == api.EXIT_INVALID_INVENTORY and r.invalid_hosts == ["a"]
    assert "The inventory is invalid; nothing was changed on any host:" in str(r)
    # A valid report carries no problems: nothing to refuse.
    events[0]["event_data"]["res"]["ansible_facts"]["_validate_inventory_report"]["problems"] = []
    assert api.result_from_events(events, rc=0).exit_code == api.EXIT_OK


def test_check_mode_stops_are_reported_per_host():
    """In check mode a node whose next step needs what a real run would first create is
    reported with the reason, not as a failure."""
    reason = "Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run (version 25.2.0) is not downloaded yet"
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "Remember where check mode stopped",
                                                  "res": {"ansible_facts": {"fleet_check_mode_stopped": reason}}}},
        {"event": "runner_on_ok", "event_data": {"host": "b", "task": "Other facts",
                                                  "res": {"ansible_facts": {"something_else": 1}}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"a": 5, "b": 7}, "changed": {"a": 2},
                                                       "processed": {"a": 1, "b": 1}}},
    ]
    r = api.result_from_events(events, check=True, rc=0)
    assert r.check_stopped == {"a": reason}
    assert r.exit_code == api.EXIT_OK and r.hosts["a"].status == "changed"
    assert f"a: check mode stopped previewing: {reason} (a real run does it first)" in str(r)
    assert r.to_dict()["check_stopped"] == {"a": reason}


def test_doctor_shows_what_it_compared_per_host():
    rows = [{"component": "driver", "kind": "smi", "expected": "570.195.03", "installed": None, "ok": False,
             "detail": "nvidia-smi fails: Driver/library version mismatch"},
            {"component": "vllm", "kind": "package", "expected": "0.11.2", "installed": "0.11.2", "ok": True,
             "detail": "installed in /opt/vllm-fleet/venv/lib/python3.11/site-packages"}]
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "nvidia-01", "task": "Publish what was compared",
                                                  "res": {"ansible_facts": {"doctor_report": rows}}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"nvidia-01": 3}, "failures": {"nvidia-01": 1},
                                                       "processed": {"nvidia-01": 1}}},
    ]
    r = api.result_from_events(events, playbook="playbooks/doctor.yml", rc=2)
    assert r.components == {"nvidia-01": rows}
    assert r.to_dict()["components"]["nvidia-01"][0]["expected"] == "570.195.03"
    text = str(r).splitlines()
    header = next(i for i, line in enumerate(text) if line.startswith("HOST") and "VERDICT" in line)
    assert text[header].split() == ["HOST", "COMPONENT", "KIND", "EXPECTED", "INSTALLED", "VERDICT"]
    driver, vllm = text[header + 1], text[header + 2]
    assert driver.split()[:6] == ["nvidia-01", "driver", "smi", "570.195.03", "-", "DIFFERS"]
    assert "Driver/library version mismatch" in driver
    assert vllm.split() == ["nvidia-01", "vllm", "package", "0.11.2", "0.11.2", "ok"]


def test_an_interrupted_run_exits_130_even_with_failed_hosts():
    # Ctrl-C reaches ansible-playbook too: its hosts end failed, the runner's status is "canceled".
    r = api.RunResult(playbook="site.yml", inventory="i", limit=None, check=False, status="canceled", rc=2,
                      hosts={"a": api.HostResult(host="a", failed=1)})
    assert r.exit_code == api.EXIT_INTERRUPTED == 130
    assert api.RunResult(playbook="site.yml", inventory="i", limit=None, check=False, status="failed", rc=2,
                         hosts={"a": api.HostResult(host="a", failed=1)}).exit_code == api.EXIT_FAILED
