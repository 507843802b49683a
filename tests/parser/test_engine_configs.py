"""vLLM's cross-field checks of the options the inventory sets, by vLLM's own config classes (issue 33, item 6).

For each pinned vLLM release of the example inventory, a catalogue of launch profiles in the
example's shape (a profile of the kind of the host's first model, which the model and the
group's defaults no longer override) is resolved and rendered as the roles do; the release's
own SchedulerConfig, LoRAConfig and ParallelConfig judge the rendered line (engine_configs.py,
run inside the release's parser environment), and validation judges the inventory
(vllm_fleet/validation/engine.py). They must agree on every profile, and the cross-field-invalid
ones must be refused by both. The whole engine config (`create_engine_config`) is not built: it
needs the model's own configuration (a download) and the node's devices (engine_configs.py).

One checker process per release (~8 s of vLLM imports); the environments are argcheck's.
Run: pytest -m parser tests/parser/test_engine_configs.py
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import GROUP_OF, example_hosts
from vllm_fleet.models import node_models
from vllm_fleet.render import serve_argv
from vllm_fleet.validation import validate_host
from vllm_fleet.validation.serve import serve_options, serve_release
from vllm_fleet_dev import argcheck

pytestmark = [pytest.mark.slow, pytest.mark.parser]

INNER = Path(__file__).resolve().parent / "engine_configs.py"
#: What validation says of a rule of vLLM's engine configs (vllm_fleet/validation/engine.py).
ENGINE_RULE = "which vLLM refuses at start"

#: (id, serve of the launch profile, refused by vLLM's config classes). Each is judged on every
#: pinned release that has all of its options; the rest of the line is the example's.
PROFILES = [
    ("batch-below-length-chunked-off", {"max_model_len": 8192, "max_num_batched_tokens": 2048,
                                        "enable_chunked_prefill": False}, True),
    ("batch-below-length-human-forms", {"max_model_len": "8k", "max_num_batched_tokens": "2K",
                                        "enable_chunked_prefill": False}, True),
    ("batch-equal-length-chunked-off", {"max_model_len": 8192, "max_num_batched_tokens": 8192,
                                        "enable_chunked_prefill": False}, False),
    ("batch-below-length-chunked-on", {"max_model_len": 8192, "max_num_batched_tokens": 2048}, False),
    ("batch-below-seqs", {"max_num_batched_tokens": 128, "max_num_seqs": 256}, True),
    ("batch-above-seqs", {"max_num_batched_tokens": 4096, "max_num_seqs": 256}, False),
    ("cpu-loras-below-loras", {"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, True),
    ("cpu-loras-below-default-loras", {"enable_lora": True, "max_cpu_loras": 1, "max_loras": 2}, True),
    ("cpu-loras-above-loras", {"enable_lora": True, "max_loras": 2, "max_cpu_loras": 8}, False),
    ("cpu-loras-without-lora", {"max_loras": 4, "max_cpu_loras": 2}, False),
    ("dp-local-above-dp", {"data_parallel_size_local": 2}, True),
    ("dp-local-within-dp", {"data_parallel_size": 1, "data_parallel_size_local": 1}, False),
    ("partial-prefills-chunked-off", {"max_num_partial_prefills": 2, "enable_chunked_prefill": False}, True),
    ("long-partial-above-partial", {"max_long_partial_prefills": 2}, True),
    ("long-partial-within-partial", {"max_num_partial_prefills": 4, "max_long_partial_prefills": 2}, False),
    ("threshold-above-length-partial", {"max_num_partial_prefills": 2, "max_model_len": 1024,
                                        "long_prefill_token_threshold": 2048}, True),
    ("active-above-seqs", {"max_num_active_seqs": 512, "max_num_seqs": 256}, True),
]
#: Where the rule depends on the release: (id, release) -> refused there.
BY_RELEASE = {("threshold-above-length", "0.32.0+cpu"): True}
PROFILES.append(("threshold-above-length", {"max_model_len": 1024, "long_prefill_token_threshold": 2048}, False))


def _hosts_by_release() -> dict[str, str]:
    """One example host per pinned release (its first model is the profile's kind)."""
    out: dict[str, str] = {}
    for host, host_vars in sorted(example_hosts().items()):
        out.setdefault(serve_release(host_vars), host)
    return out


HOSTS = _hosts_by_release()


def _with_profile(host: str, serve: dict) -> dict:
    """The host's variables with `serve` as the launch profile of its first model's kind, those
    options taken out of the group's defaults and every model's own serve (so the profile's win)."""
    hv = copy.deepcopy(example_hosts()[host])
    hv["group_names"] = ["fleet", GROUP_OF[host]]
    kind = hv["fleet_models"][0]["kind"]
    profiles = hv.setdefault("fleet_launch_profiles", {}) or {}
    hv["fleet_launch_profiles"] = profiles
    profiles.setdefault(kind, {}).setdefault("serve", {}).update(serve)
    for mapping in [hv.get("fleet_serve_defaults") or {}] + [m.get("serve") or {} for m in hv["fleet_models"]]:
        for key in serve:
            mapping.pop(key, None)
    return hv


def _rendered(host: str, host_vars: dict) -> list[str]:
    """The first model's `vllm serve` line as the roles render it, the fork's own keys taken out."""
    models, problems = node_models(host_vars, host)
    assert problems == [], problems
    model = models[0] if models[0]["port"] is not None else {**models[0], "port": 8000}
    fork = ((host_vars.get("fleet_matrix") or {}).get("vllm") or {}).get("fork_compilation_keys") or []
    return argcheck.strip_fork_keys(serve_argv(model), fork)[0]


def _vllm_verdicts(release: str, argvs: list[list[str]]) -> list[dict]:
    """engine_configs.py's result per line, in `release`'s parser environment."""
    env_dir = argcheck.prepare(release)
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-engine-") as tmp:
        inp, out = Path(tmp) / "argvs.json", Path(tmp) / "report.json"
        inp.write_text(json.dumps(argvs))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_", "PIP_"))}
        env.update(argcheck._CHECKER_ENV, HOME=tmp, VLLM_CACHE_ROOT=str(Path(tmp) / "vllm-cache"))
        proc = subprocess.run([str(env_dir / "venv" / "bin" / "python"), "-I", str(INNER), argcheck.__file__,
                               str(inp), str(out)], capture_output=True, text=True, env=env, cwd=tmp, timeout=900)
        assert proc.returncode == 0 and out.exists(), (proc.stdout + proc.stderr)[-3000:]
        return json.loads(out.read_text())["results"]


def _cases(release: str) -> list[tuple[str, dict, bool]]:
    options = serve_options()[release]["options"]
    return [(name, serve, BY_RELEASE.get((name, release), refused)) for name, serve, refused in PROFILES
            if all(key in options for key in serve)]


@pytest.fixture(scope="module", params=sorted(HOSTS))
def release_verdicts(request):
    """(release, [(case id, vLLM's result, validation's engine problems, expected refusal)])."""
    release = request.param
    host = HOSTS[release]
    cases = [("example", {}, False)] + _cases(release)
    lines, ours = [], []
    for _name, serve, _refused in cases:
        host_vars = _with_profile(host, serve) if serve else {**example_hosts()[host],
                                                               "group_names": ["fleet", GROUP_OF[host]]}
        lines.append(_rendered(host, host_vars))
        problems, _models = validate_host(host, host_vars)
        ours.append([p for p in problems if ENGINE_RULE in p])
    verdicts = _vllm_verdicts(release, lines)
    return release, [(name, verdict, mine, refused)
                     for (name, _serve, refused), verdict, mine in zip(cases, verdicts, ours, strict=True)]


def test_vllms_config_classes_and_validation_refuse_the_same_profiles(release_verdicts):
    release, results = release_verdicts
    disagreements = []
    for name, verdict, mine, refused in results:
        assert "parse_error" not in verdict, (release, name, verdict)  # each option is valid alone
        vllm_refused = bool(verdict["errors"])
        if vllm_refused != bool(mine) or vllm_refused != refused:
            disagreements.append((name, f"vLLM: {verdict['errors']}", f"validation: {mine}", f"expected: {refused}"))
    assert not disagreements, (release, disagreements)
    assert any(refused for _n, _v, _m, refused in results), release  # the catalogue says no somewhere


def test_a_cross_field_invalid_profile_is_refused_naming_host_model_and_option(release_verdicts):
    release, results = release_verdicts
    host = HOSTS[release]
    name, _verdict, mine, _refused = next(r for r in results if r[0] == "batch-below-seqs")
    assert mine and all(p.startswith(f"host {host}: model ") for p in mine), mine
    assert "serve.max_num_batched_tokens = 128 (an integer)" in mine[0] and "accepted: " in mine[0], (name, mine)
