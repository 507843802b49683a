"""The monitoring hosts (roles/services/monitoring): Prometheus scraping every model and every node's exporter."""

from __future__ import annotations

from vllm_fleet import router
from vllm_fleet.validation.ports import in_group, listener_problems, served_models
from vllm_fleet.validation.roles import role_variable_problems


def monitoring_problems(monitors: dict[str, dict], fleet_hosts: dict[str, dict]) -> list[str]:
    """Problems of the monitoring hosts (`monitors`, which may also be fleet nodes): their role
    variables (a monitoring-only host; a fleet node's are checked with its other variables), a
    model it cannot reach (listening on another machine's loopback), and an exporter or
    Prometheus port already taken on its address."""
    problems: list[str] = []
    everyone = {**in_group(fleet_hosts, "fleet"), **in_group(monitors, "monitoring")}
    for host in sorted(monitors):
        host_vars = monitors[host]
        if "fleet" not in (host_vars.get("group_names") or []):
            own = role_variable_problems(host_vars)
            if own:
                problems += [f"host {host}: {p}" for p in own]
                continue
        address = str(host_vars.get("ansible_host", host))
        for node in sorted(fleet_hosts):
            for model in served_models(fleet_hosts[node], node):
                if node != host and router.unreachable_from(address, node, fleet_hosts[node], model):
                    problems.append(f"host {host}: monitoring cannot scrape model {model['name']} of {node}: it listens "
                                    f"on {model['listen']} only (loopback), which {host} at {address} cannot reach; "
                                    "accepted: a listen address the monitoring host reaches (fleet_serve_listen or the "
                                    "model's listen, with an API key)")
    # Their ports, and every watched node's exporter, in the inventory's one registry of
    # listeners (vllm_fleet.validation.ports).
    return problems + listener_problems(everyone, list(everyone))
