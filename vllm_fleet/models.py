"""From the inventory's `fleet_models` to fully resolved served models.

One function, `resolve_models`, turns what a user writes (a model with a kind and
a few flags) into what the roles deploy and `plan` shows: the launch profile of
its kind merged with the group's defaults and the model's own flags, its port and
its devices allocated without overlap, and its environment. Validation, the
roles' templates and `vllm-fleet plan` all call it, so there is one source of truth.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import ipaddress
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet import vendors
from vllm_fleet.render import env_file

DATA_DIR = Path(__file__).resolve().parent / "data"

#: Short spellings of vLLM flags that users copy from recipes (`-tp 1`), mapped to the long name.
FLAG_ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
                "q": "quantization", "o": "compilation_config"}
#: Flags the resolver sets itself from other model fields; writing them in `serve` is an error.
RESERVED_FLAGS = {"port": "port", "model": "path", "model_tag": "path", "lora_modules": "lora_adapters",
                  "host": "listen", "api_key": "secret_env.VLLM_API_KEY"}
DEFAULT_BASE_PORT = 8000
#: The same flags in a group's serve defaults or profiles, and where they belong instead.
_GROUP_RESERVED = {"host": "fleet_serve_listen (or a model's listen)",
                   "api_key": "fleet_serve_api_key (a secret: --secrets FILE, secrets= or ansible-vault)"}
#: Where a model listens unless its group (fleet_serve_listen) or itself (listen) says otherwise.
DEFAULT_LISTEN = "127.0.0.1"


#: Listen addresses that name no one address (every interface): a client must pick one.
WILDCARDS = frozenset(["", "0.0.0.0", "::", "[::]", "*"])


def unit_name(model: str, program: str = "vllm") -> str:
    """The systemd unit (without .service) of a model's engine ("vllm") or of its Ray member ("ray")."""
    return f"{program}-{model}"


def is_served(model: dict) -> bool:
    """Whether an inventory model is served: `enabled: false` and `state: absent` both say it is not."""
    return bool(model.get("enabled", True)) if model.get("state", "present") != "absent" else False


def engine_models(models: list[dict]) -> list[dict]:
    """Of a node's resolved models (node_models), those whose `vllm serve` runs on it: the enabled
    ones, a spanning model's on its head only (its other members run Ray only)."""
    return [m for m in models if m["enabled"] and (not m["span"] or m["span"]["role"] == "head")]


def span_models(models: list[dict]) -> list[dict]:
    """Of a node's resolved models, the enabled ones that span nodes with it (head or worker):
    roles/blocks/ray_cluster forms their clusters."""
    return [m for m in models if m["enabled"] and m["span"]]


def readiness_checks(models: list[dict], smoke_units: list[str], prompt: str, inventory_models: Any,
                     group_key: Any = None) -> list[dict]:
    """What the readiness helper (roles/blocks/vllm_service/files/vllm-fleet-wait) checks per model
    of `models` (engine_models): its /health, and a smoke request of its kind where its unit is
    one of `smoke_units`, with the key its engine asks for (a secret: no_log where it is used)."""
    return [{"unit": m["unit"], "name": m["name"], "url": m["url"],
             "smoke": m["smoke"] if m["unit"] in smoke_units else None,
             "model": m["served_model_name"][0], "prompt": prompt, "config": f"{m['path']}/config.json",
             "key": engine_api_key(inventory_model(inventory_models, m["name"]), group_key)}
            for m in models]


def spans_node(models: Any, host: Any) -> bool:
    """Whether `host` is a member of a span of one of `models` (its fleet_models) that is served:
    the node then runs Ray (vllm_fleet.release.node_pins installs it there, and only there)."""
    for model in models or []:
        span = model.get("span") if isinstance(model, dict) else None
        if isinstance(span, dict) and isinstance(span.get("nodes"), list) and is_served(model) \
                and str(host) in [str(n) for n in span["nodes"]]:
            return True
    return False


def url_host(address: str) -> str:
    """An address as a URL's host: IPv6 in brackets."""
    address = str(address).strip("[]")
    return f"[{address}]" if ":" in address else address


def local_address(listen: Any, url: bool = False) -> str:
    """Where a host reaches its own listener on `listen`: its loopback for a wildcard (IPv6's
    for `::`), else that address; as a URL's host (IPv6 in brackets) with `url`. The one home of
    that rule: readiness checks of the router's endpoints, Prometheus and the node exporter,
    nginx's upstreams (filter fleet_local_address)."""
    listen = str(listen if listen is not None else "")
    address = "::1" if listen in ("::", "[::]") else "127.0.0.1" if listen in WILDCARDS else listen.strip("[]")
    return url_host(address) if url else address


def is_loopback(address: str) -> bool:
    """True for addresses only this node reaches (127.0.0.0/8, ::1); False for anything else,
    the wildcards 0.0.0.0 and :: included (they listen on every interface)."""
    try:
        return ipaddress.ip_address(str(address)).is_loopback
    except ValueError:
        return False


def inventory_model(models: Any, name: Any) -> dict:
    """The inventory's entry (of a host's `fleet_models`) named `name`: the first, as
    roles/blocks/vllm_service picks it (`selectattr('name', 'equalto', ...) | first`); {} if none."""
    return next((m for m in (models if isinstance(models, list) else [])
                 if isinstance(m, dict) and m.get("name") == name), {})


def engine_api_key(model: Any, group_key: Any = None) -> str:
    """The API key a model's engine asks for, as roles/blocks/vllm_service gives it (VLLM_API_KEY in the
    model's secret environment): the model's own secret_env.VLLM_API_KEY over its group's
    fleet_serve_api_key (`group_key`); '' when neither has one. `model`: the inventory's entry.

    A missing, None, false, empty or blank value is no key (vLLM takes an empty key as none),
    so the group's stands; a key is given as written (str). The one home of the rule: monitoring
    (Prometheus' bearer keys), live status, bench, access() below (whether a model has a key),
    the readiness helper's checks (filter fleet_engine_api_key). Validation refuses empty, blank
    and non-string keys (validation.secrets), so on a valid inventory no case here is ambiguous.
    """
    secret = model.get("secret_env") if isinstance(model, dict) else None
    own = secret.get("VLLM_API_KEY") if isinstance(secret, dict) else None
    for key in (own, group_key):
        if key and str(key).strip():
            return str(key)
    return ""


def host_engine_api_key(host_vars: dict, name: Any) -> str:
    """engine_api_key of the host's model `name` (its inventory name), with the host's
    fleet_serve_api_key as the group's: what every reader of a node's models sends."""
    return engine_api_key(inventory_model(host_vars.get("fleet_models"), name), host_vars.get("fleet_serve_api_key"))


def access(model: dict, listen: Any = None, api_key: bool = False, unauthenticated: bool = False) -> dict:
    """Where a model listens and how it is protected: its own `listen`, `unauthenticated` and
    secret_env.VLLM_API_KEY over its group's (fleet_serve_listen, whether fleet_serve_api_key
    is set, fleet_serve_unauthenticated). `valid`: the listen address is an IP address."""
    own_listen = model.get("listen")
    address = own_listen if isinstance(own_listen, str) and own_listen else (
        listen if isinstance(listen, str) and listen else DEFAULT_LISTEN)
    try:
        ipaddress.ip_address(address)
        valid = True
    except ValueError:
        valid = False
    own_open = model.get("unauthenticated")
    # The group's key (a boolean here: plans never carry the key), or the model's own.
    return {"listen": address, "valid": valid, "api_key": bool(api_key) or bool(engine_api_key(model)),
            "unauthenticated": bool(unauthenticated if own_open is None else own_open)}


def local_url(listen: str, port: Any) -> str:
    """The URL at which a client on the node itself reaches a model listening on `listen`."""
    try:
        ip = ipaddress.ip_address(str(listen))
    except ValueError:
        ip = ipaddress.ip_address(DEFAULT_LISTEN)
    if ip.is_unspecified:
        ip = ipaddress.ip_address("::1" if ip.version == 6 else DEFAULT_LISTEN)
    return f"http://[{ip}]:{port}" if ip.version == 6 else f"http://{ip}:{port}"


@lru_cache(maxsize=1)
def builtin_profiles() -> dict[str, dict]:
    return yaml.safe_load((DATA_DIR / "launch_profiles.yml").read_text())


def profiles(overrides: dict | None = None) -> dict[str, dict]:
    """Built-in launch profiles with the inventory's `fleet_launch_profiles` merged in."""
    merged = copy.deepcopy(builtin_profiles())
    for kind, prof in (overrides or {}).items():
        base = merged.setdefault(kind, {"serve": {}, "env": {}, "smoke": "chat"})
        for key, value in (prof or {}).items():
            if key in ("serve", "env") and isinstance(value, dict):
                base.setdefault(key, {}).update(value)
            else:
                base[key] = value
    return merged


@lru_cache(maxsize=1)
def max_devices() -> int:
    """The most accelerators a node has: the schema's fleet_accelerator.count maximum (one home)."""
    schema = yaml.safe_load((DATA_DIR / "inventory.schema.yml").read_text())
    return int(schema["$defs"]["accelerator"]["properties"]["count"]["maximum"])


def flag_key(name: str) -> str:
    """Normalise a flag name: `--gpu-memory-utilization`, `gpu-memory-utilization` -> `gpu_memory_utilization`."""
    key = name.lstrip("-").replace("-", "_").lower()
    return FLAG_ALIASES.get(key, key)


def _normalise_serve(serve: dict | None) -> dict:
    return {flag_key(k): v for k, v in (serve or {}).items()}


def env_value(value: Any) -> str:
    """Environment values as the seeds write them (True stays 'True', 1 stays '1')."""
    return str(value)


def parallel_size(serve: dict) -> int:
    """Devices one replica needs: tensor x pipeline x data parallel sizes."""
    size = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = serve.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            size *= value
    return size


#: Ray's GCS port on a spanning model's head unless its span sets `port` (Ray's default).
DEFAULT_RAY_PORT = 6379


def node_devices(model: dict) -> int:
    """Devices a model needs on one node: tensor x pipeline x data parallel sizes, except for a
    model that spans nodes, whose pipeline stages are its nodes (tensor parallel inside one)."""
    serve = model.get("serve") or {}
    if model.get("span"):
        tp = serve.get("tensor_parallel_size")
        return tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else 1
    return parallel_size(serve)


def _need_why(model: dict) -> str:
    return ("tensor_parallel_size on each node it spans" if model.get("span")
            else "tensor x pipeline x data parallel sizes")


def _span(model: dict, serve: dict, host: str | None, where: str, problems: list[str]) -> dict | None:
    """A spanning model's span as this host sees it, its serve flags completed for Ray.

    The layout accepted is vLLM's documented multi-node one: tensor parallel inside a node
    over the node's devices for the model, pipeline parallel across the nodes, so
    pipeline_parallel_size = the number of nodes and tensor_parallel_size = the devices the
    model takes on each node (tp x pp = devices per node x nodes). The rules between hosts
    (members exist, one vendor, one matrix, one declaration) are validation's.
    """
    span = model.get("span")
    if not isinstance(span, dict):
        return None
    nodes = [str(n) for n in span.get("nodes") or []]
    head = str(span.get("head", ""))
    name = model.get("name")
    if head not in nodes:
        problems.append(f"{where}.span.head = {head!r} is not one of its nodes {nodes}; accepted: one of span.nodes "
                        "(the member that runs Ray's head and vllm serve)")
    tp, pp = serve.get("tensor_parallel_size"), serve.get("pipeline_parallel_size")
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        problems.append(f"model {name}: spans {len(nodes)} nodes but serve.tensor_parallel_size is {tp!r}; set it to "
                        "the devices the model takes on each node (tensor parallel inside a node)")
    if pp != len(nodes):
        problems.append(f"model {name}: spans {len(nodes)} nodes but serve.pipeline_parallel_size is {pp!r}; set it to "
                        f"{len(nodes)} (pipeline parallel across nodes, one stage per node: tp x pp = devices per node "
                        "x nodes)")
    dp = serve.get("data_parallel_size")
    if dp not in (None, 1):
        problems.append(f"model {name}: spans nodes with serve.data_parallel_size {dp!r}; a spanning model is one "
                        "replica (tensor x pipeline parallel): remove data_parallel_size, or serve replicas as "
                        "separate models")
    devices = model.get("devices")
    if isinstance(devices, list) and devices and isinstance(tp, int) and isinstance(pp, int) \
            and len(devices) * len(nodes) != tp * pp:
        problems.append(f"model {name}: tp x pp = {tp} x {pp} = {tp * pp} devices, but devices gives {len(devices)} "
                        f"per node x {len(nodes)} nodes = {len(devices) * len(nodes)}; list tensor_parallel_size "
                        "devices (the same on every member)")
    backend = serve.get("distributed_executor_backend")
    if backend not in (None, "ray"):
        problems.append(f"model {name}: spans nodes, so serve.distributed_executor_backend must be ray (or left out), "
                        f"not {backend!r}")
    serve["distributed_executor_backend"] = "ray"
    role = None if host is None else ("head" if host == head else "worker")
    port = span.get("port", DEFAULT_RAY_PORT)
    resolved = {"nodes": nodes, "head": head, "port": port, "role": role, "unit": unit_name(name, "ray")}
    first_last = span.get("worker_ports")
    if isinstance(first_last, list) and len(first_last) == 2:
        if isinstance(first_last[0], int) and isinstance(first_last[1], int) and first_last[0] > first_last[1]:
            problems.append(f"model {name}: span.worker_ports = {first_last}: the first port is above the last; "
                            "accepted: [first, last] with first <= last, e.g. [10002, 19999]")
        resolved["worker_ports"] = list(first_last)
    return resolved


def _lora_adapters(model: dict, serve: dict, where: str, problems: list[str]) -> list[dict]:
    """The model's LoRA adapters, added to its `serve` flags as vLLM takes them.

    `lora_adapters: [{name, path, source}]` becomes ``--enable-lora --lora-modules
    name=path ...``: vLLM refuses --lora-modules without --enable-lora, and loads every
    adapter at start-up (a duplicate name stops it with "already been loaded").
    """
    adapters = [a for a in model.get("lora_adapters") or [] if isinstance(a, dict)]
    if not adapters:
        return []
    names = [str(a.get("name")) for a in adapters]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}.lora_adapters: the name {dup!r} is used more than once; each adapter needs its "
                        "own name")
    if serve.get("enable_lora") is False:
        problems.append(f"{where}.serve.enable_lora = false, but lora_adapters lists {len(adapters)} adapter(s) and "
                        "vLLM loads adapters only with --enable-lora; accepted: leave enable_lora out (models with "
                        "adapters get it) or true")
    serve["enable_lora"] = True
    serve["lora_modules"] = [f"{a.get('name')}={a.get('path')}" for a in adapters]
    return [{"name": a.get("name"), "path": a.get("path"), "source": a.get("source") or {"type": "path"}}
            for a in adapters]


def resolve_models(models: list[dict] | None, accelerator: dict | None, *,
                   serve_defaults: dict | None = None, serve_env: dict | None = None,
                   launch_profiles: dict | None = None, base_port: int | None = None,
                   listen: str | None = None, api_key: bool = False,
                   unauthenticated: bool = False, host: str | None = None) -> tuple[list[dict], list[str]]:
    """Resolve a host's models; return (resolved models, problems).

    `listen`, `api_key` and `unauthenticated` are the group's fleet_serve_listen, whether
    it has a fleet_serve_api_key (never the key itself: resolved models are shown in plans
    and logs) and fleet_serve_unauthenticated; a model's own `listen`, `unauthenticated`
    and secret_env.VLLM_API_KEY win over them.

    `host` is the inventory name of the node resolved for: a model with a `span` is this
    node's only if the host is one of its nodes (`span.role` says head or worker; a worker
    runs Ray only: no port, no URL). Without `host`, spanning models are resolved as
    declared (role None), as validation reads a group's models.

    Problems are sentences naming the model, the field, the value and what is
    accepted; the caller adds the host name. Models with `enabled: false` (or `state:
    absent`) are resolved (so they stay valid) but get no port or devices.
    """
    accelerator = accelerator or {}
    vendor = accelerator.get("vendor")
    # A count beyond any node's (the schema refuses it) is read as none: the allocation below
    # walks every device, and must not walk a billion.
    count = accelerator.get("count")
    count = count if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= max_devices() else 0
    profs = profiles(launch_profiles)
    # A wrong type is the schema's to report; carry on with the default meanwhile.
    base_port = base_port if isinstance(base_port, int) and not isinstance(base_port, bool) else DEFAULT_BASE_PORT
    problems: list[str] = []
    resolved: list[dict] = []
    def env_problem(env: dict | None) -> str | None:
        try:
            env_file({k: env_value(v) for k, v in (env or {}).items() if v is not None})
        except ValueError as exc:
            return str(exc)
        return None

    # Shared environments are checked once and blamed where they are written, not on each model.
    if isinstance(serve_env, dict) and (problem := env_problem(serve_env)):
        problems.append(f"fleet_serve_env: {problem}")
    for kind, prof in (launch_profiles or {}).items():
        if isinstance(prof, dict) and isinstance(prof.get("env"), dict) and (problem := env_problem(prof["env"])):
            problems.append(f"fleet_launch_profiles.{kind}.env: {problem}")

    for where, flags in [("fleet_serve_defaults", serve_defaults)] + [
            (f"fleet_launch_profiles.{k}.serve", (p or {}).get("serve")) for k, p in (launch_profiles or {}).items()
            if isinstance(p, dict)]:
        for key in _normalise_serve(flags if isinstance(flags, dict) else {}):
            if key in _GROUP_RESERVED:
                problems.append(f"{where}.{key}: set {_GROUP_RESERVED[key]} instead")

    # Pass 1: merge flags and environment.
    for i, model in enumerate(models or []):
        if not isinstance(model, dict):
            continue
        name = model.get("name", f"#{i}")
        where = f"fleet_models[{i}] ({name})"
        span_nodes = (model.get("span") or {}).get("nodes") if isinstance(model.get("span"), dict) else None
        if host is not None and isinstance(span_nodes, list) and host not in [str(n) for n in span_nodes]:
            continue  # a spanning model of other hosts of the group
        kind = model.get("kind")
        prof = profs.get(kind)
        if prof is None:
            problems.append(f"{where}.kind = {kind!r}: accepted kinds are {', '.join(sorted(profs))}")
            prof = {"serve": {}, "env": {}, "smoke": "chat"}
        own_serve = _normalise_serve(model.get("serve"))
        for key in own_serve:
            if key in RESERVED_FLAGS:
                problems.append(f"{where}.serve.{key}: set it as the model's `{RESERVED_FLAGS[key]}` field instead")
        serve = {**_normalise_serve(serve_defaults), **_normalise_serve(prof.get("serve")), **own_serve}
        serve = {k: v for k, v in serve.items() if v is not None and k not in RESERVED_FLAGS}
        merged_env = {**(serve_env or {}), **(prof.get("env") or {}), **(model.get("env") or {})}
        env = {k: env_value(v) for k, v in merged_env.items() if v is not None}
        own_env = model.get("env")
        if isinstance(own_env, dict) and (problem := env_problem(own_env)):
            problems.append(f"{where}.env: {problem}")
        for secret_name, secret_value in (model.get("secret_env") or {}).items():
            try:
                env_file({secret_name: secret_value})
            except ValueError:
                # Never echo a secret's value in a message.
                problems.append(f"{where}.secret_env.{secret_name}: the value has quotes, backslashes, a newline "
                                "or surrounding spaces, which environment files cannot carry")
        adapters = _lora_adapters(model, serve, where, problems)
        span = _span(model, serve, host, where, problems)
        served = serve.pop("served_model_name", None) or name
        secret_names = set((model.get("secret_env") or {}).keys())
        if api_key:
            secret_names.add("VLLM_API_KEY")
        reach = access(model, listen, api_key, unauthenticated)
        resolved.append({
            "name": name,
            "kind": kind,
            "unit": unit_name(name),
            # `state: absent` says what `enabled: false` says: not served here, its unit removed.
            "enabled": is_served(model),
            "path": model.get("path"),
            "source": model.get("source") or {"type": "path"},
            "size_gb": model.get("size_gb"),
            "tokenizer_cache": model.get("tokenizer_cache"),
            "served_model_name": served if isinstance(served, list) else [served],
            "smoke": prof.get("smoke", "chat"),
            "serve": serve,
            "env": env,
            "secret_env_names": sorted(secret_names),
            "listen": reach["listen"],
            # vLLM asks every /v1 request for the key (VLLM_API_KEY in the secret environment).
            "api_key": reach["api_key"],
            "unauthenticated": reach["unauthenticated"],
            "lora_adapters": adapters,
            "port": model.get("port"),
            "devices": list(model.get("devices") or []),
            "_explicit_devices": bool(model.get("devices")),
            "span": span,
        })

    active = [m for m in resolved if m["enabled"]]

    # Pass 2: ports, explicit first, then the free ones from base_port up. A spanning
    # model's workers serve no API (vllm serve runs on the head only).
    used_ports: dict[int, str] = {}
    api = [m for m in active if not (m["span"] and m["span"]["role"] == "worker")]
    for m in api:
        port = m["port"]
        if isinstance(port, int):
            if port in used_ports:
                problems.append(f"model {m['name']}: port {port} is already used by model {used_ports[port]}; "
                                "each model on a host needs its own port")
            used_ports.setdefault(port, m["name"])
    next_port = base_port
    for m in api:
        if m["port"] is None:
            while next_port in used_ports:
                next_port += 1
            m["port"] = next_port
            used_ports[next_port] = m["name"]

    # Pass 3: devices, explicit first, then consecutive free blocks. On vendors whose models
    # share the node's devices (CPU nodes: NUMA nodes), every model counts from device 0.
    shared = vendor in vendors.VENDORS and vendors.shared_devices(vendor)
    owner: dict[int, str] = {}
    for m in active:
        need = node_devices(m)
        if not m["_explicit_devices"]:
            continue
        missing = [d for d in m["devices"] if count and d >= count]
        if missing:
            problems.append(f"model {m['name']}: devices {missing} do not exist; fleet_accelerator.count is {count} "
                            f"(devices 0-{count - 1})")
        for d in m["devices"]:
            if d in owner and d not in missing and not shared:
                problems.append(f"model {m['name']}: device {d} is already given to model {owner[d]}; "
                                "device sets of models on one host must not overlap")
            owner.setdefault(d, m["name"])
        if len(m["devices"]) < need:
            problems.append(f"model {m['name']}: needs {need} devices ({_need_why(m)}) "
                            f"but devices lists {len(m['devices'])}: {m['devices']}")
    for m in active:
        if m["_explicit_devices"]:
            continue
        need = node_devices(m)
        free = [d for d in range(count) if shared or d not in owner]
        if need > count:
            problems.append(f"model {m['name']}: needs {need} devices ({_need_why(m)}) "
                            f"but fleet_accelerator.count is {count}")
            continue
        if len(free) < need:
            problems.append(f"model {m['name']}: needs {need} devices but only {len(free)} are left "
                            f"({free}) after the other models on this host")
            continue
        m["devices"] = free[:need]
        for d in m["devices"]:
            owner[d] = m["name"]

    for m in resolved:
        m.pop("_explicit_devices")
        visible_env = vendors.visible_devices_env(vendor) if vendor in vendors.VENDORS else None
        if m["enabled"] and visible_env and m["devices"]:
            m["env"].setdefault(visible_env, ",".join(str(d) for d in m["devices"]))
        if not m["enabled"] or (m["span"] and m["span"]["role"] == "worker"):
            m["port"] = None
        if not m["enabled"]:
            m["devices"] = []
        m["url"] = local_url(m["listen"], m["port"]) if m["port"] else None

    names = [m["name"] for m in resolved]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"model name {dup!r} is used more than once; names must be unique on a host")
    served = [s for m in active for s in m["served_model_name"]]
    for dup in sorted({s for s in served if served.count(s) > 1}):
        problems.append(f"served model name {dup!r} is used by more than one model on the host")
    # An adapter is asked for by its name like a model (/v1/models lists both); vLLM
    # answers a name that is also a served model name with the base model.
    for m in active:
        for adapter in m["lora_adapters"]:
            if adapter["name"] in served:
                problems.append(f"model {m['name']}: LoRA adapter name {adapter['name']!r} is also a served model name "
                                "on the host; clients choose an adapter by its name, so it must differ from every "
                                "served_model_name")
    return resolved, problems


# ------------------------------------------------------------------ what a node serves: one resolution

#: The host variables a node's models are resolved from; node_models reads these and nothing else.
NODE_INPUTS = ("fleet_models", "fleet_accelerator", "fleet_serve_defaults", "fleet_serve_env",
               "fleet_launch_profiles", "fleet_serve_base_port", "fleet_serve_listen", "fleet_serve_api_key",
               "fleet_serve_unauthenticated")
# Within resolved_once(): each node's models, resolved once (validation asks for them from the
# port registry, the router's and monitoring's rules: dozens of times per inventory, some through
# shallow copies of a host's variables). The key is the host and the identity of each input; the
# memo keeps the inputs alive, so that an identity cannot be reused by another value meanwhile.
_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar("node_models_memo", default=None)


@contextlib.contextmanager
def resolved_once() -> Iterator[None]:
    """Within it, node_models resolves each (host, variables) once; the variables must not
    change inside it (validation reads, never writes, the inventory)."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def node_models(host_vars: Mapping[str, Any], host: str | None) -> tuple[list[dict], list[str]]:
    """What node `host` serves, from its variables (NODE_INPUTS): (resolved models, problems).

    The one resolution of a node's models (tests/unit/test_node_models.py keeps it so): the
    roles read it through the filter fleet_node_models, called once, in roles/stages/fleet/vars
    (`_fleet_node_models`); validation, the router, monitoring, status, bench and plan through
    this function. fleet_serve_api_key is read as whether there is one (resolved models are shown
    in plans and logs, never the key). Variables of the wrong shape (the schema reports them)
    resolve to no model."""
    inputs = tuple(host_vars.get(name) for name in NODE_INPUTS)
    memo = _MEMO.get()
    if memo is None:
        return _node_models(inputs, host)
    key = (host, *map(id, inputs))
    if key not in memo:
        try:
            memo[key] = (inputs, _node_models(inputs, host), None)
        except Exception as exc:  # noqa: BLE001 - kept and raised again to every caller, as without the memo
            memo[key] = (inputs, None, exc)
    _, result, error = memo[key]
    if error is not None:
        raise error
    return copy.deepcopy(result)  # a reader that changes what it got changes no other reader's


def _node_models(inputs: tuple, host: str | None) -> tuple[list[dict], list[str]]:
    fleet_models, accelerator, defaults, env, launch_profiles, base_port, listen, api_key, unauthenticated = inputs
    if not isinstance(fleet_models if fleet_models is not None else [], list) or not isinstance(accelerator, dict):
        return [], []
    return resolve_models(fleet_models, accelerator, serve_defaults=defaults, serve_env=env,
                          launch_profiles=launch_profiles, base_port=base_port, listen=listen, api_key=bool(api_key),
                          unauthenticated=unauthenticated is True, host=host)
