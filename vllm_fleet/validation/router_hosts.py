"""The router hosts (roles/router): one endpoint per model served by several nodes."""

from __future__ import annotations

import difflib

from vllm_fleet import router
from vllm_fleet.validation.ports import in_group, listener_problems, served_models
from vllm_fleet.validation.problem import _describe
from vllm_fleet.validation.roles import role_variable_problems


def router_problems(routers: dict[str, dict], fleet_hosts: dict[str, dict]) -> list[str]:
    """Problems of the router hosts: their role variables, an entry naming a model no fleet node
    serves (`fleet_hosts`: every fleet node of the inventory, not only those of the run), and a
    frontend port used twice or already taken on the router's address (SSH, a model, another router)."""
    problems: list[str] = []
    served: dict[str, list[str]] = {}
    valid: dict[str, dict] = {}
    for host in sorted(fleet_hosts):
        for model in served_models(fleet_hosts[host], host):
            for name in model["served_model_name"]:
                if isinstance(name, str):  # another shape is the schema's to say
                    served.setdefault(name, []).append(host)
    for host in sorted(routers):
        host_vars = routers[host]
        own = role_variable_problems(host_vars)
        entries = host_vars.get("router_models", [])
        if own or not isinstance(entries, list):
            problems += [f"host {host}: {p}" for p in own or [f"router_models = {_describe(entries)}: expected a list"]]
            continue
        valid[host] = host_vars
        address = str(host_vars.get("ansible_host", host))
        names: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"host {host}: router_models[{i}]"
            name = entry.get("name")
            if name in names:
                problems.append(f"{where}: model {name!r} has a router entry already; accepted: one entry per model")
            names.add(name)
            if name not in served:
                known = ", ".join(sorted(served)) or "none"
                close = difflib.get_close_matches(str(name), list(served), n=1)
                problems.append(f"{where}.name = {name!r}: no fleet node serves a model of that name"
                                + (f" (did you mean {close[0]!r}?)" if close else "")
                                + f"; accepted: a served model name of the fleet ({known})")
            for node in served.get(name, []):
                node_vars = fleet_hosts[node]
                model = next(m for m in served_models(node_vars, node) if name in m["served_model_name"])
                if router.unreachable_from(address, node, node_vars, model):
                    problems.append(f"{where}.name = {name!r}: {node} serves it on {model['listen']} only (loopback), "
                                    f"which the router at {address} cannot reach; accepted: a listen address the "
                                    f"router reaches (fleet_serve_listen or the model's listen, with an API key)")
    # Their ports in the inventory's one registry of listeners (vllm_fleet.validation.ports).
    return problems + listener_problems({**in_group(fleet_hosts, "fleet"), **in_group(valid, "router")}, list(valid))
