"""vLLM's cross-field rules of the `vllm serve` options a model sets, checked before a node is touched.

The release's parser (serve.py) judges each option alone; vLLM's engine configs judge them
together only when the engine starts, minutes into a unit's life, after the weights are on
the node: `--max-num-batched-tokens 2048 --max-model-len 8192 --no-enable-chunked-prefill`
parses, and the engine then exits. The whole engine config (`EngineArgs.create_engine_config`)
cannot be built on the controller: it reads the model's own configuration (a download) and the
node's platform and devices. Its parts that judge the options against each other need neither,
and are these rules, each citing the vLLM source it restates (the releases the example pins,
0.10.2 to 0.32.0):

- SchedulerConfig (vllm/config/scheduler.py, `verify_max_model_len`; 0.10.2: `_verify_args`);
- LoRAConfig (vllm/config/lora.py, `__post_init__`);
- ParallelConfig (vllm/config/parallel.py, `_validate_parallel_config`).

A rule judges only what the inventory sets: an option left out takes the default vLLM derives
from the model and the device (`EngineArgs._set_default_args` chooses max_num_batched_tokens,
max_num_seqs and chunked prefill so that these rules hold), which the controller cannot know.
tests/parser/test_engine_configs.py builds those very config classes of each pinned release
from the rendered command lines and proves that they and these rules refuse the same profiles.
"""

from __future__ import annotations

import re
from typing import Any

#: vLLM's human-readable integers (vllm/utils/argparse_utils.py, human_readable_int): 1k = 1000, 1K = 1024.
_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")
_MULTIPLIER = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _count(value: Any) -> int | None:
    """An integer option's value as vLLM parses it; None when unset or not a plain count (its type
    is the parser's to judge: serve.py)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        match = _HUMAN.match(text)
        if match:
            number, suffix = match.groups()
            if suffix.islower():
                return int(float(number) * _MULTIPLIER[suffix])
            return int(number) * _MULTIPLIER[suffix] if number.isdigit() else None  # 1.5K: the parser refuses it
    return None


def _switch(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


Rule = tuple[str, int, str, str]


def _scheduler(serve: dict, options: dict) -> list[Rule]:
    """SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py; 0.10.2: _verify_args)."""
    problems: list[Rule] = []
    length = _count(serve.get("max_model_len"))
    batched = _count(serve.get("max_num_batched_tokens"))
    seqs = _count(serve.get("max_num_seqs"))
    chunked = _switch(serve.get("enable_chunked_prefill"))
    if batched is not None and length is not None and batched < length and chunked is False:
        problems.append(("max_num_batched_tokens", batched,
                         f"is smaller than max_model_len ({length}) with chunked prefill off, which vLLM refuses at "
                         "start (SchedulerConfig: no prompt longer than one batch could be scheduled)",
                         f"max_num_batched_tokens >= max_model_len ({length}), or chunked prefill on "
                         "(enable_chunked_prefill: true, or leave it out)"))
    if batched is not None and seqs is not None and batched < seqs:
        problems.append(("max_num_batched_tokens", batched,
                         f"is smaller than max_num_seqs ({seqs}), which vLLM refuses at start (SchedulerConfig)",
                         f"max_num_batched_tokens >= max_num_seqs ({seqs})"))
    active = _count(serve.get("max_num_active_seqs"))
    if active is not None and seqs is not None and active > seqs:
        problems.append(("max_num_active_seqs", active,
                         f"is greater than max_num_seqs ({seqs}), which vLLM refuses at start (SchedulerConfig)",
                         f"max_num_active_seqs <= max_num_seqs ({seqs})"))
    threshold = _count(serve.get("long_prefill_token_threshold"))
    if "max_num_partial_prefills" in options:
        # Up to 0.16: partial prefills, and the threshold only judged with more than one of them.
        partial = _count(serve.get("max_num_partial_prefills"))
        longs = _count(serve.get("max_long_partial_prefills"))
        if partial is not None and partial > 1 and chunked is False:
            problems.append(("max_num_partial_prefills", partial,
                             "is more than 1 with chunked prefill off, which vLLM refuses at start (SchedulerConfig)",
                             "1, or chunked prefill on (enable_chunked_prefill: true, or leave it out)"))
        if partial is not None and partial > 1 and threshold is not None and length is not None and threshold > length:
            problems.append(("long_prefill_token_threshold", threshold,
                             f"is greater than max_model_len ({length}), which vLLM refuses at start with "
                             "max_num_partial_prefills > 1 (SchedulerConfig)",
                             f"at most max_model_len ({length})"))
        if longs is not None and longs > (partial if partial is not None else 1):
            problems.append(("max_long_partial_prefills", longs,
                             f"is greater than max_num_partial_prefills ({partial if partial is not None else 1}"
                             f"{'' if partial is not None else ', its default'}), which vLLM refuses at start "
                             "(SchedulerConfig)", "at most max_num_partial_prefills"))
    elif threshold is not None and length is not None and threshold > length:
        # From 0.32 (no partial prefills): the threshold is always judged against the length.
        problems.append(("long_prefill_token_threshold", threshold,
                         f"is greater than max_model_len ({length}), which vLLM refuses at start (SchedulerConfig)",
                         f"at most max_model_len ({length})"))
    return problems


def _lora(serve: dict) -> list[Rule]:
    """LoRAConfig.__post_init__ (vllm/config/lora.py): built only with --enable-lora (a model with
    lora_adapters gets it: vllm_fleet.models)."""
    if serve.get("enable_lora") is not True:
        return []
    loras = _count(serve.get("max_loras"))
    cpu = _count(serve.get("max_cpu_loras"))
    effective = loras if loras is not None else 1  # LoRAConfig.max_loras' default
    if cpu is not None and cpu < effective:
        return [("max_cpu_loras", cpu,
                 f"is smaller than max_loras ({effective}{'' if loras is not None else ', its default'}), which vLLM "
                 "refuses at start (LoRAConfig: the adapters of one batch must fit in the CPU cache)",
                 f"max_cpu_loras >= max_loras ({effective}), or leave it out (it then equals max_loras)")]
    return []


def _parallel(serve: dict) -> list[Rule]:
    """ParallelConfig._validate_parallel_config (vllm/config/parallel.py)."""
    local = _count(serve.get("data_parallel_size_local"))
    size = _count(serve.get("data_parallel_size"))
    effective = size if size is not None else 1
    if local is not None and local > effective:
        return [("data_parallel_size_local", local,
                 f"is greater than data_parallel_size ({effective}{'' if size is not None else ', its default'}), "
                 "which vLLM refuses at start (ParallelConfig)",
                 f"data_parallel_size_local <= data_parallel_size ({effective})")]
    return []


def engine_problems(serve: dict, options: dict) -> list[Rule]:
    """(option, value, why, accepted) of every cross-field rule of vLLM's engine configs that the
    model's merged `serve` (flag keys) breaks; `options`: the release's described options
    (serve.serve_options), which tell a release's rules apart."""
    return _scheduler(serve, options) + _lora(serve) + _parallel(serve)
