"""scripts/bench-distribution: the projection, the targets and the page it writes, from figures
(no servers: the measuring runs are the script's own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


@pytest.fixture(scope="module")
def bench():
    return load_module(ROOT / "scripts" / "bench-distribution", "bench_distribution")


def run(mode, nodes, wall, mirror, peers, waves=None, size=256 * MIB):
    return {"mode": mode, "nodes": nodes, "size": size, "wall_s": wall, "wave_s": waves or [wall],
            "batches": [nodes] if mode == "mirror" else [1, 1, 2, 4, 8][:len(waves or [1])],
            "mirror_bytes": mirror, "peer_bytes": peers, "failed": [], "blamed": [], "bad_copies": []}


def report(waves_wall=72.0):
    runs = [run("mirror", 16, 256.0, 16 * 256 * MIB, 0),
            run("waves", 16, waves_wall, 384 * MIB, 3712 * MIB, waves=[16.0, 8.0, 16.0, 16.0, waves_wall - 56])]
    return {"date": "2026-12-05", "machine": "test", "size": 256 * MIB, "rate": 16 * MIB, "copy_s": 16.0, "runs": runs,
            "fault": {**run("waves", 4, 50, 0, 0), "corrupted": "node-01", "blamed": ["node-01"]},
            "again": {**run("waves", 16, 0.1, 0, 0), "needing": 0}}


def test_projection_counts_batches_and_the_measured_cost_of_a_wave(bench):
    projected = bench.projection(16.0, report()["runs"])
    # The second wave (8 s, half a copy where only the serving side is capped) is left out.
    assert projected["per_wave_copies"] == 1.0
    row = next(r for r in projected["rows"] if r["nodes"] == 100 and r["gbps"] == 10)
    # 240 GB at 10 Gb/s is 192 s a copy: 100 copies from the mirror, 8 batches in waves.
    assert row["mirror_s"] == pytest.approx(19200) and row["waves"] == 8 and row["waves_s"] == pytest.approx(8 * 192)


def test_targets_are_met_or_missed_by_the_figures(bench):
    met = report()
    met["projection"] = bench.projection(16.0, met["runs"])
    assert all(ok for _, ok in bench.targets(met))
    missed = report(waves_wall=100.0)
    assert not dict(bench.targets(missed))["16 nodes: waves take 0.39 of all-from-mirror's wall time (at most 1/3)"]
    page = bench.render(met)
    assert page.startswith("# Model distribution") and "| 16 | waves | 1+1+2+4+8 | 72.0 s |" in page
    assert "- met: a second run over nodes that hold the revision moved 0 bytes (0)" in page
