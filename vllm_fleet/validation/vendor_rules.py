"""Per-vendor rules, each registered for the vendors it applies to."""

from __future__ import annotations

import re
from collections.abc import Callable

from vllm_fleet import vendors
from vllm_fleet.models import access, is_loopback
from vllm_fleet.validation.problem import _int


def vendor_group_problems(host_vars: dict) -> list[str]:
    """A node is of one vendor: it belongs to at most one `<vendor>-nodes` group."""
    groups = [g for g in host_vars.get("group_names") or [] if g in {f"{v}-nodes" for v in vendors.VENDORS}]
    if len(groups) > 1:
        return [f"is in the vendor groups {' and '.join(sorted(groups))}; a node has one vendor, and which group's "
                "settings it gets would depend on group order; accepted: the host in one <vendor>-nodes group only"]
    return []


VendorRule = Callable[[dict, list[dict]], list[str]]
VENDOR_RULES: dict[str, list[VendorRule]] = {}


def vendor_rule(vendor: str):
    def register(fn: VendorRule) -> VendorRule:
        VENDOR_RULES.setdefault(vendor, []).append(fn)
        return fn
    return register


@vendor_rule("ascend")
def _ascend_graph_mode_env(doc: dict, models: list[dict]) -> list[str]:
    """Seed 001: IGNORE_GRAPH_UPDATE_EXCEPTIONS is required whenever graph mode is on."""
    problems = []
    for m in models:
        cc = m["serve"].get("compilation_config")
        mode = cc.get("cudagraph_mode") if isinstance(cc, dict) else None
        if mode and str(mode).upper() != "NONE" and "IGNORE_GRAPH_UPDATE_EXCEPTIONS" not in m["env"]:
            problems.append(f"model {m['name']}: compilation_config.cudagraph_mode = {mode!r} (graph mode) needs "
                            "IGNORE_GRAPH_UPDATE_EXCEPTIONS in its environment (fleet_serve_env or the model's env); "
                            "accepted: set it, e.g. IGNORE_GRAPH_UPDATE_EXCEPTIONS: \"0\" as in the Ascend recipe")
    return problems


@vendor_rule("ascend")
def _ascend_container_image(doc: dict, models: list[dict]) -> list[str]:
    if doc.get("fleet_deploy_mode") == "container" and "cann_image" not in (doc.get("fleet_matrix") or {}):
        return ["fleet_matrix.cann_image is missing; container mode runs the CANN image, so set "
                "{repository, tag} (e.g. ascend/cann, 8.3.rc1-910b-ubuntu22.04-py3.11)"]
    return []


# ---- NVIDIA (seed 003): the driver from the distribution's packages, vLLM from PyPI

def _upstream_version(deb_version: str) -> str:
    """The upstream part of a Debian package version: 1:570.195.03-0ubuntu0.22.04.1 -> 570.195.03."""
    version = re.sub(r"^[0-9]+:", "", deb_version)
    return version.rsplit("-", 1)[0] if "-" in version else version


@vendor_rule("nvidia")
def _nvidia_driver_names_one_driver(doc: dict, models: list[dict]) -> list[str]:
    """Branch, version and package version of fleet_matrix.nvidia_driver must name the same driver.

    The role installs `packages` at `package_version` and gates on nvidia-smi reporting
    `version`: a package version of another driver would install, then fail the gate.
    """
    driver = (doc.get("fleet_matrix") or {}).get("nvidia_driver")
    if not isinstance(driver, dict):
        return []
    branch, version, package_version = driver.get("branch"), driver.get("version"), driver.get("package_version")
    packages = driver.get("packages") if isinstance(driver.get("packages"), list) else []
    problems = []
    if isinstance(branch, str) and isinstance(version, str) and not version.startswith(branch + "."):
        problems.append(f"fleet_matrix.nvidia_driver.version = {version!r} is not a driver of branch {branch!r}; "
                        f"accepted: a {branch}.x version, or branch {version.split('.')[0]!r} for this version")
    if isinstance(version, str) and isinstance(package_version, str) and _upstream_version(package_version) != version:
        where = f" (apt-cache policy {packages[0]})" if packages else ""
        problems.append(f"fleet_matrix.nvidia_driver.package_version = {package_version!r} installs driver "
                        f"{_upstream_version(package_version)}, not version {version!r}; accepted: the package version "
                        f"of driver {version} as your apt repository lists it{where}, e.g. {version}-0ubuntu0.22.04.1")
    return problems


@vendor_rule("nvidia")
def _nvidia_container_mode(doc: dict, models: list[dict]) -> list[str]:
    """Container mode pulls the vLLM OpenAI image of the matrix's release and needs the container toolkit."""
    matrix = doc.get("fleet_matrix") or {}
    container = doc.get("fleet_deploy_mode") == "container"
    problems = []
    if container and "nvidia_container_toolkit" not in matrix:
        problems.append("fleet_matrix.nvidia_container_toolkit is missing; container mode gives the GPUs to the "
                        "container through the NVIDIA Container Toolkit, so set {package_version} (e.g. \"1.17.8-1\")")
    image = matrix.get("vllm_image")
    if container and image is None:
        problems.append("fleet_matrix.vllm_image is missing; container mode runs the vLLM OpenAI image, so set "
                        "{repository, tag} (e.g. vllm/vllm-openai, v0.11.2)")
    version = str((matrix.get("vllm") or {}).get("version", "")) if isinstance(matrix.get("vllm"), dict) else ""
    tag = image.get("tag") if isinstance(image, dict) else None
    if isinstance(tag, str) and version and not re.search(rf"(?<![0-9.]){re.escape(version)}(?![0-9])", tag):
        problems.append(f"fleet_matrix.vllm_image.tag = {tag!r} does not name vLLM {version} (fleet_matrix.vllm.version), "
                        f"so containers would run another vLLM than host mode installs; accepted: the image of that "
                        f"release, e.g. v{version}")
    return problems


# ---- Moore Threads (seed 004): AIModule's vLLM-MUSA in a conda environment

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


# ---- MetaX (seed 000): MACA, vLLM with MetaX's overlays over site-packages
#: Seed 000: gpt-oss runs on MetaX only with vLLM's Triton attention backend.
METAX_GPT_OSS_BACKEND = "TRITON_ATTN_VLLM_V1"


def _is_gpt_oss(model: dict) -> bool:
    """A gpt-oss checkpoint, told by its name, hub repository or path."""
    names = [model.get("name") or "", str(model.get("path") or ""), str((model.get("source") or {}).get("repo") or "")]
    return any("gpt-oss" in n.lower() for n in names)


@vendor_rule("metax")
def _metax_gpt_oss_backend(doc: dict, models: list[dict]) -> list[str]:
    problems = []
    for m in models:
        backend = m["env"].get("VLLM_ATTENTION_BACKEND")
        if _is_gpt_oss(m) and backend != METAX_GPT_OSS_BACKEND:
            problems.append(f"model {m['name']}: gpt-oss on MetaX needs VLLM_ATTENTION_BACKEND={METAX_GPT_OSS_BACKEND} "
                            f"(seed 000), its environment has {backend!r}; accepted: VLLM_ATTENTION_BACKEND: "
                            f"{METAX_GPT_OSS_BACKEND} in the model's env (or fleet_serve_env)")
    return problems


@vendor_rule("metax")
def _metax_overlays(doc: dict, models: list[dict]) -> list[str]:
    """Overlays must not cover each other's files: undoing one would restore over the other."""
    overlays = [o for o in (doc.get("fleet_matrix") or {}).get("vllm_overlays") or [] if isinstance(o, dict)]
    problems = []
    names = [str(o.get("name")) for o in overlays]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"fleet_matrix.vllm_overlays: the name {dup!r} is used more than once; accepted: a name "
                        "per overlay (it names the overlay's state directory on the node)")
    targets = [(i, str(o.get("target") or "").strip("/")) for i, o in enumerate(overlays)]
    for i, a in targets:
        for j, b in targets:
            if i < j and a and b and (a == b or b.startswith(a + "/") or a.startswith(b + "/")):
                problems.append(f"fleet_matrix.vllm_overlays[{j}].target = {b!r} overlaps "
                                f"fleet_matrix.vllm_overlays[{i}].target = {a!r}; accepted: targets that do not "
                                "contain one another (merge the two overlays into one)")
    if doc.get("fleet_deploy_mode") == "container":
        for i, o in enumerate(overlays):
            if "path" in o:
                problems.append(f"fleet_matrix.vllm_overlays[{i}] ({o.get('name')}) is given as path {o['path']!r}; "
                                "container mode fetches overlays while the image builds, so accepted: file (from "
                                "fleet_artifact_base_url) or url")
    return problems


@vendor_rule("metax")
def _metax_tokenizer_cache(doc: dict, models: list[dict]) -> list[str]:
    """gpt-oss's harmony tokenizer is cached from the matrix's tiktoken_o200k."""
    if "tiktoken_o200k" in (doc.get("fleet_matrix") or {}):
        return []
    return [f"model {m['name']}: tokenizer_cache = {m['tokenizer_cache']!r} needs fleet_matrix.tiktoken_o200k "
            "(the encoding's sha256 and sources); accepted: a mapping with sha256, sources and canonical_url"
            for m in models if m.get("tokenizer_cache")]


@vendor_rule("metax")
def _metax_container_image(doc: dict, models: list[dict]) -> list[str]:
    if doc.get("fleet_deploy_mode") == "container" and "vllm_image" not in (doc.get("fleet_matrix") or {}):
        return ["fleet_matrix.vllm_image is missing; container mode builds MetaX's overlays into MetaX's vLLM image, "
                "so set {repository, tag} (e.g. maca/vllm, maca.ai3.2.1.3-torch2.6-py310-ubuntu22.04-amd64)"]
    return []


# ---- CPU nodes: vLLM's CPU backend
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


def _hub_clients_pinned(doc: dict, models: list[dict]) -> list[str]:
    """Models (and their LoRA adapters) fetched from a hub need that hub's client at a version of the matrix."""
    matrix = doc.get("fleet_matrix") or {}
    needs = {"modelscope": "modelscope", "huggingface": "huggingface_hub"}
    problems = []
    for m in models:
        for source in [m.get("source") or {}] + [a.get("source") or {} for a in m.get("lora_adapters") or []]:
            key = needs.get(source.get("type"))
            if key and key not in matrix:
                problems.append(f"model {m['name']}: source type {source['type']} needs fleet_matrix.{key} "
                                f"(the version of the {key} client nodes download with); accepted: a version string")
    return sorted(set(problems))


def _deploy_mode_supported(doc: dict, models: list[dict]) -> list[str]:
    """The vendor contract says which deployment modes the vendor has (Moore Threads: no image)."""
    vendor = doc["fleet_accelerator"].get("vendor")
    mode = doc.get("fleet_deploy_mode", "host")
    modes = vendors.deploy_modes(vendor)
    if mode not in modes:
        return [f"fleet_deploy_mode = {mode!r}: {vendor} nodes have no {mode} deployment "
                f"(deploy_modes of roles/{vendor}/vars/main.yml); accepted: {', '.join(modes)}"]
    return []


for _vendor in vendors.VENDORS:
    VENDOR_RULES.setdefault(_vendor, []).extend([_deploy_mode_supported, _hub_clients_pinned])
    if _vendor != "cpu":
        VENDOR_RULES[_vendor].append(_cpu_keys_on_cpu_nodes_only)


def _listen_needs_key(doc: dict, models: list[dict]) -> list[str]:
    """A model that listens beyond loopback needs an API key, or an explicit opt-out."""
    problems = []
    own = {m.get("name"): m for m in doc.get("fleet_models") or [] if isinstance(m, dict)}
    for m in models:
        settings = access(own.get(m["name"], {}), doc.get("fleet_serve_listen"), bool(doc.get("fleet_serve_api_key")),
                          doc.get("fleet_serve_unauthenticated") is True)
        listen = settings["listen"]
        if not settings["valid"]:
            problems.append(f"model {m['name']}: listen = {listen!r} is not an IP address; accepted: an IPv4 or IPv6 "
                            "address such as 127.0.0.1 (the default), 10.0.0.5, 0.0.0.0 or ::")
            continue
        if not is_loopback(listen) and not settings["api_key"] and not settings["unauthenticated"]:
            problems.append(
                f"model {m['name']}: listen = {listen!r} (the model's listen, else fleet_serve_listen) reaches beyond "
                "this node's loopback, but the model has no API key; accepted: fleet_serve_api_key (a secret: "
                "--secrets FILE, the API's secrets= or ansible-vault) or the model's secret_env.VLLM_API_KEY, "
                "or the explicit opt-out fleet_serve_unauthenticated: true (group) / unauthenticated: true "
                "(model), or a loopback listen such as 127.0.0.1")
    return problems


for _vendor in vendors.VENDORS:
    VENDOR_RULES.setdefault(_vendor, []).append(_listen_needs_key)

