"""The engine stand-in on Ray (lab/fixtures/repos/vllm/vllm/executor/ray_utils.py): which
clusters hold a spanning model's ranks. The lab test (tests/lab/ray) runs it on a real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

VLLM_SRC = Path(__file__).resolve().parents[2] / "lab" / "fixtures" / "repos" / "vllm"


def placement(nodes, tp, pp):
    code = ("import json, sys; from vllm.executor.ray_utils import check_placement; "
            "a = json.load(sys.stdin); print(json.dumps(check_placement(a['nodes'], a['tp'], a['pp'], 'GPU')))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps({"nodes": nodes, "tp": tp, "pp": pp}),
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(VLLM_SRC)})
    return json.loads(out.stdout)


TWO = [{"address": "127.0.0.2", "devices": 2}, {"address": "127.0.0.3", "devices": 2}]


def test_every_stage_on_a_node_of_its_own_fits():
    assert placement(TWO, 2, 2) is None


@pytest.mark.parametrize("nodes, needle", [
    (TWO[:1], "needs 4 (tensor_parallel_size 2 x pipeline_parallel_size 2), the Ray cluster has 2 on 1 node(s)"),
    ([{"address": "127.0.0.2", "devices": 3}, {"address": "127.0.0.3", "devices": 1}],
     "Tensor parallel size 2 needs 2 GPUs on each of 2 nodes (one pipeline stage per node), but only 1 node(s)"),
])
def test_a_cluster_short_of_a_member_or_devices_is_refused(nodes, needle):
    assert needle in placement(nodes, 2, 2)
