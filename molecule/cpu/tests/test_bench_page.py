"""docs/performance.md's `vllm-fleet bench` line, run as written against the real vLLM CPU engine of
the lab this scenario converged: seed 000's four conversations (thirteen turns, each answer capped
at 8 tokens; the longest, conversation 2, ends near 1100 of the tiny chat model's 4096 tokens of
context) from the controller, the key from the scenario's secrets file, the listen address from
the same extra variable as the scenario's run, the seed's smallest model beside it, the files in
the page's /tmp/bench (a directory of this test's). scripts/bench-chat runs the same line for the
page's figures.

Run by molecule/cpu/verify.yml from the controller, which names the lab's inventory in
VLLM_FLEET_LAB_INVENTORY and the engine in VLLM_FLEET_ENGINE_URL and VLLM_FLEET_ENGINE_KEY (its
metrics); skipped without them (the verify checks that nothing was skipped)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.doc_commands import ROOT, run_doc_command

ENV = ("VLLM_FLEET_LAB_INVENTORY", "VLLM_FLEET_ENGINE_URL", "VLLM_FLEET_ENGINE_KEY")
#: The lab's chat model (lab/inventory/cpu-models.jinja) and the seed model the page puts beside it.
MODEL, SEED_MODEL = "tiny-chat", "Qwen/Qwen3-0.6B-GPTQ-Int8"
MAX_TOKENS = 8
PNG = b"\x89PNG\r\n\x1a\n"


def prefix_cache(url: str, key: str) -> tuple[float, float]:
    """The engine's prefix cache hits and queries (tokens), from its own counters."""
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()

    def counter(name: str) -> float:
        found = re.findall(rf"(?m)^vllm:{name}\{{[^}}]*\}} (\S+)", text)
        return float(found[0]) if found else 0.0

    return counter("prefix_cache_hits_total"), counter("prefix_cache_queries_total")


def test_seed_000s_chat_test_on_the_real_engine_as_the_page_writes_it(tmp_path):
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        pytest.skip(f"run by molecule/cpu/verify.yml, which sets {', '.join(missing)}")
    url, key = os.environ["VLLM_FLEET_ENGINE_URL"], os.environ["VLLM_FLEET_ENGINE_KEY"]
    inventory = Path(os.environ["VLLM_FLEET_LAB_INVENTORY"])
    out = tmp_path / "bench"  # the page's /tmp/bench, for the run alone
    out.mkdir()
    # The page's secrets file is the scenario's: the key the run gave the engine.
    assert yaml.safe_load((ROOT / "molecule/cpu/vars/secrets.yml").read_text())["fleet_serve_api_key"] == key
    hits_before, _ = prefix_cache(url, key)
    proc = run_doc_command("docs/performance.md", "vllm-fleet bench", "-l cpu-nodes", inventory=inventory,
                           timeout=900, mounts={"/tmp/bench": out})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:].replace(key, "***")
    assert key not in said
    result = json.loads((out / "bench.json").read_text())
    (model,) = result["models"]
    assert model["model"] == MODEL and model["error"] is None, model
    assert model["turns"] == 13
    assert sorted({t["conversation"] for t in model["turn_figures"]}) == [1, 2, 3, 4]
    # Characters counted are those of the streamed answers, which the history carried on.
    assert 0 < model["chars"] == sum(len(t["answer"]) for t in model["turn_figures"])
    assert 0 < model["output_tokens"] <= 13 * MAX_TOKENS
    # A turn whose answer streamed no text (random weights) has no time to first token.
    assert max(t["ttft_s"] for t in model["turn_figures"] if t["ttft_s"] is not None) < model["total_s"]
    # chars/s is the characters over the total time; both are rounded (0.1 chars/s, 1 ms), which on a test
    # of under a second moves the quotient by more than 0.1 (245 chars in 0.97 s: 252.6 or 252.7).
    assert model["chars"] / (model["total_s"] + 0.0005) - 0.05 <= model["chars_per_s"]
    assert model["chars_per_s"] <= model["chars"] / (model["total_s"] - 0.0005) + 0.05
    # Each turn resends the turn before: prefix caching (the chat model's serve) hits.
    hits, queries = prefix_cache(url, key)
    assert hits > hits_before and queries >= hits, (hits_before, hits, queries)
    # The table puts the seed's figures for its smallest model beside the lab's model, and draws the chart.
    (row,) = [line.split() for line in proc.stdout.splitlines() if line.startswith("cpu-01 ")]
    assert row[1] == MODEL and row[2] == "13" and SEED_MODEL in row, proc.stdout[-3000:]
    assert (out / "bench.png").read_bytes()[:8] == PNG
