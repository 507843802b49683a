"""scripts/bench-routing: the engines' counters read from /metrics, the figures it derives, the
targets it reports and the page it writes (no lab: the measuring runs are the script's own)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.conftest import load_module
from tests.unit.test_docs import CLOCK, prose_lines

ROOT = Path(__file__).resolve().parents[2]

# vLLM 0.32's /metrics on the lab's CPU node (trimmed): counters, their _created twins, labels.
METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny-chat"} 23.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny-chat"} 1.7961925214136336e+09
vllm:prefix_cache_hits_total{engine="0",model_name="tiny-chat"} 16.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny-chat"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-chat"} 3.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="tiny-chat"} 1.796192521413898e+09
"""


@pytest.fixture(scope="module")
def bench():
    return load_module(ROOT / "scripts" / "bench-routing", "bench_routing")


def test_counters_are_summed_over_their_labels(bench):
    metrics = bench.parse_metrics(METRICS)
    assert metrics["vllm:prefix_cache_queries_total"] == 23.0
    assert metrics["vllm:prefix_cache_hits_total"] == 16.0
    assert metrics["vllm:request_success_total"] == 5.0  # every finished_reason
    assert bench.pick(metrics, bench.HITS) == "vllm:prefix_cache_hits_total"
    assert bench.pick(metrics, bench.REQUESTS) == "vllm:request_success_total"
    assert bench.pick({}, bench.QUERIES) is None


def test_percentiles_interpolate_like_numpy(bench):
    assert bench.percentile([], 50) is None
    assert bench.percentile([3.0], 90) == 3.0
    assert bench.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert bench.percentile(list(map(float, range(11))), 90) == pytest.approx(9.0)


def test_policies_are_checked(bench):
    assert bench.parse_policies("round_robin, cache_aware") == ["round_robin", "cache_aware"]
    for wrong in ("", "fastest", "session,session"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_policies(wrong)


def test_concurrency_levels_are_checked(bench):
    assert bench.parse_concurrency("1") == [1]
    assert bench.parse_concurrency("1,4") == [1, 4]
    for wrong in ("", "0", "1,1", "two", "-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_concurrency(wrong)


def _counters(hits, queries, requests):
    return {"hits": hits, "queries": queries, "requests": requests}


def _overhead(direct_p50, router_p50, spread=2.0):
    return {"path": "HAProxy", "direct": {"p50_ms": direct_p50, "p90_ms": direct_p50 + spread},
            "router": {"p50_ms": router_p50, "p90_ms": router_p50 + spread},
            "added_p50_ms": router_p50 - direct_p50, "added_p90_ms": router_p50 - direct_p50,
            "paired_median_ms": router_p50 - direct_p50}


def _figures(bench):
    turns = [{"conversation": 1, "turn": 1, "chars": 40, "total_s": 2.0, "ttft_s": 0.5, "engine": "cpu-01"},
             {"conversation": 1, "turn": 2, "chars": 60, "total_s": 2.0, "ttft_s": 0.1, "engine": "cpu-02"},
             {"conversation": 2, "turn": 1, "error": "HTTP 400 from http://127.0.0.1:1/v1/chat/completions"}]
    before = {"cpu-01": _counters(0, 0, 0), "cpu-02": _counters(10, 100, 1)}
    rr = bench.summarize_replay(turns, before, {"cpu-01": _counters(20, 100, 1), "cpu-02": _counters(30, 200, 2)})
    rr |= {"errors": ["conversation 2 turn 1: HTTP 400 (context)"], "engines_by_conversation": {"1": "12", "2": "?"}}
    ca = bench.summarize_replay(turns, before,
                                {"cpu-01": _counters(60, 100, 2), "cpu-02": _counters(10, 100, 1)})
    figures = {"meta": {"date": "2026-12-02", "cpus": 2, "cpu_model": "AMD EPYC", "loadavg_start": [8.0, 7.5, 9.1],
                        "loadavg_end": [8.2, 7.9, 9.0], "argv": ["--policies", "round_robin,cache_aware"],
                        "vllm_version": "0.32.0", "model": "tiny-chat"},
               "fit": {"max_model_len": 512, "max_tokens": 32}, "overhead_requests": 40, "total_wall_s": 1500,
               "policies": {
                   "round_robin": {"served_by": "HAProxy", "replay": rr, "overhead": _overhead(100.0, 103.0),
                                   "fitted": {"system_cut": {1: (136, 271)}, "dropped_turns": 1,
                                              "dropped_exchanges": 1}},
                   "cache_aware": {"served_by": "vllm-router", "replay": ca, "overhead": _overhead(100.0, 109.0, 40),
                                   "fitted": {"system_cut": {1: (136, 271)}, "dropped_turns": 1,
                                              "dropped_exchanges": 1}}},
               "problems": [], "notes": []}
    figures["derived"] = bench.derive(figures)
    return figures


def test_a_replay_sums_both_engines_and_counts_failed_turns(bench):
    r = _figures(bench)["policies"]["round_robin"]["replay"]
    assert (r["hits"], r["queries"], r["hit_rate"]) == (40, 200, 0.2)
    assert r["per_engine"]["cpu-01"] == {"requests": 1, "hits": 20, "queries": 100}
    assert (r["turns"], r["failed"]) == (3, 1)
    assert r["ttft_mean_s"] == pytest.approx(0.3) and r["ttft_p50_s"] == pytest.approx(0.3)
    assert r["chars_per_s"] == 25.0  # 100 characters over 4 s: the failed turn is not counted


def test_targets_are_reported_met_or_not(bench):
    derived = _figures(bench)["derived"]
    assert derived["hit_ratio"] == pytest.approx(0.6 / 0.2)
    assert derived["hit_target_met"] is True
    assert derived["overhead_target_met"] == {"round_robin": True, "cache_aware": False}
    assert "within the noise" in bench.overhead_verdict(derived, "cache_aware")
    assert "within the noise" not in bench.overhead_verdict(derived, "round_robin")
    assert bench.derive({"policies": {}})["hit_target_met"] is None


def test_the_report_and_the_page_say_what_was_cut_and_what_failed(bench):
    figures = _figures(bench)
    report = bench.format_report(figures)
    assert "NOT met" in report and "3.00" in report
    assert "!! round_robin (concurrency 1): conversation 2 turn 1: HTTP 400 (context)" in report
    assert "every policy: conversation 1's system prompt cut to its first 136 of 271 characters" in report
    page = bench.render_doc(figures)
    assert page.startswith("# Routing policies compared\n")
    assert "| round_robin | HAProxy | 1 | 20.0 % | 40 / 200 |" in page
    assert "- round_robin: conversation 2 turn 1: HTTP 400 (context)" in page
    assert "| round_robin | `12` | `?` |" in page
    assert "**met**" in page and "NOT met" in page
    assert "2026-12-02" in page and "AMD EPYC" in page
    assert not [line for _, line in prose_lines(page) if CLOCK.search(line)]


def _replay(bench, hits, queries):
    turn = {"conversation": 1, "turn": 1, "chars": 40, "total_s": 2.0, "ttft_s": 0.5, "engine": "?"}
    zero = {"cpu-01": _counters(0, 0, 0), "cpu-02": _counters(0, 0, 0)}
    return bench.summarize_replay([turn], zero, {"cpu-01": _counters(hits, queries, 1), "cpu-02": _counters(0, 0, 0)})


def test_the_ceiling_bounds_the_ratio_any_policy_could_reach(bench):
    """One run, two concurrency levels: at 1 the ceiling / round_robin is below the target (so it
    is unreachable there), at 4 it is above it."""
    figures = {"meta": {}, "concurrency": [1, 4], "problems": [], "notes": [],
               "policies": {"round_robin": {"served_by": "HAProxy",
                                            "replays": {"1": _replay(bench, 50, 100), "4": _replay(bench, 30, 100)}},
                            "cache_aware": {"served_by": "vllm-router",
                                            "replays": {"1": _replay(bench, 68, 100), "4": _replay(bench, 60, 100)}}},
               "ceiling": {"served_by": "cpu-01, directly",
                           "replays": {"1": _replay(bench, 70, 100), "4": _replay(bench, 66, 100)}}}
    figures["derived"] = derived = bench.derive(figures)
    one, four = derived["by_concurrency"]["1"], derived["by_concurrency"]["4"]
    assert one["best_ratio"] == pytest.approx(1.4) and one["target_reachable"] is False
    assert one["hit_ratio"] == pytest.approx(1.36) and one["hit_target_met"] is False
    assert four["best_ratio"] == pytest.approx(2.2) and four["target_reachable"] is True
    assert four["hit_target_met"] is True
    assert derived["hit_ratio"] == one["hit_ratio"]  # the first level is the headline
    rows = bench.policy_rows(figures)
    assert [r[:3] for r in rows] == [["round_robin", "HAProxy", "1"], ["cache_aware", "vllm-router", "1"],
                                     [bench.CEILING, "cpu-01, directly", "1"], ["round_robin", "HAProxy", "4"],
                                     ["cache_aware", "vllm-router", "4"], [bench.CEILING, "cpu-01, directly", "4"]]
    page = bench.render_doc(figures)
    assert "| ceiling (one engine, no router) | cpu-01, directly | 1 | 70.0 % | 70 / 100 |" in page
    assert "the best ratio any policy could reach here is 1.40" in page
    assert "target is unreachable on this workload with two replicas" in page
    assert "2.20 (ceiling / `round_robin`), so the 1.5 times target is within reach" in page
    report = bench.format_report(figures)
    assert "4 conversations at a time" in report and "unreachable" in report


def test_a_run_before_concurrency_is_rendered_at_one(bench):
    """figures.json of a run before --concurrency: one `replay` per policy, no ceiling."""
    figures = {"meta": {}, "problems": [], "notes": [],
               "policies": {"round_robin": {"served_by": "HAProxy", "replay": _replay(bench, 50, 100)},
                            "cache_aware": {"served_by": "vllm-router", "replay": _replay(bench, 69, 100)}}}
    figures["derived"] = bench.derive(figures)
    assert figures["derived"]["hit_ratio"] == pytest.approx(1.38)
    assert figures["derived"]["by_concurrency"]["1"]["best_ratio"] is None
    assert "| cache_aware | vllm-router | 1 | 69.0 % |" in bench.render_doc(figures)
