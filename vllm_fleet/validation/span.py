"""Models spanning nodes on Ray: the rules between the members of each span."""

from __future__ import annotations

import ipaddress

from vllm_fleet import vendors
from vllm_fleet.cluster import cluster_address
from vllm_fleet.models import DEFAULT_RAY_PORT


def span_problems(hosts: dict[str, dict], inventory: dict[str, dict] | None = None) -> list[str]:
    """The rules between the members of each spanning model (fleet_models[].span) declared by
    `hosts` (the run's), read against `inventory` (every fleet host; default: `hosts`): the
    members exist, are one vendor with one matrix that pins Ray, declare the model the same
    way, run in host mode and have distinct cluster addresses. Sizes, the head and devices
    are each host's (vllm_fleet/models.py)."""
    inventory = inventory if inventory is not None else hosts
    declared: dict[str, tuple[str, dict]] = {}
    for host in sorted(hosts):
        for model in hosts[host].get("fleet_models") or []:
            if isinstance(model, dict) and isinstance(model.get("span"), dict) and model.get("enabled", True) \
                    and isinstance(model.get("span", {}).get("nodes"), list):
                declared.setdefault(str(model.get("name")), (host, model))
    problems: list[str] = []
    for name, (declaring, model) in sorted(declared.items()):
        span = model["span"]
        nodes = [str(n) for n in span["nodes"]]
        absent = [n for n in nodes if n not in inventory]
        if absent:
            problems.append(f"model {name}: span.nodes names {absent}, not host(s) of the fleet; accepted: inventory "
                            "hosts of one <vendor>-nodes group")
        members = [n for n in nodes if n in inventory]
        for node in members:
            own = [m for m in inventory[node].get("fleet_models") or [] if isinstance(m, dict) and m.get("name") == name]
            if not own or own[0].get("span") != span or own[0].get("serve") != model.get("serve"):
                problems.append(f"model {name}: host {node} is in its span but its fleet_models "
                                f"{'do not declare it' if not own else 'declare it differently'} (as {declaring} "
                                "does); declare a spanning model once, in the vendor group's fleet_models")
        vendors_of = {n: (inventory[n].get("fleet_accelerator") or {}).get("vendor") for n in members}
        if len(set(vendors_of.values())) > 1:
            problems.append(f"model {name}: spans hosts of different vendors ({', '.join(f'{n}: {v}' for n, v in vendors_of.items())}); "
                            "a span's nodes must all be one vendor's (one <vendor>-nodes group)")
            continue
        matrices = {n: inventory[n].get("fleet_matrix") for n in members}
        first = members[0] if members else None
        differ = [n for n in members if matrices[n] != matrices.get(first)]
        if differ:
            keys = sorted({k for n in differ for k in set(matrices[n] or {}) | set(matrices[first] or {})
                           if (matrices[n] or {}).get(k) != (matrices[first] or {}).get(k)})
            problems.append(f"model {name}: the fleet_matrix of {differ} differs from {first}'s (in {', '.join(keys)}); "
                            "a span's nodes must run one matrix: set it once in the vendor group")
        vendor = vendors_of.get(first)
        if vendor in vendors.VENDORS and not vendors.contract(vendor).get("cluster"):
            supported = [v for v in vendors.VENDORS if vendors.contract(v).get("cluster")]
            problems.append(f"model {name}: vendor {vendor} has no Ray cluster contract, so its models cannot span "
                            f"nodes; accepted vendors: {', '.join(supported)}")
        for node in members:
            if not isinstance(inventory[node].get("fleet_matrix"), dict) or not inventory[node]["fleet_matrix"].get("ray"):
                problems.append(f"model {name}: spans nodes but host {node} has no fleet_matrix.ray; pin Ray there (the "
                                "version its vLLM supports, e.g. ray: \"2.49.2\")")
                break
        container = [n for n in members if inventory[n].get("fleet_deploy_mode") == "container"]
        if container:
            problems.append(f"model {name}: spans nodes but {container} run in container mode; spanning models run "
                            "in host mode only (fleet_deploy_mode: host)")
        addresses: dict[str, str] = {}
        for node in members:
            address = cluster_address(node, inventory[node])
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                problems.append(f"model {name}: host {node}'s cluster address {address!r} is no IPv4 address; set "
                                "fleet_cluster_address to the address Ray binds on that node")
                continue
            if address in addresses:
                problems.append(f"model {name}: hosts {addresses[address]} and {node} both have the cluster address "
                                f"{address} (fleet_cluster_address, else ansible_host); Ray tells its nodes apart by "
                                "address: give each member its own fleet_cluster_address")
            addresses.setdefault(address, node)
    # Each spanning model has its own Ray cluster: on a member, their ports must differ.
    for host in sorted(inventory):
        ports: dict[int, str] = {}
        for model in inventory[host].get("fleet_models") or []:
            span = model.get("span") if isinstance(model, dict) else None
            if not isinstance(span, dict) or host not in [str(n) for n in span.get("nodes") or []]:
                continue
            port = span.get("port", DEFAULT_RAY_PORT)
            if port in ports and (host in hosts):
                problems.append(f"model {model.get('name')}: its Ray port {port} on host {host} is model "
                                f"{ports[port]}'s too; give one of them another span.port")
            ports.setdefault(port, str(model.get("name")))
    return problems

