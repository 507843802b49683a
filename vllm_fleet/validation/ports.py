"""Ports: one registry per address of everything that listens.

Every listener of the inventory claims its (address, port) in one registry, in one order:
each host's SSH port, each fleet node's models (explicit ports and the ones derived from
fleet_serve_base_port), the heads' Ray ports, the routers' model ports, the nodes' health
agents (when the inventory has router hosts), the nodes' model shares (when models are
distributed in waves), the node exporters
(when the inventory has monitoring hosts), Prometheus, and the mirror hosts' nginx and image
registry. A claim on a taken pair, or a port outside 1024-65535 (the SSH port excepted: it is
the admin's), is a problem of the claimant, said once, whatever groups its host is in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_fleet import monitoring, router
from vllm_fleet.cluster import cluster_address, ray_listeners
from vllm_fleet.models import DEFAULT_RAY_PORT
from vllm_fleet.role_specs import role_default
from vllm_fleet.validation.problem import Problem

_HOST = re.compile(r"^[A-Za-z0-9_.:%\[\]-]{1,253}$")
#: Ports below this one need privileges the model units do not have (they run unprivileged).
FIRST_UNPRIVILEGED_PORT = 1024
LAST_PORT = 65535
DEFAULT_SSH_PORT = 22


def is_port_number(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Claim:
    host: str
    address: str
    port: int
    who: str  #: what listens, as the holder is named to another claimant ("model x of host")
    where: str  #: the claimant's variable, as its problem starts ("model x: port 8000")
    ssh: bool = False
    model: bool = False
    #: A role variable whose range types.py checks already (only the clash with SSH is said here).
    typed: bool = False


def _groups(host_vars: dict) -> set[str]:
    groups = host_vars.get("group_names")
    return set(groups) if isinstance(groups, list) else set()


def in_group(hosts: dict[str, dict], group: str) -> dict[str, dict]:
    """`hosts` with `group` among each one's group_names (callers that know what the hosts are)."""
    return {h: {**v, "group_names": sorted(_groups(v) | {group})} for h, v in hosts.items()}


def _address(host: str, host_vars: dict) -> str:
    return str(host_vars.get("ansible_host") or host)


def ssh_port(host_vars: dict):
    return host_vars.get("ansible_port", DEFAULT_SSH_PORT)


def served_models(host_vars: dict, host: str) -> list[dict]:
    """router.served_models, or none where the host's models are of a shape the schema refuses
    (validation says so there; the registry must not stop on it)."""
    try:
        return router.served_models(host_vars, host)
    except (TypeError, AttributeError, KeyError, ValueError, IndexError):
        return []


def claims(all_hosts: dict[str, dict], resolved: dict[str, list[dict]] | None = None) -> list[Claim]:
    """Every listener of the inventory, in the registry's order. `resolved`: the fleet nodes'
    resolved models where the caller has them already (else resolved here)."""
    resolved = resolved or {}
    out: list[Claim] = []
    for host in sorted(all_hosts):
        port = ssh_port(all_hosts[host])
        if is_port_number(port):
            out.append(Claim(host, _address(host, all_hosts[host]), port, f"the SSH port of {host}",
                             f"ansible_port = {port}", ssh=True))
    fleet = sorted(h for h, v in all_hosts.items() if "fleet" in _groups(v))
    for host in fleet:
        host_vars = all_hosts[host]
        models = resolved.get(host)
        models = served_models(host_vars, host) if models is None else [
            m for m in models if m.get("enabled") and is_port_number(m.get("port"))]
        for m in models:
            out.append(Claim(host, router.node_address(host, host_vars, m), m["port"], f"model {m['name']} of {host}",
                             f"model {m['name']}: port {m['port']}"
                             + ("" if isinstance(_declared_port(host_vars, m["name"]), int)
                                else " (derived from fleet_serve_base_port)"), model=True))
    for host in fleet:
        host_vars = all_hosts[host]
        for m in host_vars.get("fleet_models") or []:
            span = m.get("span") if isinstance(m, dict) else None
            if not isinstance(span, dict) or str(span.get("head", "")) != host or m.get("enabled", True) is False:
                continue
            port = span.get("port", DEFAULT_RAY_PORT)
            if is_port_number(port):
                out.append(Claim(host, cluster_address(host, host_vars), port,
                                 f"the Ray port of model {m.get('name')} on {host}",
                                 f"model {m.get('name')}: span.port = {port}"))
    for host in sorted(h for h, v in all_hosts.items() if "router" in _groups(v)):
        host_vars = all_hosts[host]
        entries = host_vars.get("router_models") or []
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and is_port_number(entry.get("port")):
                out.append(Claim(host, _address(host, host_vars), entry["port"],
                                 f"the router port of {entry.get('name')!r} on {host}",
                                 f"router_models[{i}].port = {entry['port']}", typed=True))
            # A pool's own ports (vllm-router: its HTTP port on loopback, its metrics).
            for key in router.POOL_PORTS if isinstance(entry, dict) and router.is_pool(entry) else ():
                if is_port_number(entry.get(key)):
                    out.append(Claim(host, _address(host, host_vars), entry[key],
                                     f"the router's {key.replace('_', ' ')} of {entry.get('name')!r} on {host}",
                                     f"router_models[{i}].{key} = {entry[key]}", typed=True))
        for name, what in (("router_metrics_port", "metrics"), ("router_page_port", "chat page")):
            port = host_vars.get(name)
            if is_port_number(port) and port:
                out.append(Claim(host, _address(host, host_vars), port, f"the router's {what} on {host}",
                                 f"{name} = {port}", typed=True))
    if any("router" in _groups(v) for v in all_hosts.values()):
        for host in fleet:
            port = router.agent_port(all_hosts[host])
            if is_port_number(port):
                out.append(Claim(host, _address(host, all_hosts[host]), port, f"the health agent of {host}",
                                 f"health_agent_port = {port}", typed=True))
    if any("monitoring" in _groups(v) for v in all_hosts.values()):
        watched = sorted(h for h, v in all_hosts.items() if {"fleet", "monitoring"} & _groups(v))
        for host in watched:
            port = monitoring.exporter_port(all_hosts[host])
            if is_port_number(port):
                out.append(Claim(host, _address(host, all_hosts[host]), port, f"the node exporter of {host}",
                                 f"monitoring_node_exporter_port = {port}", typed=True))
        for host in sorted(h for h, v in all_hosts.items() if "monitoring" in _groups(v)):
            port = all_hosts[host].get("monitoring_prometheus_port", role_default("monitoring_prometheus_port"))
            if is_port_number(port):
                out.append(Claim(host, _address(host, all_hosts[host]), port, f"Prometheus of {host}",
                                 f"monitoring_prometheus_port = {port}", typed=True))
    for host in fleet:
        # In waves (docs/operations/model-distribution.md) each node serves what it holds to its peers.
        host_vars = all_hosts[host]
        if host_vars.get("model_fetch_distribution", role_default("model_fetch_distribution")) == "waves":
            port = host_vars.get("model_fetch_share_port", role_default("model_fetch_share_port"))
            if is_port_number(port):
                out.append(Claim(host, cluster_address(host, host_vars), port, f"the model share of {host}",
                                 f"model_fetch_share_port = {port}", typed=True))
    for host in sorted(h for h, v in all_hosts.items() if "mirror" in _groups(v)):
        port = all_hosts[host].get("mirror_port", role_default("mirror_port"))
        if is_port_number(port):
            out.append(Claim(host, _address(host, all_hosts[host]), port, f"the fleet's mirror on {host}",
                             f"mirror_port = {port}", typed=True))
        # Its image registry, on loopback (nginx serves it at mirror_port): claimed on the host, as the
        # router pools' loopback ports are.
        port = all_hosts[host].get("mirror_registry_port", role_default("mirror_registry_port"))
        if is_port_number(port):
            out.append(Claim(host, _address(host, all_hosts[host]), port,
                             f"the fleet's mirror's image registry on {host}", f"mirror_registry_port = {port}",
                             typed=True))
    return out


def _declared_port(host_vars: dict, name: str):
    for m in host_vars.get("fleet_models") or []:
        if isinstance(m, dict) and m.get("name") == name:
            return m.get("port")
    return None


def _range_problem(claim: Claim, ssh: int) -> str | None:
    if claim.ssh:
        return None  # connection_problems
    if claim.port == ssh and claim.address:
        return (f"{claim.where} is the node's own SSH port (ansible_port = {ssh}); accepted: a port no other service "
                "of the node listens on")
    if claim.typed:
        return None
    if claim.port < FIRST_UNPRIVILEGED_PORT:
        return (f"{claim.where} is a privileged port (below {FIRST_UNPRIVILEGED_PORT}), which the unprivileged "
                f"services cannot listen on; accepted: {FIRST_UNPRIVILEGED_PORT}-{LAST_PORT}, e.g. 8000")
    if claim.port > LAST_PORT:
        return (f"{claim.where} is beyond {LAST_PORT}, the last TCP port; accepted: "
                f"{FIRST_UNPRIVILEGED_PORT}-{LAST_PORT} (a lower fleet_serve_base_port or the model's own port)")
    return None


def listener_problems(all_hosts: dict[str, dict], run_hosts: list[str],
                      resolved: dict[str, list[dict]] | None = None) -> list[str]:
    """Ports out of range and (address, port) pairs claimed twice, for the listeners of the
    run's hosts (and the claims that collide with them)."""
    run = set(run_hosts)
    problems: list[str] = []
    taken: dict[tuple[str, int], Claim] = {}
    every = claims(all_hosts, resolved)
    problems += ray_listener_problems(all_hosts, run, every)
    for claim in every:
        ssh = ssh_port(all_hosts[claim.host])
        key = (claim.address, claim.port)
        holder = taken.get(key)
        if claim.host in run:
            why = _range_problem(claim, ssh if is_port_number(ssh) else DEFAULT_SSH_PORT)
            if why:
                problems.append(f"host {claim.host}: {why}")
                continue
        if holder is None:
            taken[key] = claim
            continue
        if holder.ssh and (holder.host == claim.host or claim.ssh):
            continue  # the node's own SSH port is said above; two hosts on one sshd are one machine
        if claim.model and holder.model and claim.host == holder.host:
            continue  # two models of one host: said by vllm_fleet.models (each model on a host needs its own port)
        if claim.host in run or holder.host in run:
            problems.append(f"host {claim.host}: {claim.where}: port {claim.port} on address {claim.address} is "
                            f"already {holder.who}; accepted: a port nothing else on that address listens on")
    return problems


def _spans_of(host: str, host_vars: dict):
    """(model name, span, role) of every enabled spanning model `host` is a member of."""
    for m in host_vars.get("fleet_models") or []:
        span = m.get("span") if isinstance(m, dict) else None
        if not isinstance(span, dict) or m.get("enabled", True) is False or m.get("state") == "absent":
            continue
        nodes = [str(n) for n in span.get("nodes") or []] if isinstance(span.get("nodes"), list) else []
        if host in nodes:
            yield str(m.get("name")), span, "head" if str(span.get("head", "")) == host else "worker"


def ray_listener_problems(all_hosts: dict[str, dict], run: set[str], every: list[Claim]) -> list[str]:
    """What a span's `ray start` listens on besides its head's port (vllm_fleet.cluster.ray_listeners:
    its workers' port range, the client server, the dashboard agent) is held on every address of
    each member, as Ray binds it: any other listener of the member in one of those ranges would
    find its port taken by Ray (a model then fails to bind at start)."""
    problems = []
    fleet = sorted(h for h, v in all_hosts.items() if "fleet" in _groups(v))
    for host in fleet:
        if host not in run:
            continue
        mine = [c for c in every if c.host == host and not c.ssh]
        for name, span, role in _spans_of(host, all_hosts[host]):
            for what, first, last in ray_listeners(span, role):
                where = f"{first}-{last}" if first != last else str(first)
                for claim in mine:
                    if first <= claim.port <= last:
                        problems.append(f"host {host}: {claim.where}: port {claim.port} is where {what} of model "
                                        f"{name} listen on this node ({where}, every address); accepted: a port "
                                        "outside it" + (", or span.worker_ports moved off it"
                                                        if "worker" in what else ""))
    return problems


def connection_problems(host_vars: dict) -> list[str]:
    """Where Ansible connects: ansible_host a host name or address (a string), ansible_port a whole number 1-65535 (INI inventories give it as a
    numeric string, which Ansible takes)."""
    problems = []
    host = host_vars.get("ansible_host")
    if "ansible_host" in host_vars and not (isinstance(host, str) and _HOST.match(host)):
        problems.append(str(Problem(("ansible_host",), host, "is not a host name or address",
                                    "a DNS name, an IPv4 or an IPv6 address, e.g. 192.0.2.11")))
    if "ansible_port" not in host_vars:
        return problems
    port = host_vars["ansible_port"]
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if is_port_number(port) and 1 <= port <= LAST_PORT:
        return problems
    return problems + [str(Problem(("ansible_port",), host_vars["ansible_port"], "is not a TCP port",
                        f"the SSH port of the host, 1-{LAST_PORT} (22 unless sshd listens elsewhere)"))]


def disabled_model_problems(host_vars: dict, doc: dict) -> list[str]:
    """A disabled model is judged like an enabled one: its own port in range and off SSH, its
    devices on the node (the registry and the device allocation count enabled models only)."""
    problems = []
    ssh = ssh_port(host_vars)
    count = (doc.get("fleet_accelerator") or {}).get("count")
    for i, model in enumerate(doc.get("fleet_models") or []):
        if not isinstance(model, dict) or model.get("enabled", True) is not False:
            continue
        port = model.get("port")
        if is_port_number(port) and (port == ssh or not FIRST_UNPRIVILEGED_PORT <= port <= LAST_PORT):
            problems.append(str(Problem(("fleet_models", i, "port"), port, "is out of range or the node's SSH port "
                                        "(a disabled model is judged as if enabled)",
                                        f"{FIRST_UNPRIVILEGED_PORT}-{LAST_PORT}, off the SSH port")))
        devices = model.get("devices")
        if is_port_number(count) and isinstance(devices, list):
            for j, device in enumerate(devices):
                if is_port_number(device) and device >= count:
                    problems.append(str(Problem(("fleet_models", i, "devices", j), device, "is not a device of the "
                                                f"node (fleet_accelerator.count is {count}; a disabled model is "
                                                "judged as if enabled)", f"0-{count - 1}")))
    return problems
