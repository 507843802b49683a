"""The rules of CPU nodes (vLLM's CPU backend) that a schema cannot express."""

from __future__ import annotations

import re

from vllm_fleet import vendors
from vllm_fleet.validation.problem import _int
from vllm_fleet.validation.vendor_rules import VENDOR_RULES, vendor_rule

#: Memory one vLLM CPU engine takes besides its weights and KV cache (measured on vLLM
#: 0.32: 1.4-2 GB resident for a tiny model), counted per model.
CPU_ENGINE_OVERHEAD_GB = 2.0
#: What a CPU node's fleet_accelerator says of it besides vendor, model and count.
CPU_NODE_KEYS = ("cores", "memory_gb", "isa")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def _cpu_kv_cache_gb(model: dict) -> float | None:
    """The KV cache a CPU model asks for, in GB: serve.kv_cache_memory_bytes or VLLM_CPU_KVCACHE_SPACE (GiB)."""
    kv_bytes = _int(model["serve"].get("kv_cache_memory_bytes"))
    if kv_bytes:
        return kv_bytes / 1e9
    space = model["env"].get("VLLM_CPU_KVCACHE_SPACE")
    try:
        return float(space) * 2**30 / 1e9 if space not in (None, "") else None
    except ValueError:
        return None


@vendor_rule("cpu")
def _cpu_node_described(doc: dict, models: list[dict]) -> list[str]:
    acc = doc["fleet_accelerator"]
    missing = [k for k in CPU_NODE_KEYS if k not in acc]
    if missing:
        return [f"fleet_accelerator has no {', '.join(missing)}; accepted: a CPU node's logical CPUs (cores), "
                "memory in GB (memory_gb) and ISA extensions (isa), e.g. {vendor: cpu, model: x86_64, count: 2, "
                "cores: 64, memory_gb: 256, isa: [avx2, avx512f]}"]
    return []


@vendor_rule("cpu")
def _cpu_isa(doc: dict, models: list[dict]) -> list[str]:
    """The CPU build's kernels need an ISA extension the node must have."""
    need = ((doc.get("fleet_matrix") or {}).get("vllm") or {}).get("isa")
    have = doc["fleet_accelerator"].get("isa")
    if isinstance(need, str) and isinstance(have, list) and need not in have:
        return [f"fleet_matrix.vllm.isa = {need!r}: vLLM's CPU build needs {need}, but fleet_accelerator.isa is "
                f"{have}; accepted: a build for the node's ISA (one of {', '.join(have) or 'none'}), or nodes with {need}"]
    return []


@vendor_rule("cpu")
def _cpu_memory(doc: dict, models: list[dict]) -> list[str]:
    """Every model names its KV cache size, and weights + KV caches + engines fit in the node's memory."""
    problems = []
    total = 0.0
    parts = []
    for m in models:
        kv = _cpu_kv_cache_gb(m)
        if kv is None:
            problems.append(f"model {m['name']}: no KV cache size; accepted: serve.kv_cache_memory_bytes (bytes) or "
                            "env VLLM_CPU_KVCACHE_SPACE (GiB), since without one vLLM's CPU backend takes 90% of the "
                            "node's memory for its KV cache")
            continue
        need = (m.get("size_gb") or 0) + kv + CPU_ENGINE_OVERHEAD_GB
        total += need
        parts.append(f"{m['name']} {need:.1f}")
    memory = doc["fleet_accelerator"].get("memory_gb")
    if isinstance(memory, (int, float)) and not isinstance(memory, bool) and total > memory:
        problems.append(f"the models need {total:.1f} GB ({', '.join(parts)}: weights size_gb + KV cache + "
                        f"{CPU_ENGINE_OVERHEAD_GB:.0f} GB per engine) but fleet_accelerator.memory_gb is {memory}; "
                        "accepted: smaller KV caches, fewer models, or a node with more memory")
    return problems


@vendor_rule("cpu")
def _cpu_thread_binding(doc: dict, models: list[dict]) -> list[str]:
    """VLLM_CPU_OMP_THREADS_BIND: auto, nobind, or one CPU list per tensor-parallel rank, within the node's cores."""
    cores = _int(doc["fleet_accelerator"].get("cores"))
    problems = []
    for m in models:
        bind = m["env"].get("VLLM_CPU_OMP_THREADS_BIND")
        if bind in (None, "", "auto", "nobind"):
            continue
        ranks = str(bind).split("|")
        if not all(_CPU_LIST.match(r) for r in ranks):
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r}; accepted: auto, nobind, or "
                            "CPU lists such as 0-31 (one per tensor-parallel rank, separated by |: 0-31|32-63)")
            continue
        tp = _int(m["serve"].get("tensor_parallel_size")) or 1
        if len(ranks) != tp:
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r} binds {len(ranks)} rank(s) "
                            f"but serve.tensor_parallel_size is {tp}; accepted: one CPU list per rank, separated by |")
        highest = max(int(n) for r in ranks for n in re.split(r"[,-]", r))
        if cores and highest >= cores:
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r} names CPU {highest}, but "
                            f"fleet_accelerator.cores is {cores} (CPUs 0-{cores - 1}); accepted: CPUs of the node")
    return problems


def _cpu_keys_on_cpu_nodes_only(doc: dict, models: list[dict]) -> list[str]:
    given = [k for k in CPU_NODE_KEYS if k in doc["fleet_accelerator"]]
    if given:
        return [f"fleet_accelerator.{given[0]}: only CPU nodes (vendor cpu) say this; accepted: vendor, model and "
                f"count for {doc['fleet_accelerator'].get('vendor')} nodes"]
    return []


# Every other vendor's nodes: the CPU node's keys are refused there.
for _vendor in vendors.VENDORS:
    if _vendor != "cpu":
        VENDOR_RULES.setdefault(_vendor, []).append(_cpu_keys_on_cpu_nodes_only)
