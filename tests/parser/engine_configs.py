"""The inner half of tests/parser/test_engine_configs.py: vLLM's own engine config classes judge
rendered `vllm serve` command lines, inside a pinned release's parser environment
(vllm_fleet_dev.argcheck builds it; this file runs there, with the standard library and vLLM only).

    <release venv>/bin/python -I engine_configs.py <argcheck.py> <argvs.json> <report.json>

Each command line is parsed by the release's own `vllm serve` parser (argcheck's inner half,
loaded from its file), and the config classes whose checks judge options against each other
are built from the parsed options (the namespace whose attributes `EngineArgs.from_cli_args`
copies; EngineArgs itself is not built: from 0.10 its __post_init__ looks the model up, on the
hub for a path that is not on this machine): SchedulerConfig, LoRAConfig (with
--enable-lora) and ParallelConfig (with --data-parallel-size-local). `create_engine_config`
itself is not called: it builds ModelConfig, which reads the model's configuration (a download),
and applies the platform's and the devices' adjustments, which are a node's, not the controller's.

An option the line leaves out takes, here, a value that none of these checks can refuse (vLLM's
`EngineArgs._set_default_args` chooses such defaults from the model and the device): the same
policy as vllm_fleet/validation/engine.py, whose verdicts the test compares with these.
The report: {"vllm_version", "results": [{"parse_error"} | {"errors": [{"config", "error"}]}]}.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path


def _load(path: str):
    spec = importlib.util.spec_from_file_location("_argcheck_inner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _accepts(cls) -> set[str]:
    """The keyword arguments a config dataclass takes: its fields and InitVars (max_model_len moved
    from a field to an InitVar of SchedulerConfig in 0.11)."""
    fields = getattr(cls, "__dataclass_fields__", {})
    return {name for name, f in fields.items() if f.init or f._field_type is dataclasses._FIELD_INITVAR}


def _build(cls, **kwargs):
    accepted = _accepts(cls)
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})



def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def judge(args, configs) -> list[dict]:
    """The errors of vLLM's config classes built from the parsed options `args`."""
    scheduler_cls, lora_cls, parallel_cls = configs
    errors = []

    def attempt(name, build):
        try:
            build()
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, ValueError: the class's verdict
            errors.append({"config": name, "error": " ".join(str(exc).split())[:400]})

    length = _count(getattr(args, "max_model_len", None))
    batched = _count(getattr(args, "max_num_batched_tokens", None))
    seqs = _count(getattr(args, "max_num_seqs", None))
    active = _count(getattr(args, "max_num_active_seqs", None))
    chunked = getattr(args, "enable_chunked_prefill", None)
    threshold = getattr(args, "long_prefill_token_threshold", None) or 0
    # Left out: a value no check refuses (the model's own length, vLLM's defaults).
    if length is None:
        length = max(threshold, 1)
    if seqs is None:
        seqs = max(active or 1, 1)
    if batched is None:
        batched = max(seqs, length if chunked is False else 1)
    attempt("SchedulerConfig", lambda: _build(
        scheduler_cls, max_model_len=length, max_num_batched_tokens=batched, max_num_seqs=seqs,
        max_num_active_seqs=active, enable_chunked_prefill=True if chunked is None else chunked,
        max_num_partial_prefills=getattr(args, "max_num_partial_prefills", None),
        max_long_partial_prefills=getattr(args, "max_long_partial_prefills", None),
        long_prefill_token_threshold=threshold, is_encoder_decoder=False))  # required from 0.16; decoders here
    if getattr(args, "enable_lora", False):
        attempt("LoRAConfig", lambda: _build(
            lora_cls, max_lora_rank=getattr(args, "max_lora_rank", None), max_loras=getattr(args, "max_loras", None),
            max_cpu_loras=getattr(args, "max_cpu_loras", None)))
    if getattr(args, "data_parallel_size_local", None) is not None:
        attempt("ParallelConfig", lambda: _build(
            parallel_cls, data_parallel_size=getattr(args, "data_parallel_size", None) or 1,
            data_parallel_size_local=args.data_parallel_size_local))
    return errors


def main(argcheck_path: str, input_path: str, output_path: str) -> int:
    argcheck = _load(argcheck_path)
    report: dict = {}
    parser, cmds = argcheck._setup_parser(report)
    from vllm.config import LoRAConfig, ParallelConfig, SchedulerConfig

    results = []
    for argv in json.loads(Path(input_path).read_text()):
        try:
            namespace = parser.parse_args(argv[1:])  # argv[0] is the executable
            cmds[namespace.subparser][0].validate(namespace)
        except BaseException as exc:  # noqa: BLE001 - the parser's refusal: the option is wrong alone
            results.append({"parse_error": " ".join(str(exc).split())[:400] or type(exc).__name__})
            continue
        results.append({"errors": judge(namespace, (SchedulerConfig, LoRAConfig, ParallelConfig))})
    report["results"] = results
    Path(output_path).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
