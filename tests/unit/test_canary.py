"""Canaries judged by seed 000's benchmark (vllm_fleet.canary, api.canary_rollout): the split, the
tolerances, the verdict with its figures, the history of accepted figures, and the rollout's
decision (the playbook runs and the benchmark replaced by recorders: the lab test drives them for
real)."""

from __future__ import annotations

import pytest

from vllm_fleet import api, canary, cli
from vllm_fleet.bench import ModelResult, Turn


def result(host="n1", chars=1000, seconds=10.0, ttft=0.2, error=None) -> ModelResult:
    turns = [] if error else [Turn(conversation=1, turn=1, question="q", chars=chars, total_s=seconds, ttft_s=ttft,
                                   output_tokens=None)]
    return ModelResult(host=host, model="qwen", served="qwen", url="http://n1:8000", turns=turns, error=error)


LIMITS = {"fleet_canary_speed_drop_percent": 20.0, "fleet_canary_ttft_rise_percent": 50.0}


def test_canaries_are_the_first_nodes_and_never_more_than_the_pool():
    assert canary.split(["a", "b", "c"], 1) == (["a"], ["b", "c"])
    assert canary.split(["a", "b"], 2) == (["a", "b"], [])
    with pytest.raises(ValueError, match=r"canary 3: the run has 2 fleet node\(s\) \(a, b\); accepted: 1 to 2"):
        canary.split(["a", "b"], 3)
    for bad in (0, -1, True, "1"):
        with pytest.raises(ValueError, match="at least 1"):
            canary.split(["a"], bad)


def test_tolerances_are_the_strictest_canarys_and_percentages():
    assert canary.tolerances([{}]) == LIMITS  # roles/fleet's defaults
    assert canary.tolerances([{"fleet_canary_speed_drop_percent": 5}, {"fleet_canary_speed_drop_percent": 10}]) \
        == {**LIMITS, "fleet_canary_speed_drop_percent": 5.0}
    for bad in (-1, 101, "10", True):
        with pytest.raises(ValueError, match="a percentage from 0 to 100"):
            canary.tolerances([{"fleet_canary_ttft_rise_percent": bad}])


def test_a_release_at_half_speed_is_refused_with_its_figures():
    base = {"model": "qwen", "release": "r1", "chars_per_s": 100.0, "ttft_s": 0.2}
    half = canary.judge(result(chars=500), "r2", base, LIMITS)
    assert not half.ok
    (problem,) = half.problems
    assert problem == ("output speed 50.0 chars/s is 50% below the baseline's 100.0 (release r1); "
                       "fleet_canary_speed_drop_percent allows 20%")
    assert "REFUSED" in half.line() and half.figures["chars_per_s"] == 50.0
    assert canary.judge(result(chars=900), "r2", base, LIMITS).ok  # 10% slower: within 20%
    slow_start = canary.judge(result(ttft=0.4), "r2", base, LIMITS)
    assert slow_start.problems == ["time to first token 0.400 s is 100% above the baseline's 0.200 s (release r1); "
                                   "fleet_canary_ttft_rise_percent allows 50%"]
    failed = canary.judge(result(error="HTTP 500"), "r2", base, LIMITS)
    assert failed.problems == ["the benchmark failed: HTTP 500"]


def test_without_a_baseline_the_figures_are_recorded_not_judged(tmp_path):
    first = canary.judge(result(chars=300), "r1", canary.baseline(tmp_path, "qwen"), LIMITS)
    assert first.ok and "no baseline for this model yet: recorded as its baseline, not judged" in first.line()
    canary.record(tmp_path, first, [1, 2], 128)
    second = canary.judge(result(chars=100), "r2", canary.baseline(tmp_path, "qwen"), LIMITS)
    assert not second.ok and "(release r1)" in second.problems[0]
    rows = canary.history(tmp_path)
    assert [(r["model"], r["release"], r["chars_per_s"]) for r in rows] == [("qwen", "r1", 30.0)]
    assert "qwen" in canary.history_table(rows) and "r1" in canary.history_table(rows)
    assert canary.history_table([]).startswith("no baseline recorded yet")


class Recorder:
    """api's playbook runs and benchmark, recorded: which run, on which nodes."""

    def __init__(self, monkeypatch, chars_per_s: float, nodes=("n1", "n2", "n3")):
        self.calls: list[tuple[str, str]] = []

        def run(name):
            def fake(inventory, limit=None, **kwargs):
                self.calls.append((name, limit))
                hosts = limit.split(",")
                return api.RunResult(playbook=name, inventory=str(inventory), limit=limit, check=False,
                                     status="successful", rc=0,
                                     releases={h: {"from": "r1", "to": "r2", "installed": ["r1", "r2"]} for h in hosts})
            return fake

        monkeypatch.setattr(api, "rollout", run("rollout"))
        monkeypatch.setattr(api, "rollback", run("rollback"))
        monkeypatch.setattr(api, "fleet_nodes", lambda inventory, limit=None: list(nodes))
        monkeypatch.setattr(api._bench, "inventory_hostvars", lambda inventory, limit=None: {
            h: {"fleet_canary_speed_drop_percent": 20} for h in limit.split(",")})
        monkeypatch.setattr(api._bench, "targets_from_hostvars", lambda hostvars, *a, **k: [
            api._bench.Target(host=h, name="qwen", served="qwen", url=f"http://{h}") for h in sorted(hostvars)])

        def bench_targets(targets, **kwargs):
            self.calls.append(("bench", ",".join(t.host for t in targets)))
            return api._bench.BenchResult(results=[result(host=t.host, chars=chars_per_s * 10) for t in targets],
                                          conversations=[1, 2, 3, 4])
        monkeypatch.setattr(api._bench, "bench_targets", bench_targets)


def test_canaries_within_tolerance_record_their_figures_and_the_rest_follows(monkeypatch, tmp_path):
    canary.record(tmp_path, canary.judge(result(chars=1000), "r1", None, LIMITS), [1], 128)
    calls = Recorder(monkeypatch, chars_per_s=95).calls
    outcome = api.canary_rollout("inv", 1, history_dir=tmp_path, serial=2)
    assert outcome.ok and outcome.exit_code == 0, str(outcome)
    assert calls == [("rollout", "n1"), ("bench", "n1"), ("rollout", "n2,n3")]
    assert [e["release"] for e in canary.entries(tmp_path, "qwen")] == ["r1", "r2"]
    assert "within tolerance of 100.0 chars/s" in str(outcome)


def test_canaries_at_half_speed_are_rolled_back_and_no_other_node_is_touched(monkeypatch, tmp_path):
    canary.record(tmp_path, canary.judge(result(chars=1000), "r1", None, LIMITS), [1], 128)
    calls = Recorder(monkeypatch, chars_per_s=50).calls
    outcome = api.canary_rollout("inv", 2, history_dir=tmp_path)
    assert not outcome.ok and outcome.exit_code == 2
    assert calls == [("rollout", "n1,n2"), ("bench", "n1,n2"), ("rollback", "n1,n2")]
    text = str(outcome)
    assert "n1 qwen: REFUSED: output speed 50.0 chars/s is 50% below the baseline's 100.0 (release r1)" in text
    assert "the canaries were rolled back to their previous release" in text and "not reached: n3" in text
    assert [e["release"] for e in canary.entries(tmp_path, "qwen")] == ["r1"]  # nothing accepted
    assert outcome.to_dict()["judgements"][0]["figures"]["chars_per_s"] == 50.0


def test_the_command_line_refuses_a_gate_without_canaries_and_too_many_canaries(monkeypatch, capsys):
    Recorder(monkeypatch, chars_per_s=100)
    assert cli.main(["rollout", "-i", "inventories/example", "--gate", "bench", "-q"]) == cli.EXIT_USAGE
    assert "give their count with --canary N" in capsys.readouterr().err
    assert cli.main(["rollout", "-i", "inventories/example", "--canary", "1", "-q"]) == cli.EXIT_USAGE
    assert "--canary N needs --gate bench" in capsys.readouterr().err
    assert cli.main(["rollout", "-i", "inventories/example", "--canary", "4", "--gate", "bench", "-q"]) \
        == cli.EXIT_USAGE
    assert "canary 4: the run has 3 fleet node(s)" in capsys.readouterr().err


def test_bench_history_prints_the_accepted_figures(tmp_path, capsys):
    canary.record(tmp_path, canary.judge(result(chars=1000), "r1", None, LIMITS), [1], 128)
    assert cli.main(["bench", "--history", "--history-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "MODEL" in out and "qwen" in out and "100.0" in out


def test_a_gate_that_cannot_bench_rolls_the_canaries_back(monkeypatch, tmp_path):
    calls = Recorder(monkeypatch, chars_per_s=100).calls

    def broken(*args, **kwargs):
        raise api._bench.BenchError("host n1: fleet_models is a template")
    monkeypatch.setattr(api._bench, "targets_from_hostvars", broken)
    outcome = api.canary_rollout("inv", 1, history_dir=tmp_path)
    assert not outcome.ok and calls == [("rollout", "n1"), ("rollback", "n1")]
    assert "the benchmark gate could not run: host n1: fleet_models is a template" in str(outcome)
    assert canary.history(tmp_path) == []
