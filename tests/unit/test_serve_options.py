"""Typed `serve` parameters: every model's merged serve flags are checked against the `vllm serve`
options of its host's release (vllm_fleet/data/serve_options.json, from the real parsers)."""

from __future__ import annotations

import pytest

from vllm_fleet.validation import serve_options, validate_hosts
from vllm_fleet_dev import argcheck


def problems_for(hosts, host):
    return [p for p in validate_hosts(hosts) if p.startswith(f"host {host}:")]


def set_serve(hosts, host, key, value):
    hosts[host]["fleet_models"][0].setdefault("serve", {})[key] = value


def test_every_pinned_release_is_described():
    # Every pin of the example and the lab; a release a user described (--describe RELEASE) may join them.
    assert set(argcheck.pinned_releases()) <= set(serve_options())
    for body in serve_options().values():
        assert body["options"]["max_model_len"]["type"] == "int"
        assert body["options"]["enable_prefix_caching"]["bool"] == "optional"


@pytest.mark.parametrize("host,release", [("ascend-01", "0.11.2"), ("metax-01", "0.10.2"), ("musa-01", "0.16.0"),
                                          ("nvidia-01", "0.11.2"), ("cpu-01", "0.32.0+cpu")])
def test_unknown_option_is_refused_with_did_you_mean(example, host, release):
    set_serve(example, host, "max_modle_len", 4096)
    (p,) = problems_for(example, host)
    assert f"serve.max_modle_len = 4096 (an integer): vLLM {release}'s `vllm serve` has no option --max-modle-len " \
           "(did you mean 'max_model_len'?)" in p


def test_non_numeric_max_model_len(example):
    set_serve(example, "nvidia-01", "max_model_len", "lots")
    (p,) = problems_for(example, "nvidia-01")
    assert p == ("host nvidia-01: model gpt-oss-20b: serve.max_model_len = 'lots' (a string): is not an integer; "
                 "vLLM 0.11.2's --max-model-len takes an integer")


def test_human_readable_length_is_accepted(example):
    set_serve(example, "nvidia-01", "max_model_len", "32k")
    assert problems_for(example, "nvidia-01") == []


def test_boolean_given_as_a_string(example):
    set_serve(example, "nvidia-01", "enable_prefix_caching", "yes")
    (p,) = problems_for(example, "nvidia-01")
    assert "serve.enable_prefix_caching = 'yes' (a string)" in p
    assert "would render `--enable-prefix-caching yes`" in p and "accepted: true or false" in p


def test_choices(example):
    set_serve(example, "ascend-01", "dtype", "fp7")
    (p,) = problems_for(example, "ascend-01")
    assert "serve.dtype = 'fp7'" in p and "takes one of auto, bfloat16, float, float16, float32, half" in p


def test_value_with_more_flags_inside(example):
    set_serve(example, "nvidia-01", "max_model_len", "4096 --trust-remote-code")
    (p,) = problems_for(example, "nvidia-01")
    assert "serve.max_model_len = '4096 --trust-remote-code'" in p and "more flags inside one value" in p


def test_list_for_a_single_value_option(example):
    set_serve(example, "nvidia-01", "max_num_seqs", [1, 2])
    (p,) = problems_for(example, "nvidia-01")
    assert "takes an integer, one value" in p


@pytest.mark.parametrize("key,value,accepted", [
    ("gpu_memory_utilization", 1.5, "(0, 1]"), ("gpu_memory_utilization", 0, "(0, 1]"),
    ("max_model_len", 0, "a positive integer"), ("tensor_parallel_size", -2, "a positive integer"),
    ("swap_space", -1, "a number of GiB, 0-"), ("max_num_seqs", 0, "a positive integer"),
    ("max_model_len", 10**9, "at most 16777216"), ("tensor_parallel_size", 4096, "at most 1024")])
def test_ranges_vllm_checks_only_at_start(example, key, value, accepted):
    set_serve(example, "nvidia-01", key, value)
    problems = [p for p in problems_for(example, "nvidia-01") if f"serve.{key}" in p and "out of range" in p]
    assert len(problems) == 1 and accepted in problems[0]


def test_fork_options_and_fork_compilation_keys_are_not_refused(example):
    vllm = example["musa-01"]["fleet_matrix"]["vllm"]
    assert "simple_cuda_graph" in vllm["fork_compilation_keys"]
    set_serve(example, "musa-01", "compilation_config", {"simple_cuda_graph": True, "cudagraph_capture_sizes": [1]})
    set_serve(example, "musa-01", "musa_graph_mode", "full")
    assert any("--musa-graph-mode" in p for p in problems_for(example, "musa-01"))
    vllm["fork_serve_options"] = ["musa_graph_mode"]
    assert problems_for(example, "musa-01") == []


def test_release_without_a_description_is_left_to_the_parser(example):
    example["nvidia-01"]["fleet_matrix"]["vllm"]["version"] = "0.9.9"
    set_serve(example, "nvidia-01", "max_modle_len", 1)
    assert not any("max_modle_len" in p for p in problems_for(example, "nvidia-01"))


@pytest.mark.parametrize("results,raised,code", [
    ([{"ok": True}], None, 0),
    ([{"ok": True}, {"ok": False, "error": "unrecognized arguments: --x"}], None, 4),
    (None, argcheck.ArgcheckError("the vllm 0.11.2 parser could not be run"), 1),
])
def test_argcheck_answers_with_vllm_fleets_exit_codes(tmp_path, monkeypatch, capsys, results, raised, code):
    """argcheck's command line exits as every vllm-fleet command does (vllm_fleet.exit_codes): a
    line refused is an invalid input (4), a parser that could not be prepared an error (1)."""
    from vllm_fleet import exit_codes

    def check(release, argvs, **kwargs):
        if raised:
            raise raised
        return results

    monkeypatch.setattr(argcheck, "check", check)
    argvs = tmp_path / "argvs.json"
    argvs.write_text('[["vllm", "serve", "m"], ["vllm", "serve", "m", "--x"]]')
    assert argcheck.main(["--release", "0.11.2", "--json", str(argvs)]) == code
    assert code in (exit_codes.EXIT_OK, exit_codes.EXIT_INVALID, exit_codes.EXIT_ERROR)
    assert ("could not be run" in capsys.readouterr().err) == bool(raised)
