"""The rules of MetaX nodes (seed 000: MACA, vLLM with MetaX's overlays over site-packages) that a schema cannot express."""

from __future__ import annotations

from vllm_fleet.validation.vendor_rules import vendor_rule

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
