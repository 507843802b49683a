"""Which fleet nodes serve which model: the backends of the router (roles/services/router).

One home for the answer, read by the role's template (filter fleet_router_backends) and
by validation (validation.router_problems), so a router entry that validation accepts is
exactly one the template can render.
"""

from __future__ import annotations

import re
from typing import Any

from vllm_fleet.models import WILDCARDS, host_engine_api_key, is_loopback, node_models, url_host
from vllm_fleet.role_specs import role_default

#: HAProxy names (backends, servers) take letters, digits and `-_.:`; anything else becomes `_`.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")

#: The routing policies of a router entry (`router_models[].policy`). HAProxy serves the first
#: three itself, with the balance algorithm named here: `session` hashes the request's
#: session header (router_session_header), else its body's OpenAI `user`, so a conversation
#: goes back to the replica that holds its prefix. The others are the vLLM project's router
#: (vllm-router, PyPI): a pool process per entry on the router host, in front of the entry's
#: engines, behind HAProxy (which keeps the keys, limits and health of the front door).
HAPROXY_POLICIES = {"round_robin": "roundrobin", "least_loaded": "leastconn", "session": "hash"}
VLLM_ROUTER_POLICIES = ("cache_aware", "power_of_two", "consistent_hash", "sticky_least_loaded")
POLICIES = (*HAPROXY_POLICIES, *VLLM_ROUTER_POLICIES)
DEFAULT_POLICY = "least_loaded"
#: A pool's own ports (on the router host's loopback; its metrics on the router's address).
POOL_PORTS = ("pool_port", "metrics_port")
_HAPROXY_TIME = re.compile(r"^([0-9]+)(us|ms|s|m|h|d)?$")
_UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def is_pool(entry: dict) -> bool:
    """An entry the vLLM project's router serves (its policy is one of VLLM_ROUTER_POLICIES)."""
    return entry.get("policy", DEFAULT_POLICY) in VLLM_ROUTER_POLICIES


def haproxy_seconds(value: Any) -> int:
    """An HAProxy time ("2s", "500ms", "1m"; a bare number is milliseconds) in whole seconds,
    at least 1: vllm-router takes its health check interval in seconds."""
    match = _HAPROXY_TIME.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is no HAProxy time (e.g. 2s, 500ms)")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2) or "ms"]
    return max(1, round(seconds))


def haproxy_name(text: str) -> str:
    return _UNSAFE.sub("_", text)


def served_models(host_vars: dict, host: str) -> list[dict]:
    """The enabled, resolved models of fleet node `host` (ports filled in as the node gets them;
    a model spanning nodes only on its head, where vllm serve runs: every reader of what a node
    serves, the router, monitoring, status and bench, asks with the host's name), from the one
    resolution (vllm_fleet.models.node_models)."""
    models, _ = node_models(host_vars, host)
    return [m for m in models if m.get("enabled") and isinstance(m.get("port"), int)]


def node_address(host: str, host_vars: dict, model: dict) -> str:
    """Where the router reaches `model` on `host`: the address the model listens on when it
    names one other nodes reach, else (a wildcard, or loopback) the node's ansible_host, else
    its inventory name. A loopback listen is reachable only from the node itself (or, in the
    lab, from nodes sharing the host's loopback): `unreachable_from` says when it is not."""
    listen = str(model.get("listen") or "")
    if listen not in WILDCARDS and not is_loopback(listen):
        return listen
    return str(host_vars.get("ansible_host") or host)


def agent_port(host_vars: dict) -> int:
    """The port of the node's health agent (roles/blocks/health_agent): its own, else the role's default."""
    port = host_vars.get("health_agent_port")
    return port if isinstance(port, int) and not isinstance(port, bool) else role_default("health_agent_port")


def agent_address(host: str, host_vars: dict, server_address: str) -> str:
    """Where a router asks the node's health agent: the address it listens on when that names
    one other nodes reach, else the address the router reaches the node's model at."""
    listen = host_vars.get("health_agent_listen_address", role_default("health_agent_listen_address"))
    listen = str(listen or "")
    return listen if listen and listen not in WILDCARDS and not is_loopback(listen) else server_address


def unreachable_from(router_address: str, host: str, host_vars: dict, model: dict) -> bool:
    """A model listening on loopback only, on a node whose address is not the router's own
    loopback: the router cannot connect to it."""
    address = str(host_vars.get("ansible_host") or host)
    return (is_loopback(str(model.get("listen") or "127.0.0.1"))
            and not (is_loopback(address) and is_loopback(router_address)) and address != router_address)


def backends(router_models: list[dict], fleet_hosts: dict[str, dict]) -> list[dict]:
    """One backend per router entry: {name, port, backend, servers: [{name, host, address, port}]}.

    `name` is a served model name; its servers are every fleet node serving it, in host order.
    """
    served = {host: served_models(fleet_hosts[host], host) for host in sorted(fleet_hosts)}
    out = []
    for entry in router_models or []:
        name = entry.get("name")
        servers = []
        for host, models in served.items():
            for model in models:
                if name in model["served_model_name"]:
                    address = node_address(host, fleet_hosts[host], model)
                    servers.append({"name": haproxy_name(host), "host": host, "model": model["name"],
                                    "address": address, "port": model["port"],
                                    "agent_address": agent_address(host, fleet_hosts[host], address),
                                    "agent_port": agent_port(fleet_hosts[host])})
        backend = {**entry, "policy": entry.get("policy", DEFAULT_POLICY), "backend": haproxy_name(f"model_{name}"),
                   "servers": servers, "pool": is_pool(entry)}
        backend["balance"] = HAPROXY_POLICIES.get(backend["policy"])
        if backend["pool"]:
            backend["unit"] = f"vllm-fleet-router-{backend['backend']}"
            backend["workers"] = [worker_url(server) for server in servers]
        out.append(backend)
    return out


#: What every replica behind one router entry must agree on, so that a request gets the same
#: behaviour wherever it lands (vendors, devices and ports may differ): name -> how to read it
#: from a resolved model. An entry's `allow_differences` names the ones it lets differ.
REPLICA_FIELDS = {
    "served_model_name": lambda m: sorted(str(n) for n in m.get("served_model_name") or []),
    "kind": lambda m: m.get("kind"),
    "source": lambda m: m.get("source"),
    "revision": lambda m: _serve(m, "revision"),
    "max_model_len": lambda m: _serve(m, "max_model_len"),
    "tokenizer": lambda m: _serve(m, "tokenizer", "tokenizer_revision", "tokenizer_mode"),
    "chat_template": lambda m: _serve(m, "chat_template"),
    "dtype": lambda m: _serve(m, "dtype"),
    "quantization": lambda m: _serve(m, "quantization"),
    "lora_adapters": lambda m: sorted(str(a.get("name")) for a in m.get("lora_adapters") or [] if isinstance(a, dict)),
}


def _serve(model: dict, *keys: str):
    """A resolved model's vllm serve option (several: their values, as a list)."""
    serve = model.get("serve") or {}
    return serve.get(keys[0]) if len(keys) == 1 else [serve.get(k) for k in keys]


def replica_differences(replicas: list[tuple[str, dict]], allowed=()) -> list[tuple[str, str, Any, str, Any]]:
    """(field, first host, its value, other host, its value) for each REPLICA_FIELDS field on which a
    replica (host, resolved model) differs from the first one; fields in `allowed` left out."""
    out = []
    if len(replicas) < 2:
        return out
    (first, first_model), *others = replicas
    for field, read in REPLICA_FIELDS.items():
        if field in allowed:
            continue
        for host, model in others:
            if read(model) != read(first_model):
                out.append((field, first, read(first_model), host, read(model)))
    return out


def server_keys(backend: dict, fleet_hosts: dict[str, dict]) -> dict[str, str]:
    """Each server's engine key: host -> the key its engine asks for (models.host_engine_api_key)."""
    return {server["host"]: host_engine_api_key(fleet_hosts.get(server["host"], {}), server.get("model"))
            for server in backend.get("servers") or []}


def engine_key(backend: dict, fleet_hosts: dict[str, dict]) -> str:
    """The key the router puts on a backend's requests in a team's stead: its engines' one key
    (validation refuses servers of one model with different keys where teams have keys); ''
    when they ask for none."""
    keys = server_keys(backend, fleet_hosts)
    return next(iter(keys.values()), "")


def worker_url(server: dict) -> str:
    """A server of a backend as vllm-router names its workers (`--worker-urls`, /add_worker)."""
    return f"http://{url_host(server['address'])}:{server['port']}"


def pool_argv(backend: dict, executable: str, check_interval: Any, check_fall: int, check_rise: int,
              metrics_address: str, timeout: Any) -> list[str]:
    """The command line of one entry's vllm-router but its workers: its policy, on the router
    host's loopback (HAProxy in front), its Prometheus metrics on `metrics_address`, health
    checks as HAProxy's (the same interval, failures and successes). The workers follow from
    the unit's environment file (`--worker-urls $WORKERS`), so a node added or removed changes
    that file only, and the running router learns it through its API, without a restart that
    would cut the answers streaming through it. No --api-key: HAProxy puts the engines' key
    on every request, and a key on a command line is readable in /proc.

    cache_aware's own knobs (--cache-threshold, --balance-abs-threshold, --balance-rel-threshold,
    --eviction-interval-secs, --max-tree-size) are left at vllm-router's defaults (0.1.17: 0.3,
    64, 1.5, 120 s, 2**25 characters): scripts/bench-routing found cache_aware at the ceiling of
    the one-engine replay with one request at a time (docs/performance/routing.md), so no setting
    could raise its hit rate there; a default changes here only when a measurement shows it helps."""
    return [executable, "--host", "127.0.0.1", "--port", str(backend["pool_port"]), "--policy", backend["policy"],
            "--prometheus-host", metrics_address, "--prometheus-port", str(backend["metrics_port"]),
            "--health-check-interval-secs", str(haproxy_seconds(check_interval)),
            "--health-failure-threshold", str(int(check_fall)), "--health-success-threshold", str(int(check_rise)),
            # One failed request opens the engine's circuit: the router's retry of that request
            # goes to another engine at once, as HAProxy's redispatch does, instead of trying the
            # dead one again until its health check fails (measured in the router lab: with the
            # default threshold, requests to a just-stopped engine failed).
            "--cb-failure-threshold", "1",
            # ... and closes again (half-open, then a trial request) as soon as HAProxy would put a
            # server back (its interval times its rise), not after the router's default minute:
            # an engine restarted in a rollout takes requests again once it answers.
            "--cb-timeout-duration-secs", str(haproxy_seconds(check_interval) * max(1, int(check_rise))),
            "--request-timeout-secs", str(haproxy_seconds(timeout)),
            "--worker-startup-timeout-secs", "5", "--worker-startup-check-interval", "1", "--log-level", "warning"]


def nginx_listen(listen: Any, port: Any) -> str:
    """nginx's `listen` of a server on `listen`:`port`: the port alone for IPv4's wildcard (every
    IPv4 address), `[address]:port` for IPv6, `address:port` otherwise."""
    listen = str(listen if listen is not None else "")
    if listen in WILDCARDS and ":" not in listen:
        return str(int(port))
    return f"{url_host(listen)}:{int(port)}"


def router_listeners(router_models: list[dict], listen_address: str) -> list[tuple[str, Any]]:
    """(address, port) of every frontend a router host opens."""
    return [(listen_address, e.get("port")) for e in router_models or []]


def routes(node: str, routers: dict[str, list[dict]], fleet_hosts: dict[str, dict]) -> list[dict]:
    """The routers in front of `node`: one {router, model, router_models} per router host and
    served model name of which `node` is a server, routers in name order. A rollout drains
    the node on each before its units restart and readies it after (roles/services/fleet_rollout);
    `router_models` is the router's own list, which its drain tasks resolve the server from."""
    out = []
    for router_host in sorted(routers):
        entries = routers[router_host] or []
        for backend in backends(entries, fleet_hosts):
            if any(server["host"] == node for server in backend["servers"]):
                out.append({"router": router_host, "model": backend["name"], "router_models": entries})
    return out


def page_config(backends_: list[dict], fleet_hosts: dict[str, dict], title: str, currency: str,
                presets: list[str], node_metrics: Any = ()) -> dict:
    """The chat page's config.json (roles/services/router/files/chat/chat.js reads it): each endpoint's
    model with its version (the source repository and revision its first node fetched), prices
    and replicas (`node_metrics`: the hosts whose exporter the page server proxies); every path
    relative to the page, served by the router host's page server."""
    models = []
    for backend in backends_:
        version = ""
        for server in backend["servers"][:1]:
            model = next((m for m in served_models(fleet_hosts[server["host"]], server["host"])
                          if backend["name"] in m["served_model_name"]), {})
            source = model.get("source") or {}
            version = "@".join(str(p) for p in (source.get("repo"), source.get("revision")) if p)
        models.append({
            "name": backend["name"], "version": version, "path": f"models/{backend['name']}",
            "price_input_per_1k": float(backend.get("price_input_per_1k", 0)),
            "price_output_per_1k": float(backend.get("price_output_per_1k", 0)),
            "replicas": [{"node": s["host"], "metrics": f"fleet/{s['host']}/{backend['name']}/metrics",
                          **({"node_metrics": f"fleet/{s['host']}/node/metrics"} if s["host"] in node_metrics else {})}
                         for s in backend["servers"]]})
    return {"title": title, "currency": currency, "presets": list(presets), "models": models}


def page_upstreams(backends_: list[dict], exporter_ports: dict[str, int]) -> list[dict]:
    """What the page server proxies besides the endpoints: {path, url} of each replica's engine
    metrics and each node's exporter (`exporter_ports`: host -> port; empty without monitoring,
    where nodes have none), for the page's fleet panel."""
    out, nodes = [], {}
    for backend in backends_:
        for s in backend["servers"]:
            out.append({"path": f"/fleet/{s['host']}/{backend['name']}/metrics", "url": f"{worker_url(s)}/metrics"})
            nodes[s["host"]] = s["address"]
    for host, address in sorted(nodes.items()):
        if exporter_ports.get(host):
            url_host = f"[{address}]" if ":" in address else address
            out.append({"path": f"/fleet/{host}/node/metrics",
                        "url": f"http://{url_host}:{exporter_ports[host]}/metrics"})
    return out
