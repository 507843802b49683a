"""scripts/bench-provision: the PLAY RECAP parser, the flags and the figures it derives
(no lab: the measuring runs are in the script's own runs)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "bench"


@pytest.fixture(scope="module")
def bench():
    return load_module(ROOT / "scripts" / "bench-provision", "bench_provision")


def test_recap_of_a_no_op_run_with_profile_tasks_after_it(bench):
    recap = bench.parse_recap((FIXTURES / "noop.log").read_text())
    assert sorted(recap) == ["ascend-01", "metax-01", "musa-01", "nvidia-01"]
    assert recap["ascend-01"]["changed"] == 0
    assert recap["ascend-01"]["ok"] > 0
    assert all(set(c) >= {"ok", "changed", "unreachable", "failed", "skipped"} for c in recap.values())
    assert bench.recap_problems(recap, "no-op") == []
    assert bench.changed_summary(recap) == "0"


def test_recap_reads_the_last_one_and_flags_changes_failures_and_nothing(bench):
    text = (FIXTURES / "noop.log").read_text() + """
PLAY RECAP *********************************************************************
nvidia-01                  : ok=5    changed=2    unreachable=0    failed=0    skipped=0    rescued=0    ignored=0
\x1b[0;31mnvidia-02\x1b[0m                  : ok=1    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0

Tuesday 01 December 2026  01:30:00 +0000 (0:00:00.100)       0:00:09.000 ******
"""  # noqa: E501 - Ansible's recap, as it prints it
    recap = bench.parse_recap(text)
    assert recap == {
        "nvidia-01": {"ok": 5, "changed": 2, "unreachable": 0, "failed": 0, "skipped": 0, "rescued": 0, "ignored": 0},
        "nvidia-02": {"ok": 1, "changed": 0, "unreachable": 1, "failed": 0, "skipped": 0, "rescued": 0, "ignored": 0},
    }
    assert bench.recap_problems(recap, "no-op") == ["no-op: nvidia-01 changed=2", "no-op: nvidia-02 unreachable=1"]
    assert bench.changed_summary(recap) == "!! nvidia-01 changed=2, nvidia-02 unreachable=1"
    assert bench.parse_recap("TASK [x]\nok: [a]\n") == {}
    assert bench.recap_problems({}, "no-op") == ["no-op: no PLAY RECAP in the output"]


def _run(wall, cpu=None):
    return {"wall_s": wall, "cpu_s": cpu if cpu is not None else wall / 2}


FIGURES = {
    "four_node": {"lab": "bench-4v", "vendors": ["ascend", "metax", "musa", "nvidia"],
                  "nodes": ["ascend-01", "metax-01", "musa-01", "nvidia-01"],
                  "converge": _run(600.0), "noop": _run(90.0), "bare": _run(6.0)},
    "per_vendor": {"ascend": {"converge": _run(200.0)}, "metax": {"converge": _run(240.0)},
                   "musa": {"converge": _run(150.0)}, "nvidia": {"converge": _run(120.0)}},
    # Rows out of order on purpose: the ratio is largest N over smallest N.
    "scaling": {"lab": "bench-scale", "vendor": "nvidia", "rows": [
        {"nodes": 16, "noop": _run(100.0, cpu=160.0)},
        {"nodes": 1, "noop": _run(20.0, cpu=20.0)},
        {"nodes": 4, "noop": _run(30.0, cpu=48.0)},
    ]},
}


def test_derived_ratios(bench):
    derived = bench.derive(FIGURES)
    assert derived["noop_over_bare"] == pytest.approx(15.0)
    assert derived["slowest_single_vendor"] == "metax"
    assert derived["converge_4_over_slowest_single"] == pytest.approx(2.5)
    assert derived["cpu_per_host_ratio"] == pytest.approx(10.0 / 20.0)
    assert derived["cpu_per_host_ratio_sizes"] == [1, 16]


def test_missing_figures_give_no_ratio_instead_of_an_error(bench):
    """A run stopped early (or --quick) still prints what it has."""
    none = {"noop_over_bare": None, "noop_full_over_bare": None, "noop_full_over_noop": None}
    assert bench.derive({}) == none
    partial = {"four_node": {"converge": _run(600.0), "noop": _run(90.0), "bare": _run(0.0)},
               "scaling": {"rows": [{"nodes": 1, "noop": _run(20.0)}, {"nodes": 4}]}}
    assert bench.derive(partial) == none
    assert "stopped early: boom" in bench.format_report({**partial, "error": "boom"})


def test_report_shows_every_figure_and_flags_a_run_that_was_not_a_no_op(bench):
    figures = {**FIGURES, "derived": bench.derive(FIGURES)}
    figures["four_node"] = {**FIGURES["four_node"], "noop": {
        **_run(90.0), "recap": {"ascend-01": {"changed": 0}, "nvidia-01": {"changed": 3}}}}
    report = bench.format_report(figures)
    assert re.search(r"no-op / bare \(wall\) +15\.00\n", report)
    assert "4-node converge / slowest single vendor (metax): 2.50" in report
    assert "cpu/host at N=16 / cpu/host at N=1: 0.50" in report
    assert "no-op changed= per host: ascend-01 0, nvidia-01 3   [!! NOT A NO-OP: nvidia-01 changed=3]" in report
    row_16 = next(line for line in report.splitlines() if line.strip().startswith("16 "))
    assert "160.0 s" in row_16 and "10.0 s" in row_16


def test_the_fast_path_figures_and_the_doc_page(bench):
    """The --full no-op beside the fast one, the main process apart from its workers, and the
    docs page with its verdicts against the targets."""
    four = {**FIGURES["four_node"], "noop": _run(4.0), "noop_full": _run(30.0), "bare": _run(2.5)}
    rows = [{"nodes": 1, "noop": {**_run(5.0, cpu=3.0), "cpu_main_s": 1.0, "cpu_forked_s": 2.0}},
            {"nodes": 16, "noop": {**_run(9.0, cpu=19.2), "cpu_main_s": 6.4, "cpu_forked_s": 12.8}}]
    figures = {"meta": {"started": "20261202T180000Z", "cpus": 2}, "four_node": four,
               "scaling": {"vendor": "nvidia", "rows": rows}}
    figures["derived"] = bench.derive(figures)
    assert figures["derived"]["noop_over_bare"] == pytest.approx(1.6)
    assert figures["derived"]["noop_full_over_bare"] == pytest.approx(12.0)
    report = bench.format_report(figures)
    assert re.search(r"--full no-op / bare \(wall\) +12\.00\n", report)
    row_16 = next(line for line in report.splitlines() if line.strip().startswith("16 "))
    assert row_16.split()[8:14] == ["1.2", "s", "0.4", "s", "0.8", "s"], row_16  # per host: all, main, forked
    doc = bench.render_doc(figures, report)
    assert "no-op / bare play on the 4-node lab: **1.60** (target <= 2: met)" in doc
    assert "at 16 nodes: **1.20 s** (target <= 1.5 s at 16: met)" in doc
    assert "20261202T180000Z" in doc and "2 CPU(s)" in doc
    assert report.rstrip() in doc
    figures["scaling"]["rows"][1]["noop"]["cpu_s"] = 40.0
    assert "(target <= 1.5 s at 16: NOT met)" in bench.render_doc(figures, report)


def test_sizes(bench):
    assert bench.parse_sizes("16,1,4,4") == [1, 4, 16]
    for bad in ("", "0,2", "1,x", "91"):
        with pytest.raises(Exception, match="--sizes"):
            bench.parse_sizes(bad)


def test_bare_play_is_facts_and_ping_on_the_fleet(bench):
    (play,) = yaml.safe_load(bench.BARE_PLAY)
    assert play["hosts"] == "fleet"
    assert play["gather_facts"] is True
    assert [next(iter(t.keys() - {"name"})) for t in play["tasks"]] == ["ansible.builtin.ping"]


def test_cpu_is_the_whole_tree_of_the_child_that_was_waited_for(bench, tmp_path):
    """user+sys of a child and of the grandchild it waits for (as ansible-playbook waits
    for its workers), whatever the machine's load: each burns 0.2 s of CPU."""
    burn = "import time\nwhile time.process_time() < 0.2: pass\n"
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {burn!r}])\n{burn}"
    result = bench.run_command([sys.executable, "-c", code], tmp_path / "burn.log")
    assert result["rc"] == 0
    assert result["cpu_s"] >= 0.4
    assert result["wall_s"] > 0
    assert (tmp_path / "burn.log").read_text().startswith("$ ")
