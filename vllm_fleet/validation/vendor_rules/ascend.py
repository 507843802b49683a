"""The rules of Huawei Ascend nodes (seed 001: CANN, vllm-ascend) that a schema cannot express."""

from __future__ import annotations

from vllm_fleet.validation.vendor_rules import vendor_rule


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
