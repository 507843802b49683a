"""Per-vendor rules a schema cannot express, each registered for the vendors it applies to.

The rules of one vendor live in its own module here, `vendor_rules/<vendor>.py` (a vendor
may have none), found from the vendor list; the rules every vendor gets are below.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from vllm_fleet import vendors
from vllm_fleet.models import access, is_loopback


def vendor_group_problems(host_vars: dict) -> list[str]:
    """A node is of one vendor: it belongs to at most one `<vendor>-nodes` group."""
    groups = [g for g in host_vars.get("group_names") or [] if g in {f"{v}-nodes" for v in vendors.VENDORS}]
    if len(groups) > 1:
        return [f"is in the vendor groups {' and '.join(sorted(groups))}; a node has one vendor, and which group's "
                "settings it gets would depend on group order; accepted: the host in one <vendor>-nodes group only"]
    return []


VendorRule = Callable[[dict, list[dict]], list[str]]
VENDOR_RULES: dict[str, list[VendorRule]] = {}


def vendor_rule(vendor: str):
    def register(fn: VendorRule) -> VendorRule:
        VENDOR_RULES.setdefault(vendor, []).append(fn)
        return fn
    return register


# Each vendor's own rules, first: this package's module named after the vendor, when there is one.
for _vendor in vendors.VENDORS:
    if importlib.util.find_spec(f"{__name__}.{_vendor}"):
        importlib.import_module(f"{__name__}.{_vendor}")


def _hub_clients_pinned(doc: dict, models: list[dict]) -> list[str]:
    """Models (and their LoRA adapters) fetched from a hub need that hub's client at a version of the matrix."""
    matrix = doc.get("fleet_matrix") or {}
    needs = {"modelscope": "modelscope", "huggingface": "huggingface_hub"}
    problems = []
    for m in models:
        for source in [m.get("source") or {}] + [a.get("source") or {} for a in m.get("lora_adapters") or []]:
            key = needs.get(source.get("type"))
            if key and key not in matrix:
                problems.append(f"model {m['name']}: source type {source['type']} needs fleet_matrix.{key} "
                                f"(the version of the {key} client nodes download with); accepted: a version string")
    return sorted(set(problems))


def _deploy_mode_supported(doc: dict, models: list[dict]) -> list[str]:
    """The vendor contract says which deployment modes the vendor has (Moore Threads: no image)."""
    vendor = doc["fleet_accelerator"].get("vendor")
    mode = doc.get("fleet_deploy_mode", "host")
    modes = vendors.deploy_modes(vendor)
    if mode not in modes:
        return [f"fleet_deploy_mode = {mode!r}: {vendor} nodes have no {mode} deployment "
                f"(deploy_modes of roles/vendors/{vendor}/vars/main.yml); accepted: {', '.join(modes)}"]
    return []


for _vendor in vendors.VENDORS:
    VENDOR_RULES.setdefault(_vendor, []).extend([_deploy_mode_supported, _hub_clients_pinned])


def _listen_needs_key(doc: dict, models: list[dict]) -> list[str]:
    """A model that listens beyond loopback needs an API key, or an explicit opt-out."""
    problems = []
    own = {m.get("name"): m for m in doc.get("fleet_models") or [] if isinstance(m, dict)}
    for m in models:
        settings = access(own.get(m["name"], {}), doc.get("fleet_serve_listen"), bool(doc.get("fleet_serve_api_key")),
                          doc.get("fleet_serve_unauthenticated") is True)
        listen = settings["listen"]
        if not settings["valid"]:
            problems.append(f"model {m['name']}: listen = {listen!r} is not an IP address; accepted: an IPv4 or IPv6 "
                            "address such as 127.0.0.1 (the default), 10.0.0.5, 0.0.0.0 or ::")
            continue
        if not is_loopback(listen) and not settings["api_key"] and not settings["unauthenticated"]:
            problems.append(
                f"model {m['name']}: listen = {listen!r} (the model's listen, else fleet_serve_listen) reaches beyond "
                "this node's loopback, but the model has no API key; accepted: fleet_serve_api_key (a secret: "
                "--secrets FILE, the API's secrets= or ansible-vault) or the model's secret_env.VLLM_API_KEY, "
                "or the explicit opt-out fleet_serve_unauthenticated: true (group) / unauthenticated: true "
                "(model), or a loopback listen such as 127.0.0.1")
    return problems


for _vendor in vendors.VENDORS:
    VENDOR_RULES.setdefault(_vendor, []).append(_listen_needs_key)
