"""docs/operations/bench.md's two command lines, run as written against the MetaX node of the lab
this scenario converged (the fleet scenario's, in CI): seed 000's multi-turn chat test on every
chat model of the MetaX group, with the page's secrets file, then two of its conversations on one
model with a cap on the answers, as JSON.

Run by molecule/metax/verify.yml from the controller, which names the lab's inventory in
VLLM_FLEET_LAB_INVENTORY and the MetaX group's chat models in VLLM_FLEET_BENCH_MODELS (comma
separated); skipped without them (the verify checks that it passed, nothing skipped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.doc_commands import checkout_view, run_doc_command, view_dir

#: The key the page's `--secrets secrets.yml` gives: sent to the engines, printed nowhere.
KEY = "sk-bench-page-5f3a9c0e7d21b864"
#: The page's second line: conversations 3 and 4 of seed 000 (three and two turns), 64 tokens at most each.
TURNS = {3: 3, 4: 2}


@pytest.fixture(scope="module")
def inventory() -> Path:
    if not os.environ.get("VLLM_FLEET_LAB_INVENTORY") or not os.environ.get("VLLM_FLEET_BENCH_MODELS"):
        pytest.skip("run by molecule/metax/verify.yml, which gives VLLM_FLEET_LAB_INVENTORY and "
                    "VLLM_FLEET_BENCH_MODELS")
    inventory = Path(os.environ["VLLM_FLEET_LAB_INVENTORY"])
    view = checkout_view(inventory, view_dir(inventory))
    (view / "secrets.yml").write_text(yaml.safe_dump({"fleet_serve_api_key": KEY}))
    yield inventory
    (view / "secrets.yml").unlink()


def test_the_whole_test_on_the_metax_group_as_written(inventory):
    proc = run_doc_command("docs/operations/bench.md", "-l metax-nodes", "--secrets secrets.yml",
                           inventory=inventory, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert KEY not in out
    table = [line.split() for line in proc.stdout.splitlines() if line.startswith("metax-")]
    models = sorted(os.environ["VLLM_FLEET_BENCH_MODELS"].split(","))
    assert sorted(row[1] for row in table) == models, proc.stdout[-3000:]
    # Every model answered all thirteen turns of the seed's four conversations, with characters.
    assert all(row[2] == "13" and int(row[3]) > 0 for row in table), proc.stdout[-3000:]
    result = json.loads((view_dir(inventory) / "vllm-fleet-bench" / "bench.json").read_text())
    assert sorted(m["model"] for m in result["models"]) == models
    assert all(m["error"] is None and m["turns"] == 13 for m in result["models"]), result


def test_two_conversations_of_one_model_as_json_as_written(inventory):
    proc = run_doc_command("docs/operations/bench.md", "--model qwen3-4b", inventory=inventory, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(proc.stdout)
    (model,) = result["models"]
    assert model["model"] == "qwen3-4b" and model["error"] is None
    conversations = [turn["conversation"] for turn in model["turn_figures"]]
    assert {c: conversations.count(c) for c in set(conversations)} == TURNS
    assert model["turns"] == sum(TURNS.values())
    assert 0 < model["output_tokens"] <= 64 * model["turns"]
