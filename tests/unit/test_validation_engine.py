"""vLLM's cross-field rules of the options a model sets (vllm_fleet/validation/engine.py), without
vLLM: each rule refuses what vLLM's engine config refuses at start, judges only what the inventory
sets, and reaches the person through validation naming host, model and option. That vLLM's own
config classes agree, release by release, is tests/parser/test_engine_configs.py's to prove.
"""

from __future__ import annotations

import copy

import pytest

from tests.conftest import GROUP_OF, example_hosts
from vllm_fleet.validation import validate_host
from vllm_fleet.validation.engine import engine_problems
from vllm_fleet.validation.ports import listener_problems
from vllm_fleet.validation.serve import serve_options

UP_TO_016 = serve_options()["0.11.2"]["options"]
FROM_032 = serve_options()["0.32.0+cpu"]["options"]


CHUNKED_OFF = {"enable_chunked_prefill": False}


@pytest.mark.parametrize("serve,option", [
    ({"max_model_len": 8192, "max_num_batched_tokens": 2048, **CHUNKED_OFF}, "max_num_batched_tokens"),
    ({"max_model_len": "8k", "max_num_batched_tokens": "2K", **CHUNKED_OFF}, "max_num_batched_tokens"),
    ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "max_num_batched_tokens"),
    ({"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, "max_cpu_loras"),
    ({"enable_lora": True, "max_cpu_loras": 0}, "max_cpu_loras"),
    ({"data_parallel_size_local": 2}, "data_parallel_size_local"),
    ({"max_num_partial_prefills": 2, "enable_chunked_prefill": False}, "max_num_partial_prefills"),
    ({"max_long_partial_prefills": 2}, "max_long_partial_prefills"),
    ({"max_num_partial_prefills": 2, "max_model_len": 1024, "long_prefill_token_threshold": 2048},
     "long_prefill_token_threshold"),
])
def test_each_rule_refuses_what_vllm_refuses_at_start(serve, option):
    assert [p[0] for p in engine_problems(serve, UP_TO_016)] == [option]


@pytest.mark.parametrize("serve", [
    {"max_model_len": 8192, "max_num_batched_tokens": 2048},  # chunked prefill: vLLM's default decides
    {"max_model_len": 8192, "max_num_batched_tokens": 8192, "enable_chunked_prefill": False},
    {"max_num_seqs": 4096},  # the batch size left to vLLM's defaults
    {"max_loras": 4, "max_cpu_loras": 2},  # no --enable-lora: no LoRAConfig
    {"enable_lora": True, "max_loras": 2},  # max_cpu_loras left out: it equals max_loras
    {"max_model_len": "auto", "max_num_batched_tokens": 512, "enable_chunked_prefill": False},  # the model's length
    {"max_model_len": 1024, "long_prefill_token_threshold": 2048},  # up to 0.16 only with partial prefills
    {"max_num_batched_tokens": "1.5K", "max_num_seqs": 4096},  # no such number: the parser's to refuse
])
def test_what_the_inventory_leaves_to_vllm_or_the_parser_is_not_judged(serve):
    assert engine_problems(serve, UP_TO_016) == []


def test_the_release_decides_the_threshold_rule():
    serve = {"max_model_len": 1024, "long_prefill_token_threshold": 2048}
    assert engine_problems(serve, UP_TO_016) == []
    assert [p[0] for p in engine_problems(serve, FROM_032)] == ["long_prefill_token_threshold"]
    assert [p[0] for p in engine_problems({"max_num_active_seqs": 300, "max_num_seqs": 256}, FROM_032)] == [
        "max_num_active_seqs"]


def test_a_launch_profile_in_the_examples_shape_is_refused_naming_host_model_and_option():
    hv = copy.deepcopy(example_hosts()["nvidia-01"])
    hv["group_names"] = ["fleet", GROUP_OF["nvidia-01"]]
    hv["fleet_launch_profiles"] = {"chat": {"serve": {"max_num_batched_tokens": 4096, "enable_chunked_prefill": False}}}
    problems, _models = validate_host("nvidia-01", hv)
    # gpt-oss-20b's own max_model_len is 32768: one batch could never hold a whole prompt.
    assert problems == ["host nvidia-01: model gpt-oss-20b: serve.max_num_batched_tokens = 4096 (an integer): is "
                        "smaller than max_model_len (32768) with chunked prefill off, which vLLM refuses at start "
                        "(SchedulerConfig: no prompt longer than one batch could be scheduled); accepted: "
                        "max_num_batched_tokens >= max_model_len (32768), or chunked prefill on "
                        "(enable_chunked_prefill: true, or leave it out)"]


def test_the_example_passes_every_rule():
    for host, hv in example_hosts().items():
        problems, _models = validate_host(host, {**hv, "group_names": ["fleet", GROUP_OF[host]]})
        assert not [p for p in problems if "which vLLM refuses at start" in p], problems


def test_a_nodes_model_share_claims_its_port_in_waves_only():
    hosts = {h: {**v, "group_names": ["fleet", GROUP_OF[h]], "ansible_port": 2222, "model_fetch_share_port": 2222}
             for h, v in example_hosts().items() if h == "cpu-01"}
    assert not [p for p in listener_problems(hosts, ["cpu-01"]) if "model_fetch_share_port" in p]
    hosts["cpu-01"]["model_fetch_distribution"] = "waves"
    problems = [p for p in listener_problems(hosts, ["cpu-01"]) if "model_fetch_share_port" in p]
    assert problems and "is the node's own SSH port (ansible_port = 2222)" in problems[0], problems
