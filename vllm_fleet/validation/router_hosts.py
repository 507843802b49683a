"""The router hosts (roles/services/router): one endpoint per model served by several nodes."""

from __future__ import annotations

import difflib
import re

from vllm_fleet import router
from vllm_fleet.models import engine_api_key, host_engine_api_key
from vllm_fleet.validation.ports import in_group, listener_problems, served_models
from vllm_fleet.validation.problem import Problem, _describe
from vllm_fleet.validation.roles import role_variable_problems

#: An HTTP header name (RFC 9110 token).
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}([.-]?[A-Za-z0-9]+)?$")


def _replica_problems(where: str, entry: dict, replicas: list[tuple[str, dict]]) -> list[str]:
    """Every replica behind the entry agrees on what a request's answer depends on (router.REPLICA_FIELDS).
    The values are shown as they are: validate_inventory masks secrets and URL credentials in every problem."""
    allowed = entry.get("allow_differences") if isinstance(entry.get("allow_differences"), list) else []
    return [f"{where}.name = {entry.get('name')!r}: {first} and {other} serve it with a different {field} "
            f"({mine!r} and {theirs!r}), so a request's answer depends on the replica it lands on; "
            f"accepted: the same {field} on every replica, or {field!r} in the entry's allow_differences"
            for field, first, mine, other, theirs in router.replica_differences(replicas, allowed)]


def _pool_problems(where: str, entry: dict) -> list[str]:
    """A pool (a vllm-router policy) names its two ports; an HAProxy policy has none."""
    pool = router.is_pool(entry)
    out = []
    for key in router.POOL_PORTS:
        if pool and key not in entry:
            out.append(f"{where}.{key} is missing: policy {entry.get('policy')!r} runs the vLLM project's router, "
                       f"which needs a port of its own; accepted: a free port (1024-65535) of the router host")
        elif not pool and key in entry:
            out.append(f"{where}.{key} = {_describe(entry[key])}: is for a policy of the vLLM project's router, not "
                       f"{entry.get('policy', router.DEFAULT_POLICY)!r}; accepted: no {key}, or a policy of "
                       f"{', '.join(router.VLLM_ROUTER_POLICIES)}")
    return out


def _key_problems(host: str, host_vars: dict, fleet_hosts: dict[str, dict]) -> list[str]:
    """Team keys: one per team, each unique, none the engines' own key (which would open
    the engines directly and make a team's key the fleet's)."""
    teams = host_vars.get("router_api_keys") or []
    out: list[str] = []
    if not isinstance(teams, list):
        return out
    # Every key an engine of the fleet asks for: each model's own, else its host's (models.engine_api_key).
    fleet_keys = {engine_api_key(m, v.get("fleet_serve_api_key")) for v in fleet_hosts.values()
                  for m in (v.get("fleet_models") if isinstance(v.get("fleet_models"), list) else [None])} - {""}
    names: set = set()
    keys: set = set()
    for i, team in enumerate(teams):
        if not isinstance(team, dict):
            continue  # the role spec says what is wrong
        name, key = team.get("name"), team.get("key")
        if name in names:
            out.append(str(Problem(("router_api_keys", i, "name"), name, "names a team that has a key already",
                                   "one entry per team")))
        if isinstance(key, str) and key in keys:
            out.append(str(Problem(("router_api_keys", i, "key"), key, "is another team's key too",
                                   "a key of its own per team")))
        if isinstance(key, str) and key in fleet_keys:
            out.append(str(Problem(("router_api_keys", i, "key"), key, "is the engines' own key "
                                   "(fleet_serve_api_key or a model's secret_env.VLLM_API_KEY), which opens the "
                                   "engines directly",
                                   "a key of the team's own, apart from the fleet's")))
        names.add(name)
        keys.add(key)
    header = host_vars.get("router_session_header")
    if header is not None and not (isinstance(header, str) and _HEADER.match(header)):
        out.append(str(Problem(("router_session_header",), header, "is no HTTP header name",
                               "letters, digits and !#$%&'*+.^_`|~- (e.g. X-Session-Id)")))
    return [f"host {host}: {p}" for p in out]


def _matrix_problems(host_vars: dict, entries: list) -> list[str]:
    """A router host's matrix has one component, the vLLM project's router: its version, required
    where an entry uses one of its policies."""
    matrix = host_vars.get("fleet_matrix")
    accepted = "a mapping {vllm_router: {version: '0.1.17'}} (the release of the vLLM project's router)"
    if matrix is None:
        matrix = {}
    if not isinstance(matrix, dict) or set(matrix) - {"vllm_router"}:
        return [str(Problem(("fleet_matrix",), matrix, "is not a router host's matrix", accepted))]
    component = matrix.get("vllm_router")
    if component is not None and (not isinstance(component, dict) or set(component) != {"version"}):
        return [str(Problem(("fleet_matrix", "vllm_router"), component, "is not a release", "{version: '0.1.17'}"))]
    version = (component or {}).get("version")
    if component is not None and not (isinstance(version, str) and _VERSION.match(version)):
        return [str(Problem(("fleet_matrix", "vllm_router", "version"), version, "is no release number",
                            "a version such as '0.1.17'"))]
    if version is None and any(isinstance(e, dict) and router.is_pool(e) for e in entries):
        return ["fleet_matrix.vllm_router.version is missing: a policy of the vLLM project's router needs its "
                "release pinned; accepted: a version such as '0.1.17' in the router hosts' matrix"]
    return []


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
        problems += _key_problems(host, host_vars, fleet_hosts)
        address = str(host_vars.get("ansible_host", host))
        problems += [f"host {host}: {p}" for p in _matrix_problems(host_vars, entries)]
        names: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"host {host}: router_models[{i}]"
            name = entry.get("name")
            problems += _pool_problems(where, entry)
            if name in names:
                problems.append(f"{where}: model {name!r} has a router entry already; accepted: one entry per model")
            names.add(name)
            if name not in served:
                known = ", ".join(sorted(served)) or "none"
                close = difflib.get_close_matches(str(name), list(served), n=1)
                problems.append(f"{where}.name = {name!r}: no fleet node serves a model of that name"
                                + (f" (did you mean {close[0]!r}?)" if close else "")
                                + f"; accepted: a served model name of the fleet ({known})")
            keys: dict[str, str] = {}
            replicas: list[tuple[str, dict]] = []
            for node in served.get(name, []):
                node_vars = fleet_hosts[node]
                model = next(m for m in served_models(node_vars, node) if name in m["served_model_name"])
                replicas.append((node, model))
                keys[node] = host_engine_api_key(node_vars, model["name"])
                first = served[name][0]
                if host_vars.get("router_api_keys") and keys[node] != keys[first]:
                    problems.append(f"{where}.name = {name!r}: {node} and {first} serve it with different engine "
                                    f"keys (the model's secret_env.VLLM_API_KEY, else fleet_serve_api_key), and the "
                                    f"router puts one engine key on each request where teams have their own; "
                                    f"accepted: one engine key for every node serving the model")
                if router.unreachable_from(address, node, node_vars, model):
                    problems.append(f"{where}.name = {name!r}: {node} serves it on {model['listen']} only (loopback), "
                                    f"which the router at {address} cannot reach; accepted: a listen address the "
                                    f"router reaches (fleet_serve_listen or the model's listen, with an API key)")
            problems += _replica_problems(where, entry, replicas)
    # Their ports in the inventory's one registry of listeners (vllm_fleet.validation.ports).
    return problems + listener_problems({**in_group(fleet_hosts, "fleet"), **in_group(valid, "router")}, list(valid))
