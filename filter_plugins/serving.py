"""Filters of the serving roles (roles/blocks/vllm_service, roles/blocks/ray_cluster): what each
role selects and reshapes from the node's models, resolved once (roles/stages/fleet's
_fleet_node_models), so that the roles' vars read fields instead of computing them in Jinja.
Each is a thin call into vllm_fleet, where the rule lives and is unit-tested."""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from vllm_fleet import cluster, models, state
    from vllm_fleet.plain import plain as _plain
except ImportError:  # running ansible-playbook from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vllm_fleet import cluster, models, state
    from vllm_fleet.plain import plain as _plain


def fleet_engine_models(node_models):
    """The node's models whose vllm serve runs here (vllm_fleet.models.engine_models)."""
    return models.engine_models(_plain(node_models))


def fleet_span_models(node_models):
    """The node's enabled models that span nodes with it (vllm_fleet.models.span_models)."""
    return models.span_models(_plain(node_models))


def fleet_readiness_checks(engine_models, smoke_units, prompt, fleet_models, group_key=""):
    """The readiness helper's checks (vllm_fleet.models.readiness_checks); they carry keys: no_log."""
    try:
        return models.readiness_checks(_plain(engine_models), [str(u) for u in smoke_units or []], str(prompt),
                                       _plain(fleet_models), _plain(group_key))
    except Exception as exc:  # the message must not carry a key: name the filter only
        raise AnsibleFilterError(f"fleet_readiness_checks: {type(exc).__name__}") from None


def fleet_unit_files_absent(units, etc_dir, suffixes=(".env",)):
    """fleet_files entries that remove every file of `units` (vllm_fleet.state.unit_files)."""
    return [{"path": path, "state": "absent"}
            for path in state.unit_files([str(u) for u in units], str(etc_dir), tuple(str(s) for s in suffixes))]


def fleet_ray_gates(span_models, hostvars, resource, timeout):
    """The head's gates, one per span this node heads (vllm_fleet.cluster.gate_specs)."""
    spans = _plain(span_models)
    hosts = {h for m in spans if m.get("span") for h in m["span"]["nodes"]}
    addresses = {h: cluster.cluster_address(h, {k: _plain(hostvars[h].get(k))
                                                for k in ("fleet_cluster_address", "ansible_host")})
                 for h in hosts}
    return cluster.gate_specs(spans, addresses, _plain(resource) or None, int(timeout))


def fleet_plan_directories(files):
    """The directories of a plan's files, each once (0755), for fleet_files."""
    return [{"path": d, "mode": "0755"} for d in dict.fromkeys(str(Path(str(f["path"])).parent) for f in files)]


class FilterModule:
    """vllm-fleet's serving filters."""

    def filters(self):
        return {
            "fleet_engine_models": fleet_engine_models,
            "fleet_span_models": fleet_span_models,
            "fleet_readiness_checks": fleet_readiness_checks,
            "fleet_unit_files_absent": fleet_unit_files_absent,
            "fleet_ray_gates": fleet_ray_gates,
            "fleet_plan_directories": fleet_plan_directories,
        }
