"""Seed 004's rules for Moore Threads nodes: each accepts the guide's own settings and
rejects a violating inventory before any change, with the numbers in the message.

The rules see the models resolved (group defaults < the kind's profile < the model's
own flags), so a flag can be broken at any of the three levels.
"""

from __future__ import annotations

import pytest

from vllm_fleet.validation import validate_hosts

HOST = "musa-01"


def problems_for(hosts):
    return [p for p in validate_hosts(hosts) if p.startswith(f"host {HOST}:")]


def group(example) -> dict:
    return example[HOST]


def model(example, name: str) -> dict:
    return next(m for m in group(example)["fleet_models"] if m["name"] == name)


def test_example_musa_group_is_valid(example):
    assert problems_for(example) == []


# ---- tensor and pipeline parallel size 1 only


@pytest.mark.parametrize("key", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_parallel_size_above_one_is_rejected(example, key):
    model(example, "gptq-qwen3-8b").setdefault("serve", {})[key] = 2
    problems = problems_for(example)
    assert (f"host {HOST}: model gptq-qwen3-8b: serve.{key} = 2; accepted: 1 (AIModule's vLLM-MUSA supports "
            "tensor and pipeline parallel size 1 only, so a model runs on one GPU)") in problems


def test_short_tp_spelling_from_the_guide_is_checked_too(example):
    # `-tp 2` written as the guide spells it, in the group defaults: every enabled model breaks.
    defaults = group(example)["fleet_serve_defaults"]
    del defaults["tensor_parallel_size"]
    defaults["tp"] = 2
    problems = [p for p in problems_for(example) if "serve.tensor_parallel_size = 2" in p]
    assert len(problems) == 8


def test_parallel_size_one_is_accepted(example):
    model(example, "gptq-qwen3-8b").setdefault("serve", {})["pipeline_parallel_size"] = 1
    assert problems_for(example) == []


# ---- block_size 32 and the KV-cache capacity


def test_block_size_other_than_32_is_rejected(example):
    group(example)["fleet_serve_defaults"]["block_size"] = 16
    problems = problems_for(example)
    assert (f"host {HOST}: model gptq-qwen3-8b: serve.block_size = 16; accepted: 32 (vLLM-MUSA's KV-cache block size)"
            in problems)


def test_block_override_without_block_size_is_rejected(example):
    model(example, "gptq-qwen3-8b").setdefault("serve", {})["block_size"] = None
    problems = problems_for(example)
    assert problems == [f"host {HOST}: model gptq-qwen3-8b: serve.num_gpu_blocks_override = 512 without "
                        "serve.block_size; accepted: block_size: 32 with it (the KV cache then holds "
                        "num_gpu_blocks_override x 32 tokens)"]


def test_max_model_len_beyond_kv_capacity_is_rejected_with_the_numbers(example):
    model(example, "gptq-qwen3-8b").setdefault("serve", {})["max_num_seqs"] = 2
    (problem,) = problems_for(example)
    assert problem == (f"host {HOST}: model gptq-qwen3-8b: max_model_len 16384 > num_gpu_blocks_override 512 x "
                       "block_size 32 / max_num_seqs 2 = 8192; accepted: max_model_len <= 8192, or more "
                       "num_gpu_blocks_override, or fewer max_num_seqs")


def test_kv_capacity_uses_vllms_default_max_num_seqs(example):
    group(example)["fleet_serve_defaults"].pop("max_num_seqs")
    problem = next(p for p in problems_for(example) if "model gptq-qwen3-8b:" in p)
    assert "max_num_seqs 256 (vLLM's default) = 64;" in problem


def test_kv_capacity_exactly_full_is_accepted(example):
    # The guide's DeepSeek-OCR-2: 8192 tokens with 2 sequences fill 512 blocks of 32 exactly.
    ocr = model(example, "deepseek-ocr-2")
    ocr["serve"]["max_num_seqs"] = 2
    assert problems_for(example) == []


def test_larger_cache_makes_room_for_more_sequences(example):
    served = model(example, "gptq-qwen3-8b").setdefault("serve", {})
    served.update(max_num_seqs=4, num_gpu_blocks_override=2048)
    assert problems_for(example) == []


# ---- no --enforce-eager with MUSA Graph


def test_enforce_eager_with_musa_graph_is_rejected(example):
    model(example, "gptq-qwen3-8b").setdefault("serve", {})["enforce_eager"] = True
    (problem,) = problems_for(example)
    assert problem == (f"host {HOST}: model gptq-qwen3-8b: serve.enforce_eager = true with "
                       "compilation_config.simple_cuda_graph = true (MUSA Graph): enforce_eager forces eager mode and "
                       "no graph is captured; accepted: one of the two (compilation_config: null for an eager model, "
                       "as the pooling models)")


def test_enforce_eager_without_graph_is_accepted(example):
    model(example, "gptq-qwen3-8b").setdefault("serve", {}).update(enforce_eager=True, compilation_config=None)
    assert problems_for(example) == []


def test_pooling_profile_leaves_graph_out_and_stays_eager(example):
    # The group's embedding profile removes the defaults' compilation_config; putting it back breaks the rule.
    # (The example's embedding and reranker profiles share one YAML anchor, so both models break.)
    group(example)["fleet_launch_profiles"]["embedding"]["serve"].pop("compilation_config")
    problems = problems_for(example)
    assert [p.split(":")[1].strip() for p in problems] == ["model bge-m3", "model bge-reranker-v2-m3"]
    assert all("serve.enforce_eager = true with compilation_config.simple_cuda_graph" in p for p in problems)


# ---- tilelang only on the validated MoE quantized models


def test_tilelang_on_a_dense_gptq_model_is_rejected(example):
    # The guide's own warning: Qwen3.6-27B-gptq-v1 is dense, not MoE.
    model(example, "qwen3.6-27b-gptq-v1")["env"] = {"VLLM_MUSA_ATTN": "tilelang"}
    (problem,) = problems_for(example)
    assert problem == (f"host {HOST}: model qwen3.6-27b-gptq-v1: env VLLM_MUSA_ATTN = 'tilelang' on a kind gptq "
                       "model with quantization gptq; accepted: only on the validated MoE quantized models (kind moe "
                       "with a quantization such as gptq: Qwen3-30B-A3B-GPTQ-Int4, gptq-Qwen3.6-35B-A3B-4bit-group); "
                       "elsewhere it can mismatch the KV-cache dtype, break MUSA Graph capture or run degraded")


def test_tilelang_on_an_unquantized_moe_model_is_rejected(example):
    model(example, "gptq-qwen3.6-35b-a3b-4bit-group").setdefault("serve", {})["quantization"] = None
    (problem,) = problems_for(example)
    assert "VLLM_MUSA_ATTN = 'tilelang' on a kind moe model with quantization none" in problem


def test_tilelang_in_the_group_environment_is_rejected_for_every_other_model(example):
    group(example).setdefault("fleet_serve_env", {})["VLLM_MUSA_ATTN"] = "tilelang"
    rejected = sorted(p.split(":")[1].strip() for p in problems_for(example) if "VLLM_MUSA_ATTN" in p)
    assert rejected == sorted(f"model {n}" for n in ["gptq-qwen3-8b", "qwen3.6-27b-gptq-v1",
                                                     "gptq-qwen3-vl-8b-instruct-4bit-group", "deepseek-ocr-2",
                                                     "bge-m3", "bge-reranker-v2-m3"])


def test_kv_reuse_on_another_moe_model_is_rejected(example):
    model(example, "gptq-qwen3.6-35b-a3b-4bit-group")["env"] = {"VLLM_MUSA_TILELANG_KVREUSE": "1"}
    (problem,) = problems_for(example)
    assert problem == (f"host {HOST}: model gptq-qwen3.6-35b-a3b-4bit-group: env VLLM_MUSA_TILELANG_KVREUSE = '1' on "
                       "gptq-Qwen3.6-35B-A3B-4bit-group; accepted: only with Qwen3-30B-A3B-GPTQ-Int4 (the model "
                       "AIModule validated it with)")


def test_kv_reuse_needs_tilelang(example):
    # As a dense gptq model it loses the moe profile's tilelang, but keeps its own KV reuse.
    model(example, "qwen3-30b-a3b-gptq-int4")["kind"] = "gptq"
    (problem,) = problems_for(example)
    assert "VLLM_MUSA_TILELANG_KVREUSE = '1' without VLLM_MUSA_ATTN = 'tilelang'; accepted: both" in problem


def test_kv_reuse_is_recognised_by_the_model_directory_too(example):
    qwen = model(example, "qwen3-30b-a3b-gptq-int4")
    qwen["source"] = {"type": "path"}
    assert problems_for(example) == []
    qwen["path"] = "/home/models/Qwen3-30B-A3B-Instruct"
    (problem,) = problems_for(example)
    assert "on Qwen3-30B-A3B-Instruct; accepted: only with Qwen3-30B-A3B-GPTQ-Int4" in problem


def test_kv_reuse_off_is_accepted_anywhere(example):
    model(example, "gptq-qwen3-8b")["env"] = {"VLLM_MUSA_TILELANG_KVREUSE": "0"}
    assert problems_for(example) == []


# ---- VLLM_MUSA_STARTUP_WARMUP=0 for pooling models


def test_pooling_model_without_warmup_off_is_rejected(example):
    group(example)["fleet_launch_profiles"]["reranker"]["env"] = {}
    (problem,) = problems_for(example)
    assert problem == (f"host {HOST}: model bge-reranker-v2-m3: a pooling model (serve.runner = 'pooling') with "
                       "VLLM_MUSA_STARTUP_WARMUP unset; accepted: VLLM_MUSA_STARTUP_WARMUP: \"0\" in its environment "
                       "(the kind's fleet_launch_profiles env or the model's env): the start-up warmup is known to "
                       "trouble pooling models")


def test_pooling_model_with_warmup_on_is_rejected(example):
    model(example, "bge-m3")["env"] = {"VLLM_MUSA_STARTUP_WARMUP": 1}
    (problem,) = problems_for(example)
    assert "model bge-m3: a pooling model (serve.runner = 'pooling') with VLLM_MUSA_STARTUP_WARMUP = '1'" in problem


def test_warmup_off_as_a_number_is_accepted(example):
    model(example, "bge-m3")["env"] = {"VLLM_MUSA_STARTUP_WARMUP": 0}
    assert problems_for(example) == []


# ---- host mode, matrix, scope


def test_container_mode_is_rejected(example):
    group(example)["fleet_deploy_mode"] = "container"
    assert problems_for(example) == [
        f"host {HOST}: fleet_deploy_mode = 'container': musa nodes have no container deployment "
        "(deploy_modes of roles/vendors/musa/vars/main.yml); accepted: host"]


def test_disabled_models_are_not_held_to_the_rules(example):
    # A disabled model is resolved (its flags stay valid for the schema) but not served.
    model(example, "gptq-qwen3.5-4b-full-int4-group")["env"] = {"VLLM_MUSA_ATTN": "tilelang"}
    assert problems_for(example) == []


def test_miniforge_version_names_its_conda_and_build(example):
    group(example)["fleet_matrix"]["miniforge"]["version"] = "25.3.1"
    (problem,) = problems_for(example)
    assert "fleet_matrix.miniforge.version = '25.3.1' (a string): expected Miniforge's version in quotes" in problem


def test_unknown_matrix_key_is_caught(example):
    group(example)["fleet_matrix"]["aimodul"] = group(example)["fleet_matrix"].pop("aimodule")
    problems = problems_for(example)
    assert any("fleet_matrix.aimodule is missing" in p for p in problems)
    assert any("unknown key 'aimodul' (did you mean 'aimodule'?)" in p for p in problems)


def test_fork_compilation_keys_must_be_key_names(example):
    group(example)["fleet_matrix"]["vllm"]["fork_compilation_keys"] = ["simple-cuda-graph"]
    (problem,) = problems_for(example)
    assert "fleet_matrix.vllm.fork_compilation_keys[0] = 'simple-cuda-graph'" in problem


def test_drop_caches_opt_in_must_be_a_boolean(example):
    group(example)["vllm_service_drop_caches"] = "yes please"
    (problem,) = problems_for(example)
    assert problem.startswith(f"host {HOST}: vllm_service_drop_caches = 'yes please'")
