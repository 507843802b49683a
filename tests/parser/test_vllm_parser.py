"""Every `vllm serve` line the example inventory renders is accepted by the pinned release's own parser.

For each host of inventories/example, its models are resolved (`resolve_models`) and
rendered (`serve_argv`) exactly as the roles do, and vllm_fleet_dev.argcheck parses them with
the real parser of the vLLM release its vendor group pins (`fleet_matrix.vllm.release`,
else `fleet_matrix.vllm.version`). A vendor fork's own --compilation-config keys, which
the group declares (`fleet_matrix.vllm.fork_compilation_keys`: Moore Threads'
`simple_cuda_graph`), are taken out first and reported as unchecked; nothing else is.
Negative tests prove the checker can say no, with the real parser's words. The seed-flag
tests record what the pristine releases make of the flags the vendor guides (seeds 001
and 004) use.

All command lines of one release are parsed in one checker process (one ~8 s import).
The first run for a release builds its environment (1.5-2.5 min and ~4 GB, see argcheck):
on the 2-core build machine the whole module took 6 min with an empty cache (three
releases, 14 GB) and ~32 s with a warm one. Tests skip only when this machine offers no
CPU torch, and say so.

Run: pytest -m parser tests/parser   (VLLM_FLEET_CACHE chooses the cache, default /var/cache/vllm-fleet)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, example_hosts
from vllm_fleet.exit_codes import EXIT_INVALID
from vllm_fleet.models import resolve_models
from vllm_fleet.render import serve_argv
from vllm_fleet_dev import argcheck

pytestmark = [pytest.mark.slow, pytest.mark.parser]


def pinned_release(host_vars: dict) -> str:
    """The vLLM release whose parser judges this host's command lines."""
    vllm = (host_vars.get("fleet_matrix") or {}).get("vllm") or {}
    # Ascend pins a development commit and names the release separately; others pin the release.
    release = vllm.get("release") or vllm.get("version")
    assert release, "fleet_matrix.vllm has neither `release` nor `version`"
    # CPU nodes run vLLM's CPU build of the release, whose parser is judged in that build.
    cpu = (host_vars.get("fleet_accelerator") or {}).get("vendor") == "cpu"
    return f"{release}+cpu" if cpu else str(release)


def fork_keys(host_vars: dict) -> list[str]:
    """The --compilation-config keys the group's vLLM fork adds to its release."""
    vllm = (host_vars.get("fleet_matrix") or {}).get("vllm") or {}
    return list(vllm.get("fork_compilation_keys") or [])


def inventory_lines() -> list[tuple[str, str, list[str], list[str]]]:
    """(test id, release, argv as the release's parser gets it, fork keys taken out) for every model of every
    example host."""
    lines = []
    for host, hv in sorted(example_hosts().items()):
        release = pinned_release(hv)
        models, problems = resolve_models(
            hv.get("fleet_models"), hv.get("fleet_accelerator"),
            serve_defaults=hv.get("fleet_serve_defaults"), serve_env=hv.get("fleet_serve_env"),
            launch_profiles=hv.get("fleet_launch_profiles"), base_port=hv.get("fleet_serve_base_port"))
        assert problems == [], f"{host}: {problems}"
        for model in models:
            if model["port"] is None:
                # A disabled model gets no port; its flags must still parse once it is enabled again.
                model = {**model, "port": hv.get("fleet_serve_base_port") or 8000}
            argv, unchecked = argcheck.strip_fork_keys(serve_argv(model), fork_keys(hv))
            lines.append((f"{host}/{model['name']}@{release}", release, argv, unchecked))
    return lines


INVENTORY = inventory_lines()
PINNED = sorted({release for _, release, _, _ in INVENTORY})
SAMPLE = {release: argv for _, release, argv, _ in reversed(INVENTORY)}  # one rendered line per release
MUSA = [(i, r, a, u) for i, r, a, u in INVENTORY if i.startswith("musa-")]

# Seed 001 (Ascend, vLLM 0.11.2), as its guide writes it.
SEED_001 = ["vllm", "serve", "/model/GPT-OSS", "--served-model-name", "gpt-oss-120b-bf16",
            "--gpu-memory-utilization", "0.95", "--tensor-parallel-size", "8", "--max-model-len", "16384",
            "--compilation_config",
            '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1024,512,256,128,64,16,4,2,1]}']
# Seed 004 (Moore Threads AIModule 1.4.2, "based on vLLM 0.16.0"): each flag of its guide on its own.
SEED_004_MUSA_GRAPH = ["--compilation-config", '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1]}']
SEED_004_FLAGS = {
    "host": ["--host", "127.0.0.1"],
    "tp-short": ["-tp", "1"],
    "gpu_memory_utilization": ["--gpu_memory_utilization", "0.7"],
    "dtype": ["--dtype", "bfloat16"],
    "block_size": ["--block_size", "32"],
    "num-gpu-blocks-override": ["--num-gpu-blocks-override", "512"],
    "max-model-len": ["--max-model-len", "16384"],
    "max-num-seqs": ["--max-num-seqs", "1"],
    "swap_space": ["--swap_space", "0"],
    "no-enable-prefix-caching": ["--no-enable-prefix-caching"],
    "trust-remote-code": ["--trust-remote-code"],
    "quantization": ["--quantization", "gptq"],
    "runner-pooling-embed": ["--runner", "pooling", "--convert", "embed"],
    "runner-pooling-classify": ["--runner", "pooling", "--convert", "classify"],
    "enforce-eager": ["--enforce-eager"],
    "limit-mm-per-prompt": ["--limit-mm-per-prompt", '{"image":1}'],
    "hf-overrides": ["--hf-overrides", '{"text_config":{"tie_word_embeddings":false}}'],
    "capture-sizes-only": ["--compilation-config", '{"cudagraph_capture_sizes": [1]}'],
}
SEED_BASE = ["vllm", "serve", "/home/models/m", "--port", "8000"]
BOGUS = ["--bogus-flag", "1"]
BAD_JSON = ["--compilation-config", '{"cudagraph_mode": "PIECEWISE",']
# The MUSA Graph config with a key that is neither 0.16.0's nor declared as the fork's.
MUSA_GRAPH_AND_TYPO = ["--compilation-config",
                       '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1], "cudagraph_capture_size": [1]}']
# Seed 003 (NVIDIA, vLLM 0.11.2): its flags and LoRA adapters ("one model, many roles"),
# as vllm-fleet renders them from a model's lora_adapters, and what the parser refuses.
SEED_003 = ["vllm", "serve", "/home/models/gpt-oss-20b", "--served-model-name", "gpt-oss-20b",
            "--enable-prefix-caching", "--max-num-seqs", "256", "--max-model-len", "32768",
            "--enable-lora", "--lora-modules", "support=/home/models/lora/support", "coding=/home/models/lora/coding",
            "--max-loras", "2", "--max-lora-rank", "64"]
SEED_003_LORA_JSON = ["--enable-lora", "--lora-modules",
                      '{"name": "support", "path": "/home/models/lora/support", "base_model_name": "gpt-oss-20b"}']
SEED_003_LORA_WITHOUT_ENABLE = ["--lora-modules", "support=/home/models/lora/support"]
SEED_003_BAD_RANK = ["--enable-lora", "--max-lora-rank", "24"]
SEED_003_LORA_WITHOUT_PATH = ["--enable-lora", "--lora-modules", "support"]

# Every line each release is asked about, so that each release is one checker process.
WANTED: dict[str, list[list[str]]] = {}
for _, _release, _argv, _ in INVENTORY:
    WANTED.setdefault(_release, []).append(_argv)
for _release in PINNED:
    WANTED[_release] += [SAMPLE[_release] + BOGUS, SAMPLE[_release] + BAD_JSON]
WANTED.setdefault("0.11.2", []).extend([SEED_001, SEED_BASE + SEED_004_MUSA_GRAPH])
WANTED["0.11.2"].extend([SEED_003] + [SEED_BASE + flags for flags in (
    SEED_003_LORA_JSON, SEED_003_LORA_WITHOUT_ENABLE, SEED_003_BAD_RANK, SEED_003_LORA_WITHOUT_PATH)])
WANTED.setdefault("0.16.0", []).extend(
    [SEED_BASE + SEED_004_MUSA_GRAPH] + [SEED_BASE + flags for flags in SEED_004_FLAGS.values()]
    + [argcheck.strip_fork_keys(SEED_BASE + MUSA_GRAPH_AND_TYPO, ["simple_cuda_graph"])[0]])


@pytest.fixture(scope="session")
def verdict():
    """verdict(release, argv) -> the checker's {ok, error, warnings, dropped_keys} for that line."""
    results: dict[str, dict | BaseException] = {}

    def get(release: str, argv: list[str]) -> dict:
        if release not in results:
            lines = WANTED[release]
            try:
                found = argcheck.check(release, lines)
                results[release] = {json.dumps(a): r for a, r in zip(lines, found, strict=False)}
            except argcheck.TorchUnavailable as exc:
                results[release] = exc
            except argcheck.ArgcheckError as exc:
                # Remembered, so every test of this release fails with the reason instead of rebuilding.
                results[release] = exc
        outcome = results[release]
        if isinstance(outcome, argcheck.TorchUnavailable):
            pytest.skip(f"this machine cannot provide a CPU build of torch: {outcome}")
        if isinstance(outcome, BaseException):
            pytest.fail(f"the vllm {release} parser could not be prepared: {outcome}")
        return outcome[json.dumps(argv)]

    return get


@pytest.mark.parametrize("release,argv", [(r, a) for _, r, a, _ in INVENTORY], ids=[i for i, _, _, _ in INVENTORY])
def test_rendered_line_is_accepted_by_the_pinned_release(verdict, release, argv):
    result = verdict(release, argv)
    assert result["ok"], f"vLLM {release} rejects {argv}:\n{result['error']}"


@pytest.mark.parametrize("release,argv", [(r, a) for _, r, a, _ in INVENTORY], ids=[i for i, _, _, _ in INVENTORY])
def test_no_json_key_of_a_rendered_line_is_silently_dropped(verdict, release, argv):
    # Releases before 0.16 build CompilationConfig with pydantic's extra="ignore": a key they
    # do not know parses fine and does nothing.
    assert verdict(release, argv)["dropped_keys"] == []


@pytest.mark.parametrize("release", PINNED)
def test_unknown_flag_is_rejected(verdict, release):
    result = verdict(release, SAMPLE[release] + BOGUS)
    assert not result["ok"]
    assert result["error"] == "vllm: error: unrecognized arguments: --bogus-flag 1"


@pytest.mark.parametrize("release", PINNED)
def test_malformed_compilation_config_is_rejected(verdict, release):
    result = verdict(release, SAMPLE[release] + BAD_JSON)
    assert not result["ok"]
    # The alias is -O up to 0.11 and -cc from 0.12; the message is pydantic's.
    assert result["error"].startswith("vllm serve: error: argument --compilation-config/-"), result["error"]
    assert "validation error for CompilationConfig" in result["error"]
    assert "Invalid JSON" in result["error"]


def test_seed_001_line_is_accepted_by_0_11_2(verdict):
    # --compilation_config: FlexibleArgumentParser folds underscores in flag names to dashes.
    result = verdict("0.11.2", SEED_001)
    assert result["ok"], result["error"]
    assert result["dropped_keys"] == []


@pytest.mark.parametrize("name", sorted(SEED_004_FLAGS))
def test_seed_004_flag_is_accepted_by_pristine_0_16_0(verdict, name):
    result = verdict("0.16.0", SEED_BASE + SEED_004_FLAGS[name])
    assert result["ok"], result["error"]


def test_seed_004_musa_graph_key_is_rejected_by_pristine_0_16_0(verdict):
    # `simple_cuda_graph` exists only in the Moore Threads fork; pristine 0.16.0 forbids unknown keys.
    result = verdict("0.16.0", SEED_BASE + SEED_004_MUSA_GRAPH)
    assert not result["ok"]
    assert result["error"].startswith("vllm serve: error: argument --compilation-config/-cc: "
                                      "1 validation error for CompilationConfig\nsimple_cuda_graph\n"
                                      "  Unexpected keyword argument"), result["error"]


def test_every_musa_model_of_the_example_is_checked():
    # Every model of seed 004 in the example inventory, enabled or not, has its line checked.
    names = {i.split("/")[1].split("@")[0] for i, _, _, _ in MUSA}
    assert names == {m["name"] for m in example_hosts()["musa-01"]["fleet_models"]}
    assert len(names) == 11 and all(r == "0.16.0" for _, r, _, _ in MUSA)


@pytest.mark.parametrize("test_id,argv,unchecked", [(i, a, u) for i, _, a, u in MUSA], ids=[i for i, _, _, _ in MUSA])
def test_musa_lines_leave_out_only_the_forks_graph_key(test_id, argv, unchecked):
    config = argv[argv.index("--compilation-config") + 1] if "--compilation-config" in argv else None
    if config is None:
        # Pooling models run eagerly, without MUSA Graph: nothing of the fork's to leave out.
        assert unchecked == [] and "--enforce-eager" in argv
    else:
        assert unchecked == ["--compilation-config.simple_cuda_graph"]
        assert json.loads(config) == {"cudagraph_capture_sizes": [1]}  # still the parser's to judge


def test_an_unknown_key_next_to_the_forks_is_still_rejected_by_0_16_0(verdict):
    argv, unchecked = argcheck.strip_fork_keys(SEED_BASE + MUSA_GRAPH_AND_TYPO, ["simple_cuda_graph"])
    assert unchecked == ["--compilation-config.simple_cuda_graph"]
    result = verdict("0.16.0", argv)
    assert not result["ok"]
    assert result["error"].startswith("vllm serve: error: argument --compilation-config/-cc: 1 validation error for "
                                      "CompilationConfig\ncudagraph_capture_size\n  Unexpected keyword argument"), \
        result["error"]


def test_seed_004_musa_graph_key_is_dropped_silently_by_0_11_2(verdict):
    result = verdict("0.11.2", SEED_BASE + SEED_004_MUSA_GRAPH)
    assert result["ok"], result["error"]
    assert result["dropped_keys"] == ["--compilation-config.simple_cuda_graph"]


def test_cli_reports_json_and_exit_status(verdict, tmp_path):
    release = PINNED[0]
    verdict(release, SAMPLE[release])  # skips (no CPU torch) or fails (no environment) like the rest
    lines = [SAMPLE[release], SAMPLE[release] + BOGUS]
    (tmp_path / "argvs.json").write_text(json.dumps(lines))
    proc = subprocess.run([sys.executable, "-m", "vllm_fleet_dev.argcheck", "--release", release, "--json",
                           str(tmp_path / "argvs.json")], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == EXIT_INVALID, proc.stderr  # a line refused (vllm_fleet.exit_codes)
    report = json.loads(proc.stdout)
    assert [r["ok"] for r in report] == [True, False]
    assert report[1]["argv"] == lines[1]
    assert report[1]["error"] == "vllm: error: unrecognized arguments: --bogus-flag 1"


def test_seed_003_line_with_lora_adapters_is_accepted_by_0_11_2(verdict):
    result = verdict("0.11.2", SEED_003)
    assert result["ok"], result["error"]
    assert verdict("0.11.2", SEED_BASE + SEED_003_LORA_JSON)["ok"]


def test_nvidia_inventory_line_carries_the_adapters():
    (argv,) = [a for i, _, a, _ in INVENTORY if i.startswith("nvidia-01/")]
    assert "--enable-lora" in argv
    assert argv[argv.index("--lora-modules") + 1].startswith("gpt-oss-20b-support=/home/models/lora/")


def test_lora_modules_without_enable_lora_pass_the_parser(verdict):
    # vLLM refuses them only at start-up ("LoRA is not enabled"), after loading the model:
    # that is why the inventory's validation adds --enable-lora and rejects enable_lora: false.
    assert verdict("0.11.2", SEED_BASE + SEED_003_LORA_WITHOUT_ENABLE)["ok"]


def test_lora_rank_outside_the_release_choices_is_rejected(verdict):
    result = verdict("0.11.2", SEED_BASE + SEED_003_BAD_RANK)
    assert not result["ok"]
    assert result["error"] == ("vllm serve: error: argument --max-lora-rank: invalid choice: 24 "
                               "(choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)")


def test_lora_module_without_a_path_is_rejected(verdict):
    result = verdict("0.11.2", SEED_BASE + SEED_003_LORA_WITHOUT_PATH)
    assert not result["ok"]
    assert result["error"] == "vllm serve: error: Invalid JSON format for --lora-modules: support"
