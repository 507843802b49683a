"""The rules of Moore Threads nodes (seed 004: AIModule's vLLM-MUSA in a conda environment) that a schema cannot express."""

from __future__ import annotations

from vllm_fleet.validation.problem import _int
from vllm_fleet.validation.vendor_rules import vendor_rule

#: vLLM-MUSA's KV-cache block size ("需使用 32").
MUSA_BLOCK_SIZE = 32
#: vLLM's --max-num-seqs when a model does not set it.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
#: The models AIModule 1.4.2 validated VLLM_MUSA_TILELANG_KVREUSE=1 with (seed 004: one).
MUSA_KVREUSE_MODELS = ("Qwen3-30B-A3B-GPTQ-Int4",)
#: The GPTQ MoE models of seed 004 validated with VLLM_MUSA_ATTN=tilelang (named in messages).
MUSA_TILELANG_EXAMPLES = "Qwen3-30B-A3B-GPTQ-Int4, gptq-Qwen3.6-35B-A3B-4bit-group"



def _model_id(model: dict) -> str:
    """The repository name a model comes from (the last part of its repo or git URL), else its directory's name."""
    source = model.get("source") or {}
    ref = source.get("repo") or source.get("url") or model.get("path") or ""
    name = str(ref).rstrip("/").rsplit("/", 1)[-1]
    return name[:-4] if name.endswith(".git") else name


@vendor_rule("musa")
def _musa_parallel_sizes(doc: dict, models: list[dict]) -> list[str]:
    """vLLM-MUSA runs tensor and pipeline parallel size 1 only: one GPU per model."""
    problems = []
    for m in models:
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            value = m["serve"].get(key)
            if value is not None and value != 1:
                problems.append(f"model {m['name']}: serve.{key} = {value!r}; accepted: 1 (AIModule's vLLM-MUSA "
                                "supports tensor and pipeline parallel size 1 only, so a model runs on one GPU)")
    return problems


@vendor_rule("musa")
def _musa_kv_cache(doc: dict, models: list[dict]) -> list[str]:
    """block_size 32, and max-model-len <= num-gpu-blocks-override * block_size / max-num-seqs."""
    problems = []
    for m in models:
        serve, name = m["serve"], m["name"]
        block_size, blocks = serve.get("block_size"), serve.get("num_gpu_blocks_override")
        if block_size is not None and block_size != MUSA_BLOCK_SIZE:
            problems.append(f"model {name}: serve.block_size = {block_size!r}; accepted: {MUSA_BLOCK_SIZE} "
                            "(vLLM-MUSA's KV-cache block size)")
        if blocks is not None and block_size is None:
            problems.append(f"model {name}: serve.num_gpu_blocks_override = {blocks!r} without serve.block_size; "
                            f"accepted: block_size: {MUSA_BLOCK_SIZE} with it (the KV cache then holds "
                            f"num_gpu_blocks_override x {MUSA_BLOCK_SIZE} tokens)")
        blocks, block_size, length = _int(blocks), _int(block_size), _int(serve.get("max_model_len"))
        if not (blocks and block_size and length):
            continue
        seqs = _int(serve.get("max_num_seqs")) or VLLM_DEFAULT_MAX_NUM_SEQS
        if length * seqs > blocks * block_size:
            default = "" if "max_num_seqs" in serve else " (vLLM's default)"
            capacity = blocks * block_size // seqs
            problems.append(f"model {name}: max_model_len {length} > num_gpu_blocks_override {blocks} x block_size "
                            f"{block_size} / max_num_seqs {seqs}{default} = {capacity}; accepted: max_model_len <= "
                            f"{capacity}, or more num_gpu_blocks_override, or fewer max_num_seqs")
    return problems


@vendor_rule("musa")
def _musa_graph_not_eager(doc: dict, models: list[dict]) -> list[str]:
    """--enforce-eager forces eager mode, so MUSA Graph would never be captured."""
    problems = []
    for m in models:
        config = m["serve"].get("compilation_config")
        if isinstance(config, dict) and config.get("simple_cuda_graph") and m["serve"].get("enforce_eager") is True:
            problems.append(f"model {m['name']}: serve.enforce_eager = true with compilation_config.simple_cuda_graph "
                            "= true (MUSA Graph): enforce_eager forces eager mode and no graph is captured; accepted: "
                            "one of the two (compilation_config: null for an eager model, as the pooling models)")
    return problems


@vendor_rule("musa")
def _musa_tilelang(doc: dict, models: list[dict]) -> list[str]:
    """tilelang attention on the validated GPTQ MoE models only, its KV reuse on Qwen3-30B-A3B-GPTQ-Int4 only."""
    problems = []
    for m in models:
        env, serve, name = m["env"], m["serve"], m["name"]
        attention, kv_reuse = env.get("VLLM_MUSA_ATTN"), env.get("VLLM_MUSA_TILELANG_KVREUSE")
        quantization = serve.get("quantization")
        if attention == "tilelang" and not (m["kind"] == "moe" and quantization):
            problems.append(f"model {name}: env VLLM_MUSA_ATTN = 'tilelang' on a kind {m['kind']} model with "
                            f"quantization {quantization or 'none'}; accepted: only on the validated MoE quantized "
                            f"models (kind moe with a quantization such as gptq: {MUSA_TILELANG_EXAMPLES}); elsewhere "
                            "it can mismatch the KV-cache dtype, break MUSA Graph capture or run degraded")
        if kv_reuse is not None and kv_reuse != "0":
            model_id = _model_id(m)
            if model_id.lower() not in {k.lower() for k in MUSA_KVREUSE_MODELS}:
                problems.append(f"model {name}: env VLLM_MUSA_TILELANG_KVREUSE = {kv_reuse!r} on {model_id}; accepted: "
                                f"only with {', '.join(MUSA_KVREUSE_MODELS)} (the model AIModule validated it with)")
            elif attention != "tilelang":
                problems.append(f"model {name}: env VLLM_MUSA_TILELANG_KVREUSE = {kv_reuse!r} without "
                                "VLLM_MUSA_ATTN = 'tilelang'; accepted: both (KV reuse is part of the tilelang backend)")
    return problems


@vendor_rule("musa")
def _musa_pooling_without_warmup(doc: dict, models: list[dict]) -> list[str]:
    """Pooling models (bge-m3, bge-reranker-v2-m3) start with VLLM_MUSA_STARTUP_WARMUP=0."""
    problems = []
    for m in models:
        warmup = m["env"].get("VLLM_MUSA_STARTUP_WARMUP")
        if m["serve"].get("runner") == "pooling" and warmup != "0":
            problems.append(f"model {m['name']}: a pooling model (serve.runner = 'pooling') with VLLM_MUSA_STARTUP_WARMUP "
                            f"{'= ' + repr(warmup) if warmup is not None else 'unset'}; accepted: VLLM_MUSA_STARTUP_WARMUP: "
                            "\"0\" in its environment (the kind's fleet_launch_profiles env or the model's env): the "
                            "start-up warmup is known to trouble pooling models")
    return problems
