"""Validation of a whole inventory before any node is touched.

`validate_hosts` takes the variables of every host in a run and returns every
problem at once, each naming the host, the variable, the value and what would be
accepted. Three layers:

1. the JSON Schema in data/inventory.schema.yml (types, enums, commit ids, checksums,
   the per-vendor version matrices);
2. every role's meta/argument_specs.yml, for the role variables the inventory sets
   (types and choices, and unknown variables that look like typos of one);
3. rules across fields and hosts: models resolved (ports, devices, parallel sizes,
   see vllm_fleet.models), the same address and port used twice, and per-vendor rules.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import jsonschema
import yaml

from vllm_fleet import PROJECT_DIR
from vllm_fleet.models import DATA_DIR, parallel_size, resolve_models

SCHEMA_FILE = DATA_DIR / "inventory.schema.yml"
ROLES_DIR = PROJECT_DIR / "roles"


@lru_cache(maxsize=1)
def schema() -> dict:
    return yaml.safe_load(SCHEMA_FILE.read_text())


def fleet_variables() -> list[str]:
    """The `fleet_*` variables the schema knows."""
    return sorted(schema()["properties"])


# ------------------------------------------------------------------ formatting

def _describe(value: Any) -> str:
    kinds = [(bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
             (list, "a list"), (dict, "a mapping"), (type(None), "null")]
    kind = next((name for t, name in kinds if isinstance(value, t)), type(value).__name__)
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({kind})"


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _var_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(host variables)"


def _format_error(err: jsonschema.ValidationError) -> str:
    path = _var_path(err.absolute_path)
    sch = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        where = f"{path}.{missing}" if err.absolute_path else missing
        accepted = _lookup_description(err, missing)
        return f"{where} is missing" + (f"; expected {accepted}" if accepted else "")
    if err.validator == "additionalProperties":
        known = sorted((sch.get("properties") or {}).keys())
        extras = [k for k in err.instance if k not in known] if isinstance(err.instance, dict) else []
        hints = []
        for extra in extras:
            close = difflib.get_close_matches(extra, known, n=1)
            hints.append(f"unknown key {extra!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        return f"{path}: {'; '.join(hints)}; accepted keys: {', '.join(known)}"
    accepted = sch.get("description")
    if not accepted:
        if err.validator == "enum":
            accepted = "one of " + ", ".join(map(str, err.validator_value))
        elif err.validator == "type":
            accepted = f"a value of type {err.validator_value}"
        elif err.validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[err.validator]
            accepted = f"a number {op} {err.validator_value}"
        elif err.validator == "pattern":
            accepted = f"a string matching {err.validator_value}"
        elif err.validator == "propertyNames":
            accepted = "keys matching " + str((err.validator_value or {}).get("pattern"))
        else:
            accepted = err.message
    hint = ""
    if isinstance(err.instance, float) and "string" in str(sch.get("type", "")) + str(accepted):
        hint = " (YAML read it as a number: put it in quotes)"
    elif isinstance(err.instance, str) and err.validator == "type" and _numeric(err.instance):
        hint = (" (extra vars given as -e key=value are strings: pass numbers as JSON, "
                "e.g. -e '{\"name\": 100}')")
    return f"{path} = {_describe(err.instance)}: expected {accepted}{hint}"


def _lookup_description(err: jsonschema.ValidationError, key: str) -> str | None:
    props = (err.schema or {}).get("properties", {}) if isinstance(err.schema, dict) else {}
    sub = props.get(key) or {}
    if "$ref" in sub:
        name = sub["$ref"].rsplit("/", 1)[-1]
        sub = schema()["$defs"].get(name, {})
    return sub.get("description")


def schema_problems(doc: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema())
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        # if/then branches report their own errors; the bare "if" wrapper adds nothing.
        if err.validator in ("if", "then", "allOf") and not err.absolute_path and err.context:
            problems += [_format_error(e) for e in err.context]
            continue
        problems.append(_format_error(err))
    return problems


# ------------------------------------------------------------------ role argument specs

@lru_cache(maxsize=1)
def role_options() -> dict[str, tuple[str, dict]]:
    """Every role option -> (role, spec), from roles/*/meta/argument_specs.yml (entry point main)."""
    options: dict[str, tuple[str, dict]] = {}
    for spec_file in sorted(ROLES_DIR.glob("*/meta/argument_specs.yml")):
        specs = yaml.safe_load(spec_file.read_text()) or {}
        main = (specs.get("argument_specs") or {}).get("main") or {}
        for name, spec in (main.get("options") or {}).items():
            options[name] = (spec_file.parent.parent.name, spec)
    return options


def role_variable_problems(host_vars: dict) -> list[str]:
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    options = role_options()
    roles = {role for role, _ in options.values()}
    problems = []
    provided = {}
    for name, value in host_vars.items():
        if name in schema()["properties"]:
            continue  # fleet_* settings are checked, in more depth, by the schema
        if name in options:
            provided[name] = value
            continue
        role = next((r for r in roles if name.startswith(r + "_")), None)
        if role:
            candidates = [o for o, (r, _) in options.items() if r == role]
            close = difflib.get_close_matches(name, candidates, n=1)
            problems.append(f"{name} = {_describe(value)}: not a variable of role {role}"
                            + (f" (did you mean {close[0]!r}?)" if close else "")
                            + f"; the role's variables are listed in roles/{role}/meta/argument_specs.yml")
    if provided:
        spec = {name: {k: v for k, v in options[name][1].items() if k in ("type", "choices", "elements", "options")}
                for name in provided}
        result = ArgumentSpecValidator(spec).validate(provided)
        for error in result.errors:
            message = str(error)
            name = next((n for n in provided if f"'{n}'" in message or n in message), None)
            if name and "choices" in options[name][1]:
                message += f" (accepted: {', '.join(map(str, options[name][1]['choices']))})"
            problems.append(f"{name + ' = ' + _describe(provided[name]) + ': ' if name else ''}{message}")
    return problems


# ------------------------------------------------------------------ per-vendor rules

VendorRule = Callable[[dict, list[dict]], list[str]]
VENDOR_RULES: dict[str, list[VendorRule]] = {}


def vendor_rule(vendor: str):
    def register(fn: VendorRule) -> VendorRule:
        VENDOR_RULES.setdefault(vendor, []).append(fn)
        return fn
    return register


@vendor_rule("ascend")
def _ascend_graph_mode_env(doc: dict, models: list[dict]) -> list[str]:
    """Seed 001: IGNORE_GRAPH_UPDATE_EXCEPTIONS is required whenever graph mode is on."""
    problems = []
    for m in models:
        cc = m["serve"].get("compilation_config")
        mode = cc.get("cudagraph_mode") if isinstance(cc, dict) else None
        if mode and str(mode).upper() != "NONE" and "IGNORE_GRAPH_UPDATE_EXCEPTIONS" not in m["env"]:
            problems.append(f"model {m['name']}: compilation_config.cudagraph_mode = {mode!r} (graph mode) needs "
                            "IGNORE_GRAPH_UPDATE_EXCEPTIONS in its environment (fleet_serve_env or the model's env); "
                            "accepted: set it, e.g. IGNORE_GRAPH_UPDATE_EXCEPTIONS: \"0\" as in the Ascend recipe")
    return problems


@vendor_rule("ascend")
def _ascend_container_image(doc: dict, models: list[dict]) -> list[str]:
    if doc.get("fleet_deploy_mode") == "container" and "cann_image" not in (doc.get("fleet_matrix") or {}):
        return ["fleet_matrix.cann_image is missing; container mode runs the CANN image, so set "
                "{repository, tag} (e.g. ascend/cann, 8.3.rc1-910b-ubuntu22.04-py3.11)"]
    return []


def _hub_clients_pinned(doc: dict, models: list[dict]) -> list[str]:
    """Models fetched from a hub need that hub's client at a version of the matrix."""
    matrix = doc.get("fleet_matrix") or {}
    needs = {"modelscope": "modelscope", "huggingface": "huggingface_hub"}
    problems = []
    for m in models:
        key = needs.get((m.get("source") or {}).get("type"))
        if key and key not in matrix:
            problems.append(f"model {m['name']}: source type {m['source']['type']} needs fleet_matrix.{key} "
                            f"(the version of the {key} client nodes download with); accepted: a version string")
    return sorted(set(problems))


for _vendor in ("ascend", "metax", "musa", "nvidia"):
    VENDOR_RULES.setdefault(_vendor, []).append(_hub_clients_pinned)


# ------------------------------------------------------------------ entry point

def host_document(host_vars: dict) -> dict:
    """The part of a host's variables that the schema checks."""
    return {k: v for k, v in host_vars.items() if k in schema()["properties"]}


def validate_host(host: str, host_vars: dict) -> tuple[list[str], list[dict]]:
    doc = host_document(host_vars)
    problems = schema_problems(doc)
    problems += role_variable_problems(host_vars)
    models: list[dict] = []
    if isinstance(doc.get("fleet_models", []), list) and isinstance(doc.get("fleet_accelerator"), dict):
        models, model_problems = resolve_models(
            doc.get("fleet_models"), doc.get("fleet_accelerator"),
            serve_defaults=doc.get("fleet_serve_defaults"), serve_env=doc.get("fleet_serve_env"),
            launch_profiles=doc.get("fleet_launch_profiles"), base_port=doc.get("fleet_serve_base_port"))
        problems += model_problems
        vendor = doc["fleet_accelerator"].get("vendor")
        active = [m for m in models if m["enabled"]]
        for rule in VENDOR_RULES.get(vendor, []):
            problems += rule(doc, active)
    return [f"host {host}: {p}" for p in problems], models


def validate_hosts(hosts: dict[str, dict]) -> list[str]:
    """Every problem of every host, plus those between hosts; [] when the inventory is valid."""
    problems: list[str] = []
    listeners: dict[tuple[str, int], str] = {}
    for host in sorted(hosts):
        host_vars = hosts[host]
        host_problems, models = validate_host(host, host_vars)
        problems += host_problems
        address = str(host_vars.get("ansible_host", host))
        ports = [(m["port"], f"model {m['name']}") for m in models if m.get("port")]
        if "ansible_port" in host_vars:
            ports.append((host_vars["ansible_port"], "ssh"))
        for port, what in ports:
            key = (address, port)
            if key in listeners and not listeners[key].startswith(f"host {host}:"):
                problems.append(f"host {host}: {what} uses port {port} on address {address}, "
                                f"which {listeners[key]} already uses; hosts sharing an address need distinct ports")
            listeners.setdefault(key, f"host {host}: {what}")
    return problems


def models_needing(models: list[dict]) -> int:
    """Largest device set among resolved models (for preflight)."""
    return max((parallel_size(m["serve"]) for m in models if m["enabled"]), default=0)
