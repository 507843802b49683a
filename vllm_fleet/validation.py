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
import ipaddress
import json
import re
from functools import lru_cache
from typing import Any, Callable

import jsonschema
import yaml

from vllm_fleet import PROJECT_DIR, vendors
from vllm_fleet.cluster import cluster_address
from vllm_fleet.api import MASK
from vllm_fleet.models import DATA_DIR, DEFAULT_RAY_PORT, node_devices, resolve_models

SCHEMA_FILE = DATA_DIR / "inventory.schema.yml"
ROLES_DIR = PROJECT_DIR / "roles"


@lru_cache(maxsize=1)
def schema() -> dict:
    """The inventory schema, with the vendors of vllm_fleet.vendors (the one list) as the accepted ones."""
    doc = yaml.safe_load(SCHEMA_FILE.read_text())
    vendor = doc["$defs"]["accelerator"]["properties"]["vendor"]
    vendor["enum"] = list(vendors.VENDORS)
    vendor["description"] = "one of " + ", ".join(vendors.VENDORS)
    doc["allOf"] = [
        {"if": {"properties": {"fleet_accelerator": {"properties": {"vendor": {"const": name}}, "required": ["vendor"]}},
                "required": ["fleet_accelerator"]},
         "then": {"properties": {"fleet_matrix": {"$ref": f"#/$defs/matrix_{name}"}}}}
        for name in vendors.VENDORS if f"matrix_{name}" in doc["$defs"]]
    return doc


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
    shown = _masked(err.instance) if _is_secret_path(err.absolute_path) else _describe(err.instance)
    return f"{path} = {shown}: expected {accepted}{hint}"


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


def role_default(name: str):
    """A role option's default, from its argument spec (which tests/unit/test_roles.py keeps equal
    to the role's defaults/main.yml): Python that needs it reads it here, never a copy."""
    return role_options()[name][1].get("default")


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
            shown = _masked(value) if SECRET_NAME.search(name) else _describe(value)
            problems.append(f"{name} = {shown}: not a variable of role {role}"
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
            if name and SECRET_NAME.search(name):
                shown = _masked(provided[name])
                message = message.replace(str(provided[name]), MASK)
            else:
                shown = _describe(provided[name]) if name else ""
            problems.append(f"{name + ' = ' + shown + ': ' if name else ''}{message}")
    return problems


# ------------------------------------------------------------------ secrets, paths, users, ports, groups

#: Variables (and keys at any depth) whose values are secrets: never echoed in a message.
_SECRET_WORDS = re.compile(r"token(?!iz)|api_?key|access_?key|password|passwd|secret|credential|private_key", re.I)
#: Names with "token" that count tokens (max_num_batched_tokens, ...) and are no secrets.
_TOKEN_COUNTS = re.compile(r"max_|num_|_len|batched|budget|count", re.I)


class _SecretName:
    """Matches variable names of secrets: *token*, *api_key*, *password*, *secret* (not tokenizer_*, *_tokens counts)."""

    @staticmethod
    def search(name: str) -> bool:
        return bool(_SECRET_WORDS.search(name)) and not (
            "token" in name.lower() and not re.search(r"api_?key|password|passwd|secret", name, re.I)
            and _TOKEN_COUNTS.search(name))


SECRET_NAME = _SecretName()


def _is_secret_path(parts) -> bool:
    return any(isinstance(p, str) and SECRET_NAME.search(p) for p in parts)


def _masked(value: Any) -> str:
    """`_describe` for a secret: its kind, never its value."""
    return f"{MASK} ({_describe(value).rsplit('(', 1)[-1]}"


def secret_values(host_vars: dict) -> list[str]:
    """Every string value under a variable or key named like a secret, longest first."""
    found: set[str] = set()

    def walk(value, secret: bool):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, secret or bool(SECRET_NAME.search(str(k))))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, secret)
        elif secret and isinstance(value, str) and len(value) >= 4:
            found.add(value)

    walk(host_vars, False)
    return sorted(found, key=len, reverse=True)


def mask_secrets(problems: list[str], secrets: list[str]) -> list[str]:
    """Problems with every secret value replaced by the mask (behind the per-rule masking)."""
    out = []
    for problem in problems:
        for secret in secrets:
            problem = problem.replace(secret, MASK)
        out.append(problem)
    return out


#: Directories vllm-fleet must never take over (chown/chmod) as its own: the system's.
SYSTEM_DIRS = frozenset([
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/lib64",
    "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/sbin", "/usr/share", "/var", "/var/cache", "/var/lib",
    "/var/log", "/var/tmp", "/var/spool", "/var/opt", "/snap"])
#: Accounts of the system (Debian's base-passwd and common daemons): never the service user.
SYSTEM_ACCOUNTS = frozenset([
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "_apt", "sshd", "messagebus", "systemd-network", "systemd-resolve",
    "systemd-timesync", "systemd-coredump", "polkitd", "syslog", "uuidd", "tcpdump", "dnsmasq", "avahi", "postfix",
    "ntp", "chrony", "_chrony", "statd", "tss", "usbmux", "rtkit", "colord", "pulse", "lightdm", "gdm", "dbus",
    "adm", "operator", "halt", "shutdown", "ftp", "docker", "HwHiAiUser"])
_TEMPLATED = re.compile(r"\{\{|\{%")


def _path_parts_problems(name: str, value: Any) -> list[str]:
    """`..` in any path-like value under `name` (keys path/*_path/*_dir, at any depth)."""
    problems = []

    def walk(value, where, pathlike):
        if isinstance(value, dict):
            for k, v in value.items():
                key = str(k)
                walk(v, f"{where}.{key}", key == "path" or key.endswith(("_path", "_dir")))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]", pathlike)
        elif pathlike and isinstance(value, str) and not _TEMPLATED.search(value) and ".." in value.split("/"):
            problems.append(f"{where} = {value!r}: a path with '..' may leave the directory it names; accepted: a "
                            "path without '..' components (write the directory it leads to)")

    walk(value, name, name.endswith(("_dir", "_path")))
    return problems


def path_problems(host_vars: dict) -> list[str]:
    """`..` in paths of fleet and role variables; directories vllm-fleet owns set to a system directory."""
    problems = []
    for name in sorted(host_vars):
        value = host_vars[name]
        problems += _path_parts_problems(name, value)
        if name.endswith("_dir") and isinstance(value, str) and value.startswith("/") and not _TEMPLATED.search(value):
            normal = "/" + "/".join(p for p in value.split("/") if p not in ("", "."))
            if normal in SYSTEM_DIRS:
                problems.append(f"{name} = {value!r} is a system directory, which vllm-fleet would take over (owner "
                                "and mode of its own directories); accepted: a directory of its own below it, e.g. "
                                f"{normal.rstrip('/')}/vllm-fleet" + (" or /home/models" if "models" in name else ""))
    return problems


def service_user_problems(host_vars: dict) -> list[str]:
    user = host_vars.get("fleet_service_user")
    if isinstance(user, str) and (user in SYSTEM_ACCOUNTS or user.startswith("systemd-")):
        return [f"fleet_service_user = {user!r} is {'root' if user == 'root' else 'a system account'}; the models run "
                "as an unprivileged account of their own, which vllm-fleet creates (nologin) and owns its "
                "directories; accepted: a user name only vllm-fleet uses, e.g. 'vllm'"]
    return []


#: Ports below this one need privileges the model units do not have (they run unprivileged).
FIRST_UNPRIVILEGED_PORT = 1024


def model_port_problems(host_vars: dict, models: list[dict]) -> list[str]:
    problems = []
    ssh = host_vars.get("ansible_port", 22)
    for m in models:
        port = m.get("port")
        if not m.get("enabled") or not isinstance(port, int) or isinstance(port, bool):
            continue
        if port == ssh:
            problems.append(f"model {m['name']}: port {port} is the node's own SSH port (ansible_port = {ssh}); "
                            "accepted: a port no other service of the node listens on")
        elif port < FIRST_UNPRIVILEGED_PORT:
            problems.append(f"model {m['name']}: port {port} is a privileged port (below {FIRST_UNPRIVILEGED_PORT}), "
                            f"which the unprivileged service user cannot listen on; accepted: "
                            f"{FIRST_UNPRIVILEGED_PORT}-65535, e.g. 8000")
    return problems


def vendor_group_problems(host_vars: dict) -> list[str]:
    """A node is of one vendor: it belongs to at most one `<vendor>-nodes` group."""
    groups = [g for g in host_vars.get("group_names") or [] if g in {f"{v}-nodes" for v in vendors.VENDORS}]
    if len(groups) > 1:
        return [f"is in the vendor groups {' and '.join(sorted(groups))}; a node has one vendor, and which group's "
                "settings it gets would depend on group order; accepted: the host in one <vendor>-nodes group only"]
    return []


# ------------------------------------------------------------------ typed serve options

SERVE_OPTIONS_FILE = DATA_DIR / "serve_options.json"
#: What vLLM checks only when the engine starts (minutes into a unit's life), checked here.
SERVE_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "gpu_memory_utilization": (lambda v: 0 < v <= 1, "a fraction of the device memory in (0, 1], e.g. 0.9"),
    "swap_space": (lambda v: v >= 0, "a number of GiB >= 0"),
    "cpu_offload_gb": (lambda v: v >= 0, "a number of GiB >= 0"),
    **{key: (lambda v: v >= 1, "a positive integer (>= 1)") for key in (
        "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
        "data_parallel_size_local", "max_num_seqs", "max_num_batched_tokens", "block_size",
        "num_gpu_blocks_override", "max_loras", "max_lora_rank", "max_cpu_loras", "kv_cache_memory_bytes",
        "max_seq_len_to_capture", "max_parallel_loading_workers", "api_server_count")},
}
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")
_FLAGS_INSIDE = re.compile(r"\s-{1,2}[A-Za-z]")
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "json": "a mapping (rendered as JSON)",
               "bool": "true or false", "flag": "true (a flag without a value)"}


@lru_cache(maxsize=1)
def serve_options() -> dict[str, dict]:
    """release -> {vllm_version, options} from data/serve_options.json (see vllm_fleet.argcheck --describe)."""
    return json.loads(SERVE_OPTIONS_FILE.read_text())["releases"]


def serve_release(doc: dict) -> str | None:
    """The vLLM release whose parser judges the host's command lines (as tests/parser pins it)."""
    vllm = (doc.get("fleet_matrix") or {}).get("vllm")
    if not isinstance(vllm, dict):
        return None
    release = vllm.get("release") or vllm.get("version")
    if not isinstance(release, str):
        return None
    vendor = (doc.get("fleet_accelerator") or {}).get("vendor")
    return f"{release}+cpu" if vendor == "cpu" and not release.endswith("+cpu") else release


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _numeric(value.strip()):
        return float(value)
    return None


def _item_problem(spec: dict, item: Any) -> str | None:
    """Why one value does not fit the option's type and choices; None when it does."""
    kind = spec.get("type")
    if isinstance(item, str) and _FLAGS_INSIDE.search(item):
        return "has spaces and more flags inside one value (it reaches vLLM as one argument)"
    if isinstance(item, bool):
        return None if kind == "bool" and spec.get("bool") == "value" else "is a boolean, which renders as a flag"
    if kind == "int":
        if isinstance(item, float) or (isinstance(item, str) and _numeric(item) and not item.strip().isdigit()
                                       and not spec.get("human")):
            return "is not a whole number"
        if not isinstance(item, int) and not (isinstance(item, str) and (item.strip().isdigit() or (
                spec.get("human") and _HUMAN_INT.match(item.strip())))):
            return "is not an integer"
    elif kind == "float" and _number(item) is None:
        return "is not a number"
    elif kind == "str" and isinstance(item, (dict, list)):
        return "is a mapping or list, but the option takes one word"
    elif kind == "bool" and spec.get("bool") == "value" and str(item).lower() not in ("true", "false"):
        return "is not true or false"
    choices = spec.get("choices")
    if choices and str(item) not in choices and str(item).lower() not in [c.lower() for c in choices]:
        return "is not one of the option's choices"
    return None


def serve_option_problems(doc: dict, models: list[dict]) -> list[str]:
    """Every enabled model's merged `serve` against the `vllm serve` options of the host's release.

    Unknown options (with a did-you-mean), types, choices, nargs, boolean styles, values
    smuggling more flags, and the ranges vLLM checks only at engine start. Options the
    vendor's fork adds (`fleet_matrix.vllm.fork_serve_options`) are the fork's to judge.
    """
    release = serve_release(doc)
    described = serve_options().get(release or "")
    if not described:
        return []  # a release we have no description of: vllm_fleet.argcheck judges it with its parser
    options = described["options"]
    vllm = (doc.get("fleet_matrix") or {}).get("vllm") or {}
    fork = set(vllm.get("fork_serve_options") or []) if isinstance(vllm, dict) else set()
    problems = []
    for m in models:
        for key, value in m["serve"].items():
            where = f"model {m['name']}: serve.{key} = {_describe(value)}"
            spec = options.get(key)
            if spec is None:
                if key in fork:
                    continue
                close = difflib.get_close_matches(key, list(options), n=1)
                problems.append(f"{where}: vLLM {release}'s `vllm serve` has no option --{key.replace('_', '-')}"
                                + (f" (did you mean {close[0]!r}?)" if close else "")
                                + "; accepted: an option of that release (vllm serve --help), or one the vendor's fork "
                                "adds listed in fleet_matrix.vllm.fork_serve_options")
                continue
            flag = "--" + key.replace("_", "-")
            kind, style = spec.get("type"), spec.get("bool")
            accepted = _TYPE_WORDS.get(kind, kind)
            if spec.get("choices"):
                accepted = "one of " + ", ".join(spec["choices"])
            takes = f"vLLM {release}'s {flag} takes {accepted}"
            if kind == "bool" and style in ("optional", "store_true", "store_false"):
                if not isinstance(value, bool):
                    hint = (f" (a string would render `{flag} {value}`)" if isinstance(value, str) else "")
                    problems.append(f"{where}: {flag} is a switch{hint}; accepted: true or false, unquoted")
                elif style != "optional" and value is not (style == "store_true") and ("no_" + key) not in options:
                    problems.append(f"{where}: vLLM {release} has {flag} but no --no-{key.replace('_', '-')}; "
                                    "accepted: true, or leave the option out")
                continue
            if kind == "flag":
                if value is not True:
                    problems.append(f"{where}: {takes}; accepted: true, or leave the option out")
                continue
            nargs = spec.get("nargs")
            many = nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)
            if isinstance(value, list) and not many and kind != "json":
                problems.append(f"{where}: {takes}, one value; accepted: a single value, not a list")
                continue
            items = value if isinstance(value, list) and many else [value]
            for item in items:
                why = _item_problem(spec, item)
                if why:
                    problems.append(f"{where}: {_describe(item) + ' ' if item is not value else ''}{why}; {takes}"
                                    + ("; give each flag its own key in serve" if "more flags" in why else ""))
                    break
            else:
                rule = SERVE_RANGES.get(key)
                number = _number(value)
                if rule and number is not None and not rule[0](number):
                    problems.append(f"{where}: out of range for {flag}; accepted: {rule[1]} (vLLM checks it only "
                                    "when the engine starts)")
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


# ---- NVIDIA (seed 003): the driver from the distribution's packages, vLLM from PyPI

def _upstream_version(deb_version: str) -> str:
    """The upstream part of a Debian package version: 1:570.195.03-0ubuntu0.22.04.1 -> 570.195.03."""
    version = re.sub(r"^[0-9]+:", "", deb_version)
    return version.rsplit("-", 1)[0] if "-" in version else version


@vendor_rule("nvidia")
def _nvidia_driver_names_one_driver(doc: dict, models: list[dict]) -> list[str]:
    """Branch, version and package version of fleet_matrix.nvidia_driver must name the same driver.

    The role installs `packages` at `package_version` and gates on nvidia-smi reporting
    `version`: a package version of another driver would install, then fail the gate.
    """
    driver = (doc.get("fleet_matrix") or {}).get("nvidia_driver")
    if not isinstance(driver, dict):
        return []
    branch, version, package_version = driver.get("branch"), driver.get("version"), driver.get("package_version")
    packages = driver.get("packages") if isinstance(driver.get("packages"), list) else []
    problems = []
    if isinstance(branch, str) and isinstance(version, str) and not version.startswith(branch + "."):
        problems.append(f"fleet_matrix.nvidia_driver.version = {version!r} is not a driver of branch {branch!r}; "
                        f"accepted: a {branch}.x version, or branch {version.split('.')[0]!r} for this version")
    if isinstance(version, str) and isinstance(package_version, str) and _upstream_version(package_version) != version:
        where = f" (apt-cache policy {packages[0]})" if packages else ""
        problems.append(f"fleet_matrix.nvidia_driver.package_version = {package_version!r} installs driver "
                        f"{_upstream_version(package_version)}, not version {version!r}; accepted: the package version "
                        f"of driver {version} as your apt repository lists it{where}, e.g. {version}-0ubuntu0.22.04.1")
    return problems


@vendor_rule("nvidia")
def _nvidia_container_mode(doc: dict, models: list[dict]) -> list[str]:
    """Container mode pulls the vLLM OpenAI image of the matrix's release and needs the container toolkit."""
    matrix = doc.get("fleet_matrix") or {}
    container = doc.get("fleet_deploy_mode") == "container"
    problems = []
    if container and "nvidia_container_toolkit" not in matrix:
        problems.append("fleet_matrix.nvidia_container_toolkit is missing; container mode gives the GPUs to the "
                        "container through the NVIDIA Container Toolkit, so set {package_version} (e.g. \"1.17.8-1\")")
    image = matrix.get("vllm_image")
    if container and image is None:
        problems.append("fleet_matrix.vllm_image is missing; container mode runs the vLLM OpenAI image, so set "
                        "{repository, tag} (e.g. vllm/vllm-openai, v0.11.2)")
    version = str((matrix.get("vllm") or {}).get("version", "")) if isinstance(matrix.get("vllm"), dict) else ""
    tag = image.get("tag") if isinstance(image, dict) else None
    if isinstance(tag, str) and version and not re.search(rf"(?<![0-9.]){re.escape(version)}(?![0-9])", tag):
        problems.append(f"fleet_matrix.vllm_image.tag = {tag!r} does not name vLLM {version} (fleet_matrix.vllm.version), "
                        f"so containers would run another vLLM than host mode installs; accepted: the image of that "
                        f"release, e.g. v{version}")
    return problems


# ---- Moore Threads (seed 004): AIModule's vLLM-MUSA in a conda environment

#: vLLM-MUSA's KV-cache block size ("需使用 32").
MUSA_BLOCK_SIZE = 32
#: vLLM's --max-num-seqs when a model does not set it.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
#: The models AIModule 1.4.2 validated VLLM_MUSA_TILELANG_KVREUSE=1 with (seed 004: one).
MUSA_KVREUSE_MODELS = ("Qwen3-30B-A3B-GPTQ-Int4",)
#: The GPTQ MoE models of seed 004 validated with VLLM_MUSA_ATTN=tilelang (named in messages).
MUSA_TILELANG_EXAMPLES = "Qwen3-30B-A3B-GPTQ-Int4, gptq-Qwen3.6-35B-A3B-4bit-group"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _model_id(model: dict) -> str:
    """The repository name a model comes from (the last part of its repo or git URL), else its directory's name."""
    source = model.get("source") or {}
    ref = source.get("repo") or source.get("url") or model.get("path") or ""
    name = str(ref).rstrip("/").rsplit("/", 1)[-1]
    return name[:-4] if name.endswith(".git") else name


@vendor_rule("musa")
def _musa_parallel_sizes(doc: dict, models: list[dict]) -> list[str]:
    """vLLM-MUSA runs tensor and pipeline parallel size 1 only: one GPU per model."""
    problems = []
    for m in models:
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            value = m["serve"].get(key)
            if value is not None and value != 1:
                problems.append(f"model {m['name']}: serve.{key} = {value!r}; accepted: 1 (AIModule's vLLM-MUSA "
                                "supports tensor and pipeline parallel size 1 only, so a model runs on one GPU)")
    return problems


@vendor_rule("musa")
def _musa_kv_cache(doc: dict, models: list[dict]) -> list[str]:
    """block_size 32, and max-model-len <= num-gpu-blocks-override * block_size / max-num-seqs."""
    problems = []
    for m in models:
        serve, name = m["serve"], m["name"]
        block_size, blocks = serve.get("block_size"), serve.get("num_gpu_blocks_override")
        if block_size is not None and block_size != MUSA_BLOCK_SIZE:
            problems.append(f"model {name}: serve.block_size = {block_size!r}; accepted: {MUSA_BLOCK_SIZE} "
                            "(vLLM-MUSA's KV-cache block size)")
        if blocks is not None and block_size is None:
            problems.append(f"model {name}: serve.num_gpu_blocks_override = {blocks!r} without serve.block_size; "
                            f"accepted: block_size: {MUSA_BLOCK_SIZE} with it (the KV cache then holds "
                            f"num_gpu_blocks_override x {MUSA_BLOCK_SIZE} tokens)")
        blocks, block_size, length = _int(blocks), _int(block_size), _int(serve.get("max_model_len"))
        if not (blocks and block_size and length):
            continue
        seqs = _int(serve.get("max_num_seqs")) or VLLM_DEFAULT_MAX_NUM_SEQS
        if length * seqs > blocks * block_size:
            default = "" if "max_num_seqs" in serve else " (vLLM's default)"
            capacity = blocks * block_size // seqs
            problems.append(f"model {name}: max_model_len {length} > num_gpu_blocks_override {blocks} x block_size "
                            f"{block_size} / max_num_seqs {seqs}{default} = {capacity}; accepted: max_model_len <= "
                            f"{capacity}, or more num_gpu_blocks_override, or fewer max_num_seqs")
    return problems


@vendor_rule("musa")
def _musa_graph_not_eager(doc: dict, models: list[dict]) -> list[str]:
    """--enforce-eager forces eager mode, so MUSA Graph would never be captured."""
    problems = []
    for m in models:
        config = m["serve"].get("compilation_config")
        if isinstance(config, dict) and config.get("simple_cuda_graph") and m["serve"].get("enforce_eager") is True:
            problems.append(f"model {m['name']}: serve.enforce_eager = true with compilation_config.simple_cuda_graph "
                            "= true (MUSA Graph): enforce_eager forces eager mode and no graph is captured; accepted: "
                            "one of the two (compilation_config: null for an eager model, as the pooling models)")
    return problems


@vendor_rule("musa")
def _musa_tilelang(doc: dict, models: list[dict]) -> list[str]:
    """tilelang attention on the validated GPTQ MoE models only, its KV reuse on Qwen3-30B-A3B-GPTQ-Int4 only."""
    problems = []
    for m in models:
        env, serve, name = m["env"], m["serve"], m["name"]
        attention, kv_reuse = env.get("VLLM_MUSA_ATTN"), env.get("VLLM_MUSA_TILELANG_KVREUSE")
        quantization = serve.get("quantization")
        if attention == "tilelang" and not (m["kind"] == "moe" and quantization):
            problems.append(f"model {name}: env VLLM_MUSA_ATTN = 'tilelang' on a kind {m['kind']} model with "
                            f"quantization {quantization or 'none'}; accepted: only on the validated MoE quantized "
                            f"models (kind moe with a quantization such as gptq: {MUSA_TILELANG_EXAMPLES}); elsewhere "
                            "it can mismatch the KV-cache dtype, break MUSA Graph capture or run degraded")
        if kv_reuse is not None and kv_reuse != "0":
            model_id = _model_id(m)
            if model_id.lower() not in {k.lower() for k in MUSA_KVREUSE_MODELS}:
                problems.append(f"model {name}: env VLLM_MUSA_TILELANG_KVREUSE = {kv_reuse!r} on {model_id}; accepted: "
                                f"only with {', '.join(MUSA_KVREUSE_MODELS)} (the model AIModule validated it with)")
            elif attention != "tilelang":
                problems.append(f"model {name}: env VLLM_MUSA_TILELANG_KVREUSE = {kv_reuse!r} without "
                                "VLLM_MUSA_ATTN = 'tilelang'; accepted: both (KV reuse is part of the tilelang backend)")
    return problems


@vendor_rule("musa")
def _musa_pooling_without_warmup(doc: dict, models: list[dict]) -> list[str]:
    """Pooling models (bge-m3, bge-reranker-v2-m3) start with VLLM_MUSA_STARTUP_WARMUP=0."""
    problems = []
    for m in models:
        warmup = m["env"].get("VLLM_MUSA_STARTUP_WARMUP")
        if m["serve"].get("runner") == "pooling" and warmup != "0":
            problems.append(f"model {m['name']}: a pooling model (serve.runner = 'pooling') with VLLM_MUSA_STARTUP_WARMUP "
                            f"{'= ' + repr(warmup) if warmup is not None else 'unset'}; accepted: VLLM_MUSA_STARTUP_WARMUP: "
                            "\"0\" in its environment (the kind's fleet_launch_profiles env or the model's env): the "
                            "start-up warmup is known to trouble pooling models")
    return problems


# ---- MetaX (seed 000): MACA, vLLM with MetaX's overlays over site-packages
#: Seed 000: gpt-oss runs on MetaX only with vLLM's Triton attention backend.
METAX_GPT_OSS_BACKEND = "TRITON_ATTN_VLLM_V1"


def _is_gpt_oss(model: dict) -> bool:
    """A gpt-oss checkpoint, told by its name, hub repository or path."""
    names = [model.get("name") or "", str(model.get("path") or ""), str((model.get("source") or {}).get("repo") or "")]
    return any("gpt-oss" in n.lower() for n in names)


@vendor_rule("metax")
def _metax_gpt_oss_backend(doc: dict, models: list[dict]) -> list[str]:
    problems = []
    for m in models:
        backend = m["env"].get("VLLM_ATTENTION_BACKEND")
        if _is_gpt_oss(m) and backend != METAX_GPT_OSS_BACKEND:
            problems.append(f"model {m['name']}: gpt-oss on MetaX needs VLLM_ATTENTION_BACKEND={METAX_GPT_OSS_BACKEND} "
                            f"(seed 000), its environment has {backend!r}; accepted: VLLM_ATTENTION_BACKEND: "
                            f"{METAX_GPT_OSS_BACKEND} in the model's env (or fleet_serve_env)")
    return problems


@vendor_rule("metax")
def _metax_overlays(doc: dict, models: list[dict]) -> list[str]:
    """Overlays must not cover each other's files: undoing one would restore over the other."""
    overlays = [o for o in (doc.get("fleet_matrix") or {}).get("vllm_overlays") or [] if isinstance(o, dict)]
    problems = []
    names = [str(o.get("name")) for o in overlays]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"fleet_matrix.vllm_overlays: the name {dup!r} is used more than once; accepted: a name "
                        "per overlay (it names the overlay's state directory on the node)")
    targets = [(i, str(o.get("target") or "").strip("/")) for i, o in enumerate(overlays)]
    for i, a in targets:
        for j, b in targets:
            if i < j and a and b and (a == b or b.startswith(a + "/") or a.startswith(b + "/")):
                problems.append(f"fleet_matrix.vllm_overlays[{j}].target = {b!r} overlaps "
                                f"fleet_matrix.vllm_overlays[{i}].target = {a!r}; accepted: targets that do not "
                                "contain one another (merge the two overlays into one)")
    if doc.get("fleet_deploy_mode") == "container":
        for i, o in enumerate(overlays):
            if "path" in o:
                problems.append(f"fleet_matrix.vllm_overlays[{i}] ({o.get('name')}) is given as path {o['path']!r}; "
                                "container mode fetches overlays while the image builds, so accepted: file (from "
                                "fleet_artifact_base_url) or url")
    return problems


@vendor_rule("metax")
def _metax_tokenizer_cache(doc: dict, models: list[dict]) -> list[str]:
    """gpt-oss's harmony tokenizer is cached from the matrix's tiktoken_o200k."""
    if "tiktoken_o200k" in (doc.get("fleet_matrix") or {}):
        return []
    return [f"model {m['name']}: tokenizer_cache = {m['tokenizer_cache']!r} needs fleet_matrix.tiktoken_o200k "
            "(the encoding's sha256 and sources); accepted: a mapping with sha256, sources and canonical_url"
            for m in models if m.get("tokenizer_cache")]


@vendor_rule("metax")
def _metax_container_image(doc: dict, models: list[dict]) -> list[str]:
    if doc.get("fleet_deploy_mode") == "container" and "vllm_image" not in (doc.get("fleet_matrix") or {}):
        return ["fleet_matrix.vllm_image is missing; container mode builds MetaX's overlays into MetaX's vLLM image, "
                "so set {repository, tag} (e.g. maca/vllm, maca.ai3.2.1.3-torch2.6-py310-ubuntu22.04-amd64)"]
    return []


# ---- CPU nodes: vLLM's CPU backend
#: Memory one vLLM CPU engine takes besides its weights and KV cache (measured on vLLM
#: 0.32: 1.4-2 GB resident for a tiny model), counted per model.
CPU_ENGINE_OVERHEAD_GB = 2.0
#: What a CPU node's fleet_accelerator says of it besides vendor, model and count.
CPU_NODE_KEYS = ("cores", "memory_gb", "isa")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def _cpu_kv_cache_gb(model: dict) -> float | None:
    """The KV cache a CPU model asks for, in GB: serve.kv_cache_memory_bytes or VLLM_CPU_KVCACHE_SPACE (GiB)."""
    kv_bytes = _int(model["serve"].get("kv_cache_memory_bytes"))
    if kv_bytes:
        return kv_bytes / 1e9
    space = model["env"].get("VLLM_CPU_KVCACHE_SPACE")
    try:
        return float(space) * 2**30 / 1e9 if space not in (None, "") else None
    except ValueError:
        return None


@vendor_rule("cpu")
def _cpu_node_described(doc: dict, models: list[dict]) -> list[str]:
    acc = doc["fleet_accelerator"]
    missing = [k for k in CPU_NODE_KEYS if k not in acc]
    if missing:
        return [f"fleet_accelerator has no {', '.join(missing)}; accepted: a CPU node's logical CPUs (cores), "
                "memory in GB (memory_gb) and ISA extensions (isa), e.g. {vendor: cpu, model: x86_64, count: 2, "
                "cores: 64, memory_gb: 256, isa: [avx2, avx512f]}"]
    return []


@vendor_rule("cpu")
def _cpu_isa(doc: dict, models: list[dict]) -> list[str]:
    """The CPU build's kernels need an ISA extension the node must have."""
    need = ((doc.get("fleet_matrix") or {}).get("vllm") or {}).get("isa")
    have = doc["fleet_accelerator"].get("isa")
    if isinstance(need, str) and isinstance(have, list) and need not in have:
        return [f"fleet_matrix.vllm.isa = {need!r}: vLLM's CPU build needs {need}, but fleet_accelerator.isa is "
                f"{have}; accepted: a build for the node's ISA (one of {', '.join(have) or 'none'}), or nodes with {need}"]
    return []


@vendor_rule("cpu")
def _cpu_memory(doc: dict, models: list[dict]) -> list[str]:
    """Every model names its KV cache size, and weights + KV caches + engines fit in the node's memory."""
    problems = []
    total = 0.0
    parts = []
    for m in models:
        kv = _cpu_kv_cache_gb(m)
        if kv is None:
            problems.append(f"model {m['name']}: no KV cache size; accepted: serve.kv_cache_memory_bytes (bytes) or "
                            "env VLLM_CPU_KVCACHE_SPACE (GiB), since without one vLLM's CPU backend takes 90% of the "
                            "node's memory for its KV cache")
            continue
        need = (m.get("size_gb") or 0) + kv + CPU_ENGINE_OVERHEAD_GB
        total += need
        parts.append(f"{m['name']} {need:.1f}")
    memory = doc["fleet_accelerator"].get("memory_gb")
    if isinstance(memory, (int, float)) and not isinstance(memory, bool) and total > memory:
        problems.append(f"the models need {total:.1f} GB ({', '.join(parts)}: weights size_gb + KV cache + "
                        f"{CPU_ENGINE_OVERHEAD_GB:.0f} GB per engine) but fleet_accelerator.memory_gb is {memory}; "
                        "accepted: smaller KV caches, fewer models, or a node with more memory")
    return problems


@vendor_rule("cpu")
def _cpu_thread_binding(doc: dict, models: list[dict]) -> list[str]:
    """VLLM_CPU_OMP_THREADS_BIND: auto, nobind, or one CPU list per tensor-parallel rank, within the node's cores."""
    cores = _int(doc["fleet_accelerator"].get("cores"))
    problems = []
    for m in models:
        bind = m["env"].get("VLLM_CPU_OMP_THREADS_BIND")
        if bind in (None, "", "auto", "nobind"):
            continue
        ranks = str(bind).split("|")
        if not all(_CPU_LIST.match(r) for r in ranks):
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r}; accepted: auto, nobind, or "
                            "CPU lists such as 0-31 (one per tensor-parallel rank, separated by |: 0-31|32-63)")
            continue
        tp = _int(m["serve"].get("tensor_parallel_size")) or 1
        if len(ranks) != tp:
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r} binds {len(ranks)} rank(s) "
                            f"but serve.tensor_parallel_size is {tp}; accepted: one CPU list per rank, separated by |")
        highest = max(int(n) for r in ranks for n in re.split(r"[,-]", r))
        if cores and highest >= cores:
            problems.append(f"model {m['name']}: env VLLM_CPU_OMP_THREADS_BIND = {bind!r} names CPU {highest}, but "
                            f"fleet_accelerator.cores is {cores} (CPUs 0-{cores - 1}); accepted: CPUs of the node")
    return problems


def _cpu_keys_on_cpu_nodes_only(doc: dict, models: list[dict]) -> list[str]:
    given = [k for k in CPU_NODE_KEYS if k in doc["fleet_accelerator"]]
    if given:
        return [f"fleet_accelerator.{given[0]}: only CPU nodes (vendor cpu) say this; accepted: vendor, model and "
                f"count for {doc['fleet_accelerator'].get('vendor')} nodes"]
    return []


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
                f"(deploy_modes of roles/{vendor}/vars/main.yml); accepted: {', '.join(modes)}"]
    return []


for _vendor in vendors.VENDORS:
    VENDOR_RULES.setdefault(_vendor, []).extend([_deploy_mode_supported, _hub_clients_pinned])
    if _vendor != "cpu":
        VENDOR_RULES[_vendor].append(_cpu_keys_on_cpu_nodes_only)


def _listen_needs_key(doc: dict, models: list[dict]) -> list[str]:
    """A model that listens beyond loopback needs an API key, or an explicit opt-out."""
    from vllm_fleet.models import access, is_loopback  # noqa: PLC0415 - kept beside the rule it serves

    problems = []
    key = doc.get("fleet_serve_api_key", "")
    # Never the value in a message: it is a secret.
    if not isinstance(key, str):
        problems.append("fleet_serve_api_key: the value (not shown: it is a secret) is not a string; accepted: "
                        "a string of printable ASCII characters without spaces, quotes or backslashes")
    elif not re.match(r"^[!#-&(-\[\]-~]*$", key):
        problems.append("fleet_serve_api_key: the value (not shown: it is a secret) has spaces, quotes, backslashes or "
                        "non-printable characters, which its environment file cannot carry; accepted: printable "
                        "ASCII characters without spaces, quotes or backslashes")
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


# ---- the router (roles/router): one endpoint per model served by several nodes

def _fleet_listeners(fleet_hosts: dict[str, dict]) -> dict[tuple[str, int], str]:
    """(address, port) -> what listens there, on every fleet node: its SSH port and each model it
    serves; the router's and the monitoring host's ports must not be one of them."""
    from vllm_fleet import router

    listeners: dict[tuple[str, int], str] = {}
    for host in sorted(fleet_hosts):
        host_vars = fleet_hosts[host]
        if isinstance(host_vars.get("ansible_port"), int):
            listeners[(str(host_vars.get("ansible_host", host)), host_vars["ansible_port"])] = f"the SSH port of {host}"
        for model in router.served_models(host_vars, host):
            listeners[(router.node_address(host, host_vars, model), model["port"])] = f"model {model['name']} of {host}"
    return listeners


def _claim_port(listeners: dict[tuple[str, int], str], address: str, port: int, who: str, where: str) -> list[str]:
    """Give `port` on `address` to `who` in `listeners`, or the problem (said at `where`) when
    something already listens there."""
    key = (address, port)
    if key in listeners:
        return [f"{where}: port {port} on address {address} is already {listeners[key]}; "
                "accepted: a port nothing else on that address listens on"]
    listeners[key] = who
    return []


def router_problems(routers: dict[str, dict], fleet_hosts: dict[str, dict]) -> list[str]:
    """Problems of the router hosts: their role variables, an entry naming a model no fleet node
    serves (`fleet_hosts`: every fleet node of the inventory, not only those of the run), and a
    frontend port used twice or already taken on the router's address (SSH, a model, another router)."""
    from vllm_fleet import router

    problems: list[str] = []
    served: dict[str, list[str]] = {}
    listeners = _fleet_listeners(fleet_hosts)
    for host in sorted(fleet_hosts):
        for model in router.served_models(fleet_hosts[host], host):
            for name in model["served_model_name"]:
                served.setdefault(name, []).append(host)
    for host in sorted(routers):
        host_vars = routers[host]
        own = role_variable_problems(host_vars)
        entries = host_vars.get("router_models", [])
        if own or not isinstance(entries, list):
            problems += [f"host {host}: {p}" for p in own or [f"router_models = {_describe(entries)}: expected a list"]]
            continue
        address = str(host_vars.get("ansible_host", host))
        if isinstance(host_vars.get("ansible_port"), int):
            listeners.setdefault((address, host_vars["ansible_port"]), f"the SSH port of {host}")
        names: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"host {host}: router_models[{i}]"
            name, port = entry.get("name"), entry.get("port")
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
                model = next(m for m in router.served_models(node_vars, node) if name in m["served_model_name"])
                if router.unreachable_from(address, node, node_vars, model):
                    problems.append(f"{where}.name = {name!r}: {node} serves it on {model['listen']} only (loopback), "
                                    f"which the router at {address} cannot reach; accepted: a listen address the "
                                    f"router reaches (fleet_serve_listen or the model's listen, with an API key)")
            problems += _claim_port(listeners, address, port, f"the router port of {name!r} on {host}",
                                    f"{where}.port = {port}")
    return problems


# ---- monitoring (roles/monitoring): Prometheus scraping every model and every node's exporter

def monitoring_problems(monitors: dict[str, dict], fleet_hosts: dict[str, dict]) -> list[str]:
    """Problems of the monitoring hosts (`monitors`, which may also be fleet nodes): their role
    variables (a monitoring-only host; a fleet node's are checked with its other variables), a
    model it cannot reach (listening on another machine's loopback), and an exporter or
    Prometheus port already taken on its address (SSH, a model, a router is not known here)."""
    from vllm_fleet import monitoring, router

    problems: list[str] = []
    listeners = _fleet_listeners(fleet_hosts)
    everyone = {**fleet_hosts, **monitors}
    for host in sorted(monitors):
        host_vars = monitors[host]
        if "fleet" not in (host_vars.get("group_names") or []):
            own = role_variable_problems(host_vars)
            if own:
                problems += [f"host {host}: {p}" for p in own]
                continue
            if isinstance(host_vars.get("ansible_port"), int):
                listeners.setdefault((str(host_vars.get("ansible_host", host)), host_vars["ansible_port"]),
                                     f"the SSH port of {host}")
        address = str(host_vars.get("ansible_host", host))
        for node in sorted(fleet_hosts):
            for model in router.served_models(fleet_hosts[node], node):
                if node != host and router.unreachable_from(address, node, fleet_hosts[node], model):
                    problems.append(f"host {host}: monitoring cannot scrape model {model['name']} of {node}: it listens "
                                    f"on {model['listen']} only (loopback), which {host} at {address} cannot reach; "
                                    "accepted: a listen address the monitoring host reaches (fleet_serve_listen or the "
                                    "model's listen, with an API key)")
    for host in sorted(everyone):
        host_vars = everyone[host]
        address = str(host_vars.get("ansible_host", host))
        wanted = [("monitoring_node_exporter_port", monitoring.exporter_port(host_vars), "its node exporter")]
        prometheus_port = host_vars.get("monitoring_prometheus_port", role_default("monitoring_prometheus_port"))
        if host in monitors and isinstance(prometheus_port, int):
            wanted.append(("monitoring_prometheus_port", prometheus_port, "Prometheus"))
        for name, port, what in wanted:
            problems += _claim_port(listeners, address, port, f"{what} of {host}", f"host {host}: {name} = {port}")
    return problems


# ------------------------------------------------------------------ entry point

def host_document(host_vars: dict) -> dict:
    """The part of a host's variables that the schema checks."""
    return {k: v for k, v in host_vars.items() if k in schema()["properties"]}


def validate_host(host: str, host_vars: dict) -> tuple[list[str], list[dict]]:
    doc = host_document(host_vars)
    problems = vendor_group_problems(host_vars)
    problems += schema_problems(doc)
    problems += role_variable_problems(host_vars)
    problems += path_problems(host_vars)
    problems += service_user_problems(host_vars)
    models: list[dict] = []
    if isinstance(doc.get("fleet_models", []), list) and isinstance(doc.get("fleet_accelerator"), dict):
        models, model_problems = resolve_models(
            doc.get("fleet_models"), doc.get("fleet_accelerator"),
            serve_defaults=doc.get("fleet_serve_defaults"), serve_env=doc.get("fleet_serve_env"),
            launch_profiles=doc.get("fleet_launch_profiles"), base_port=doc.get("fleet_serve_base_port"),
            host=host)
        problems += model_problems
        problems += model_port_problems(host_vars, models)
        vendor = doc["fleet_accelerator"].get("vendor")
        active = [m for m in models if m["enabled"]]
        for rule in VENDOR_RULES.get(vendor, []):
            problems += rule(doc, active)
        problems += serve_option_problems(doc, active)
    return [f"host {host}: {p}" for p in mask_secrets(problems, secret_values(host_vars))], models


PLACEHOLDER_SHA256 = re.compile(r"^0{60}[0-9a-f]{4}$")


def placeholder_checksums(matrix: Any, path: str = "fleet_matrix") -> list[str]:
    """Where `matrix` still carries an example's placeholder sha256 (sixty zeros, then a
    counter), at any depth: `fleet_matrix.npu_driver`, `fleet_matrix.vllm_overlays[0]`."""
    found: list[str] = []
    if isinstance(matrix, dict):
        if isinstance(matrix.get("sha256"), str) and PLACEHOLDER_SHA256.match(matrix["sha256"]):
            found.append(path)
        for key, value in matrix.items():
            found += placeholder_checksums(value, f"{path}.{key}")
    elif isinstance(matrix, list):
        for index, value in enumerate(matrix):
            found += placeholder_checksums(value, f"{path}[{index}]")
    return found


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


#: Host variables besides fleet_* and role variables that validation reads: where and as whom
#: Ansible connects, and the host's groups.
CONNECTION_VARIABLES = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_user", "remote_user",
                        "group_names")


def _groups(host_vars: dict) -> set[str]:
    return set(host_vars.get("group_names") or [])


def validate_inventory(all_hosts: dict[str, dict], run_hosts: list[str]) -> list[str]:
    """Every problem of the inventory for the hosts of a run, as sentences; [] if valid.

    `all_hosts`: every host of the inventory -> its variables (plain values); `run_hosts`: the
    hosts of the run (after -l). Hosts of the router group alone are no fleet nodes (no
    accelerator, no models): only the router's rules apply to them, against every fleet node
    of the inventory (not only those of the run: `-l router` must still know what the fleet
    serves). Monitoring hosts alike; a fleet node may also be one.
    """
    if not run_hosts:
        return ["no host of the inventory is in this run (the inventory has no hosts, or -l/--limit matches none); "
                "accepted: hosts in the groups fleet, router or monitoring"]
    collected = {h: all_hosts[h] for h in run_hosts}
    fleet = {h: v for h, v in all_hosts.items() if "fleet" in _groups(v)}
    routers = {h: v for h, v in collected.items() if "router" in _groups(v) and "fleet" not in _groups(v)}
    monitors = {h: v for h, v in collected.items() if "monitoring" in _groups(v)}
    problems = validate_hosts({h: v for h, v in collected.items()
                               if h not in routers and not ("monitoring" in _groups(v) and "fleet" not in _groups(v))},
                              fleet)
    if routers:
        problems += router_problems(routers, fleet)
    if monitors:
        problems += monitoring_problems(monitors, fleet)
    return problems


def validate_hosts(hosts: dict[str, dict], inventory: dict[str, dict] | None = None) -> list[str]:
    """Every problem of every host, plus those between hosts; [] when the inventory is valid.
    `inventory`: every fleet host, for the rules of spanning models (default: `hosts`)."""
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
    problems += span_problems(hosts, inventory)
    return problems


def models_needing(models: list[dict]) -> int:
    """Largest device set among resolved models (for preflight)."""
    return max((node_devices(m) for m in models if m["enabled"]), default=0)
