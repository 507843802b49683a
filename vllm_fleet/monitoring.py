"""What the monitoring hosts (roles/services/monitoring) scrape: every model of every fleet node, twice
(its /metrics, and its /health as a target whose `up` is the health check), and every
node's exporter.

One home for the answer, read by the role's templates (filters fleet_monitoring_targets and
fleet_monitoring_api_keys) and by validation (validation.monitoring_problems), so a
monitoring host that validation accepts is exactly one the templates can render. Models
are resolved, and their addresses chosen, by the router's code (vllm_fleet/router.py,
over vllm_fleet/models.py): a model is reached where the router would reach it.
"""

from __future__ import annotations

import re

from vllm_fleet.models import WILDCARDS, host_engine_api_key, url_host
from vllm_fleet.role_specs import role_default
from vllm_fleet.router import is_pool, node_address, served_models

#: Prometheus job names and label values built from host and model names: letters, digits, `_`.
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def safe_name(text: str) -> str:
    return _UNSAFE.sub("_", text)


def _host_address(host: str, host_vars: dict) -> str:
    return str(host_vars.get("ansible_host") or host)


def credentials_file(host: str, model: dict) -> str:
    """File name (in the role's credentials directory) of the bearer key of `model` on `host`."""
    return f"{safe_name(host)}__{safe_name(model['name'])}.key"


def model_targets(fleet_hosts: dict[str, dict]) -> list[dict]:
    """One entry per enabled model per fleet node, in host order:
    {job, node, model, served_model_name, unit, vendor, address, credentials}.

    `address` is host:port where the monitoring host connects (router.node_address);
    `credentials` the key file's name when the model has an API key, else ''."""
    out = []
    for host in sorted(fleet_hosts):
        host_vars = fleet_hosts[host]
        vendor = (host_vars.get("fleet_accelerator") or {}).get("vendor", "")
        for model in served_models(host_vars, host):
            out.append({
                "job": f"vllm_{safe_name(host)}_{safe_name(model['name'])}",
                "node": host, "model": model["name"], "served_model_name": model["served_model_name"][0],
                "unit": model["unit"], "vendor": vendor,
                "address": f"{url_host(node_address(host, host_vars, model))}:{model['port']}",
                "credentials": credentials_file(host, model) if model.get("api_key") else "",
            })
    return out


def exporter_port(host_vars: dict) -> int:
    """The host's node exporter port: its own monitoring_node_exporter_port, else the role's default."""
    port = host_vars.get("monitoring_node_exporter_port")
    if isinstance(port, int) and not isinstance(port, bool):
        return port
    return role_default("monitoring_node_exporter_port")


def node_targets(hosts: dict[str, dict]) -> list[dict]:
    """Every node's exporter (fleet nodes and monitoring hosts): {node, vendor, address}."""
    return [{"node": host, "vendor": (hosts[host].get("fleet_accelerator") or {}).get("vendor", ""),
             "address": f"{url_host(_host_address(host, hosts[host]))}:{exporter_port(hosts[host])}"}
            for host in sorted(hosts)]


def api_keys(fleet_hosts: dict[str, dict]) -> dict[str, str]:
    """{credentials file name: key} of every model with an API key. Secrets: the caller
    writes them with no_log and never shows them."""
    keys = {}
    for host in sorted(fleet_hosts):
        for model in served_models(fleet_hosts[host], host):
            if model.get("api_key"):
                keys[credentials_file(host, model)] = host_engine_api_key(fleet_hosts[host], model["name"])
    return keys


def router_targets(routers: dict[str, dict]) -> list[dict]:
    """What each router host exposes to Prometheus: HAProxy's exporter and the teams' counters
    (router_metrics_port), and each vllm-router pool's metrics (router_models[].metrics_port).
    One {job, router, model, address, path} each; `address` where the router listens (its
    ansible_host where that is a wildcard)."""
    out = []
    for host in sorted(routers):
        host_vars = routers[host]
        listen = str(host_vars.get("router_listen_address", role_default("router_listen_address")))
        address = url_host(_host_address(host, host_vars) if listen in WILDCARDS else listen)
        port = host_vars.get("router_metrics_port") or 0
        if port:
            out.append({"job": "haproxy", "router": host, "model": "", "address": f"{address}:{port}",
                        "path": "/metrics"})
            if host_vars.get("router_api_keys"):
                out.append({"job": "router_teams", "router": host, "model": "", "address": f"{address}:{port}",
                            "path": "/metrics/teams"})
        for entry in host_vars.get("router_models") or []:
            if is_pool(entry):
                out.append({"job": "vllm_router", "router": host, "model": entry["name"],
                            "address": f"{address}:{entry['metrics_port']}", "path": "/metrics"})
    return out
