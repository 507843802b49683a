"""Ray clusters of models that span nodes (fleet_models[].span): what each member runs.

The roles (roles/blocks/ray_cluster, roles/blocks/vllm_service) and validation share these, so that
the address a member binds, its environment and its `ray start` command line are
computed in one place. vLLM spans nodes on Ray's own cluster (`ray start`, then
`vllm serve --distributed-executor-backend ray` on the head); nothing here launches
engines itself.
"""

from __future__ import annotations

from typing import Any

#: Ray's resource for the vendor's devices when the contract names none.
DEFAULT_RESOURCE = "GPU"

# What `ray start` listens on besides the head's port, at Ray's own defaults (ray/scripts/scripts.py,
# ray/_private/ray_constants.py). Ray binds its gRPC servers on every address of the node, so
# the port registry (vllm_fleet/validation/ports.py) holds these against every listener of the
# node, whatever its address.
#: The ports Ray's worker processes bind, first and last: `ray start --min/--max-worker-port`,
#: given explicitly (span.worker_ports moves them).
RAY_WORKER_PORTS = (10002, 19999)
#: The head's Ray client server (with ray[client]) and every member's dashboard agent (with ray[default]).
RAY_CLIENT_SERVER_PORT = 10001
RAY_DASHBOARD_AGENT_PORT = 52365
#: `ray start` options that vllm-fleet sets, or that would undo one of its rules (bound to the
#: cluster address, the dashboard off, the worker ports the registry holds, the session under the
#: service user's home, in the foreground for systemd): ray_cluster_start_options cannot give them.
RAY_GOVERNED_OPTIONS = ("--head", "--address", "--port", "--node-ip-address", "--include-dashboard",
                        "--dashboard-host", "--dashboard-port", "--dashboard-agent-listen-port",
                        "--ray-client-server-port", "--min-worker-port", "--max-worker-port", "--worker-port-list",
                        "--temp-dir", "--block", "--disable-usage-stats", "--num-gpus", "--resources",
                        "--redis-password", "--gcs-server-port")


def worker_ports(span: dict) -> tuple[int, int]:
    """The span's worker port range (first, last), Ray's default unless span.worker_ports moves it."""
    given = span.get("worker_ports")
    if isinstance(given, list) and len(given) == 2 and all(isinstance(p, int) and not isinstance(p, bool)
                                                           for p in given):
        return given[0], given[1]
    return RAY_WORKER_PORTS


def ray_listeners(span: dict, role: str) -> list[tuple[str, int, int]]:
    """(what, first port, last port) of what a member's `ray start` listens on, its head's port
    aside (the registry holds that one on the head's cluster address)."""
    first, last = worker_ports(span)
    out = [("Ray's worker processes", first, last),
           ("Ray's dashboard agent (with ray[default])", RAY_DASHBOARD_AGENT_PORT, RAY_DASHBOARD_AGENT_PORT)]
    if role == "head":
        out.append(("Ray's client server (with ray[client])", RAY_CLIENT_SERVER_PORT, RAY_CLIENT_SERVER_PORT))
    return out


def governed_options(options: list) -> list[str]:
    """The `ray start` options of `options` that RAY_GOVERNED_OPTIONS keeps to vllm-fleet."""
    return [str(o) for o in options
            if isinstance(o, str) and (o.split("=", 1)[0].split() or [""])[0] in RAY_GOVERNED_OPTIONS]


def cluster_address(host: str, host_vars: dict) -> str:
    """The address a node's Ray member binds and the other members reach it at:
    fleet_cluster_address, else ansible_host, else the inventory name."""
    return str(host_vars.get("fleet_cluster_address") or host_vars.get("ansible_host") or host)


def member_env(cluster: dict | None, address: str, interface: str | None, visible_env: str | None,
               devices: list[int], head_address: str, port: int) -> dict[str, str]:
    """The environment of a member's Ray unit and of vllm serve on the head: the vendor's
    cluster environment ({address} and {interface} filled in; a variable naming the
    interface is left out when the node names none, so that the library picks one), the
    model's devices as the vendor's visibility variable (Ray counts and hands out those),
    RAY_ADDRESS (vLLM's ray.init joins the cluster there), and Ray's usage reporting off
    (nodes reach nothing outside)."""
    env: dict[str, str] = {}
    for name, value in ((cluster or {}).get("env") or {}).items():
        text = str(value)
        if "{interface}" in text and not interface:
            continue
        env[name] = text.replace("{address}", address).replace("{interface}", interface or "")
    if visible_env and devices:
        env[visible_env] = ",".join(str(d) for d in devices)
    env["RAY_ADDRESS"] = f"{head_address}:{port}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def ray_start_argv(model: dict, ray: str, *, address: str, head_address: str, resource: str | None,
                   temp_dir: str, num_cpus: int = 0, object_store_bytes: int = 0,
                   extra: list[str] | None = None) -> list[str]:
    """`ray start` of this member, in the foreground (--block) for systemd: the head on the
    span's port, a worker joining it; bound to the member's address; the dashboard off;
    the model's devices on this node declared as the vendor's Ray resource."""
    span = model["span"]
    devices = len(model.get("devices") or [])
    resource = resource or DEFAULT_RESOURCE
    argv = [ray, "start", "--block", f"--node-ip-address={address}", "--disable-usage-stats",
            f"--temp-dir={temp_dir}"]
    if span["role"] == "head":
        argv += ["--head", f"--port={span['port']}", "--include-dashboard=false"]
    else:
        argv += [f"--address={head_address}:{span['port']}"]
    first, last = worker_ports(span)
    argv += [f"--min-worker-port={first}", f"--max-worker-port={last}"]
    if resource == "GPU":
        argv.append(f"--num-gpus={devices}")
    else:
        # JSON without spaces: systemd splits ExecStart= on them.
        argv.append(f'--resources={{"{resource}":{devices}}}')
    if num_cpus:
        argv.append(f"--num-cpus={num_cpus}")
    if object_store_bytes:
        argv.append(f"--object-store-memory={object_store_bytes}")
    return argv + list(extra or [])


def gate_specs(models: list[dict], addresses: dict[str, str], resource: str | None, timeout: int) -> list[dict]:
    """The head's gates (gate_spec), one per model of `models` this node heads, each member with
    its cluster address (`addresses`: host -> address, cluster_address of each)."""
    return [gate_spec(m, [{"host": h, "address": addresses[h]} for h in m["span"]["nodes"]], resource, timeout)
            for m in models if m["span"] and m["span"]["role"] == "head"]


def gate_spec(model: dict, members: list[dict[str, Any]], resource: str | None, timeout: int,
              delay: int = 2) -> dict:
    """What the gate (roles/blocks/ray_cluster/files/vllm-fleet-ray-gate) waits for: every member
    alive in the cluster with the model's devices as `resource`."""
    span = model["span"]
    head = next(m["address"] for m in members if m["host"] == span["head"])
    return {"model": model["name"], "address": f"{head}:{span['port']}", "members": members,
            "resource": resource or DEFAULT_RESOURCE, "per_node": len(model.get("devices") or []),
            "timeout": timeout, "delay": delay}


def _socket_interfaces(env: dict) -> list[str]:
    """The collective libraries' socket interface settings in `env`, as NAME=VALUE."""
    return sorted(f"{name}={value}" for name, value in env.items()
                  if str(name).endswith("_SOCKET_IFNAME") and str(value).strip())


def fabric_spec(model: dict, member: str, address: str, head_address: str, env: dict,
                checks: list[dict] | None) -> dict:
    """What library/fleet_fabric.py checks on a member of a spanning model before its Ray
    unit starts (roles/stages/preflight): its cluster address is its own, the interfaces that the
    model's environment and the member's Ray environment (`env`, :func:`member_env`) name
    for the collective libraries are up, the vendor's fabric `checks` pass on each of the
    model's devices, and a worker reaches the head's Ray port from its address."""
    span = model["span"]
    merged = {**(model.get("env") or {}), **env}
    head = {"name": f"the Ray head {span['head']} of model {model['name']}", "host": head_address,
            "port": int(span["port"])}
    reach = [] if span["role"] == "head" else [head]
    return {"member": member, "address": address, "interfaces": _socket_interfaces(merged), "reach": reach,
            "devices": list(model.get("devices") or []), "device_checks": list(checks or [])}


def head_probes(model: dict, addresses: dict[str, str]) -> list[dict]:
    """On a span's head, what each other member must reach before the head starts Ray
    (library/fleet_fabric.py run on that member): the head's Ray port from the member's
    address. `addresses` maps every member to its cluster address. The head stops naming
    the member that cannot, instead of waiting for it at its gate."""
    span = model["span"]
    head = addresses[span["head"]]
    return [{"member": host, "address": addresses[host],
             "reach": [{"name": f"the Ray head {span['head']} of model {model['name']}", "host": head,
                        "port": int(span["port"])}]}
            for host in span["nodes"] if host != span["head"]]

