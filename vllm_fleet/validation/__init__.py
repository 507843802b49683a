"""Validation of a whole inventory before any node is touched.

`validate_inventory` takes the variables of every host and the hosts of a run, and returns
every problem at once, each naming the host, the variable, the value and what would be
accepted (vllm_fleet.validation.problem). The rules are organised by class of value, one
module per class, each applied to every variable of its class wherever it sits:

- strings (strings.py): no control or bidi characters in any value or key that may reach a
  file or a command line;
- types and numbers (types.py): role variables of their spec's type, strictly (a switch
  given as a string is refused), every number in its range, derived ones included (ports.py);
- ports (ports.py): one registry per address of everything that listens;
- paths (paths.py): absolute, normal, outside the system's directories, not inside another's;
- secrets (secrets.py): masked in every printed form, keys long enough, no credentials in URLs;
- accounts (accounts.py): the service user is no account of the system or of the admin;
- names (names.py): model, served and unit names of a safe character set and length;
- formats (formats.py): addresses, durations, file modes and URLs that HAProxy, Prometheus
  and systemd parse;
- pass-through options (passthrough.py): option lists handed to `ray start` and `docker run`
  add to what vllm-fleet renders, never undo a rule (privileges, network, ports, dashboard);
- play keywords (play_keywords.py): the extra vars a rollout's `serial` and
  `max_fail_percentage` are templated from, in every form Ansible takes;
- values known only later (later.py): a judged variable whose template reads facts, the
  environment, a command's output, the clock, directly or through the variables it names;

- inventory files (files.py): a file Ansible would forgive (no host in the run, a vars file
  that is no mapping, a key given twice, a vault it cannot open), checked before a run starts;

and by concern: the JSON Schema (schema.py), role argument specs (roles.py), `vllm serve`
options against the pinned releases' parsers (serve.py), each vendor's rules
(vendor_rules/<vendor>.py), the routers (router_hosts.py), monitoring (monitoring_hosts.py), models
spanning nodes (span.py).

What validation warns about instead of refusing (`run_warnings`; `--strict` refuses it): the
precedence surprises of the inventory's files (precedence.py), placeholder checksums in any
variable (matrix.py), hosts whose pinned vLLM release has no description of its `vllm serve`
options, so that their flags could not be checked (serve.py), and hosts whose apt would trust the
fleet's mirror's key on first use, no fingerprint pinned (mirror_key.py).
"""

from __future__ import annotations

from functools import lru_cache

from vllm_fleet.models import flag_key, node_devices, node_models, resolved_once
from vllm_fleet.role_specs import secret_declarations
from vllm_fleet.secrets import SECRET_NAME
from vllm_fleet.secrets import secret_values as _secret_values
from vllm_fleet.validation import (
    accounts,
    classes,
    formats,
    names,
    passthrough,
    paths,
    ports,
    precedence,
    secrets,
    strings,
    types,
)
from vllm_fleet.validation.later import later_problems, later_reads
from vllm_fleet.validation.matrix import placeholder_checksums, placeholder_warnings
from vllm_fleet.validation.mirror_key import mirror_key_warnings
from vllm_fleet.validation.monitoring_hosts import monitoring_problems
from vllm_fleet.validation.play_keywords import play_keyword_problems
from vllm_fleet.validation.roles import role_default, role_options, role_variable_problems
from vllm_fleet.validation.router_hosts import router_problems
from vllm_fleet.validation.schema import fleet_variables, host_document, property_problems, schema, schema_problems
from vllm_fleet.validation.secrets import mask_secrets
from vllm_fleet.validation.serve import (
    json_option_problems,
    serve_option_problems,
    serve_options,
    spelling_problems,
    unchecked_serve_warnings,
)
from vllm_fleet.validation.span import span_problems
from vllm_fleet.validation.vendor_rules import VENDOR_RULES, vendor_group_problems

__all__ = [
    "CONNECTION_VARIABLES", "SECRET_NAME", "WARNING_KINDS", "fleet_variables", "later_reads", "mask_secrets",
    "models_needing",
    "monitoring_problems", "placeholder_checksums", "placeholder_warnings", "role_default", "role_options", "router_problems",
    "run_warnings", "schema", "secret_values", "serve_options", "span_problems", "unchecked_serve_warnings",
    "validate_host", "validate_hosts", "validate_inventory", "validated_variables",
]

#: Host variables besides fleet_* and role variables that validation reads: where and as whom
#: Ansible connects, and the host's groups.
CONNECTION_VARIABLES = ("ansible_host", "ansible_port", *accounts.CONNECTION_USERS, "group_names")


def secret_values(host_vars: dict) -> list[str]:
    """The host's secret values, to mask in every message: vllm_fleet.secrets.secret_values, the
    one rule (by name, by declared class, by the specs' no_log suboptions)."""
    return _secret_values(host_vars, secret_declarations())


def _groups(host_vars: dict) -> set[str]:
    groups = host_vars.get("group_names")
    return set(groups) if isinstance(groups, list) else set()


def _class_problems(host_vars: dict) -> list[str]:
    """The rules by class of value, over every variable of the host (fleet_* and role variables;
    role variables' types and numbers: role_variable_problems, through types.py)."""
    problems = strings.control_character_problems(host_vars)
    problems += types.non_finite_problems(host_vars)
    problems += paths.path_problems(host_vars)
    problems += secrets.secret_problems(host_vars)
    problems += accounts.account_problems(host_vars)
    problems += names.name_problems(host_vars)
    problems += ports.connection_problems(host_vars)
    problems += formats.format_problems(host_vars)
    problems += passthrough.passthrough_problems(host_vars)
    problems += classes.env_problems(host_vars)
    return problems


def validate_host(host: str, host_vars: dict) -> tuple[list[str], list[dict]]:
    """The problems of one fleet node (as sentences naming the host) and its resolved models."""
    doc = host_document(host_vars)
    problems = vendor_group_problems(host_vars)
    shape = schema_problems(doc)
    problems += shape
    problems += role_variable_problems(host_vars)
    problems += _class_problems(host_vars)
    problems += spelling_problems(host_vars)
    problems += json_option_problems(host_vars)
    models: list[dict] = []
    try:
        models, rules = _model_problems(host, doc, host_vars)
        problems += rules
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
        # The rules below the schema read the shapes it describes: where it found the shape
        # wrong, what it said is the problem; elsewhere the inventory is still refused.
        models = []
        if not shape:
            problems.append(f"the models could not be read ({type(exc).__name__}: {exc}); accepted: fleet_models, "
                            "fleet_serve_defaults, fleet_launch_profiles and fleet_accelerator of the shapes "
                            "vllm_fleet/data/inventory.schema.yml describes")
    return [f"host {host}: {p}" for p in dict.fromkeys(mask_secrets(problems, secret_values(host_vars)))], models


def _model_problems(host: str, doc: dict, host_vars: dict) -> tuple[list[dict], list[str]]:
    if not isinstance(doc.get("fleet_models", []), list) or not isinstance(doc.get("fleet_accelerator"), dict):
        return [], []
    models, problems = node_models(doc, host)
    problems += paths.model_path_problems(host_vars, models)
    problems += ports.disabled_model_problems(host_vars, doc)
    vendor = doc["fleet_accelerator"].get("vendor")
    active = [m for m in models if m["enabled"]]
    for rule in VENDOR_RULES.get(vendor, []) if isinstance(vendor, str) else []:
        problems += rule(doc, active)
    # Disabled models are judged like enabled ones, and a launch profile no model uses yet
    # like a model of its kind: enabling one must not be the moment a bad flag is found.
    problems += serve_option_problems(doc, models + _unused_profiles(doc, models))
    return models, problems


def validate_hosts(hosts: dict[str, dict], inventory: dict[str, dict] | None = None) -> list[str]:
    """Every problem of every fleet node in `hosts`, plus those between hosts; [] when valid.
    `inventory`: every fleet host, for the rules of spanning models (default: `hosts`)."""
    problems: list[str] = []
    resolved: dict[str, list[dict]] = {}
    for host in sorted(hosts):
        host_problems, resolved[host] = validate_host(host, hosts[host])
        problems += host_problems
    # Every host here is a fleet node, whatever groups the caller's dicts name.
    problems += ports.listener_problems(ports.in_group({**(inventory or {}), **hosts}, "fleet"), list(hosts), resolved)
    problems += span_problems(hosts, inventory)
    return problems


#: What a variable that cannot be rendered must be instead.
RENDER_ACCEPTED = ("a value, or a template of variables defined for this host when validation runs (facts are "
                   "gathered after it: a validated variable cannot depend on ansible_facts)")

#: ... and one that reads `hostvars`: Ansible renders a host's variables without it whenever they are read
#: through hostvars (by validation, and by the roles that read another host's, as a span's members do).
RENDER_HOSTVARS_ACCEPTED = ("a value, or a template of this host's own variables without `hostvars` (Ansible "
                            "renders a host's variables without it when they are read through hostvars[...], as "
                            "validation and the roles that read another host's do): `{{ ansible_host }}` for "
                            "`{{ hostvars[inventory_hostname]['ansible_host'] }}`, the other host's value written out")


def render_problems(unrendered: dict[str, dict[str, str]], hosts: list[str]) -> list[str]:
    """A variable of a host of the run that Ansible cannot render (an undefined variable, a
    filter's error, a vault it cannot open) is a refusal naming host and variable: the roles
    would fail on it halfway through a converge. `unrendered`: host -> variable -> the error."""
    problems = []
    for host in sorted(hosts):
        for name, error in sorted((unrendered.get(host) or {}).items()):
            accepted = RENDER_HOSTVARS_ACCEPTED if "'hostvars' is undefined" in error else RENDER_ACCEPTED
            problems.append(f"host {host}: {name} cannot be rendered: {error}; accepted: {accepted}")
    return problems


def validate_inventory(all_hosts: dict[str, dict], run_hosts: list[str],
                       unrendered: dict[str, dict[str, str]] | None = None,
                       later: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Every problem of the inventory for the hosts of a run, as sentences; [] if valid.

    `all_hosts`: every host of the inventory -> its variables (plain values); `run_hosts`: the
    hosts of the run (after -l); `unrendered`: host -> variable -> why Ansible could not render
    it; `later`: host -> variable -> the refusal of a template that reads something known only
    later (later.later_reads); the variables of both are absent from `all_hosts`. Hosts of the
    router group alone are no fleet nodes (no accelerator, no models): only the router's rules
    apply to them, against every fleet node of the inventory (not only those of the run: `-l
    router` must still know what the fleet serves). Monitoring hosts alike; a fleet node may also be one. Every host of the run,
    whatever its groups, passes the rules by class and the port registry.

    Each node's served models are resolved once for the whole call (vllm_fleet.models.resolved_once).
    """
    rendering = render_problems(unrendered or {}, run_hosts) + later_problems(later or {}, run_hosts)
    with resolved_once():
        problems = rendering + _validate_inventory(all_hosts, run_hosts)
    every_secret = sorted({s for v in all_hosts.values() for s in secret_values(v)}, key=len, reverse=True)
    return list(dict.fromkeys(mask_secrets(problems, every_secret))) if rendering else problems


def _validate_inventory(all_hosts: dict[str, dict], run_hosts: list[str]) -> list[str]:
    if not run_hosts:
        return ["no host of the inventory is in this run (the inventory has no hosts, or -l/--limit matches none); "
                "accepted: hosts in the groups fleet, router, monitoring or mirror"]
    collected = {h: all_hosts[h] for h in run_hosts}
    fleet = {h: v for h, v in all_hosts.items() if "fleet" in _groups(v)}
    routers = {h: v for h, v in collected.items() if "router" in _groups(v) and "fleet" not in _groups(v)}
    monitors = {h: v for h, v in collected.items() if "monitoring" in _groups(v)}
    nodes = {h: v for h, v in collected.items() if "fleet" in _groups(v)}
    others = {h: v for h, v in collected.items() if h not in nodes}
    # Extra vars reach every host alike: the play keywords they feed are judged once.
    problems = [f"extra var {p}" for p in play_keyword_problems(collected[min(collected)])]
    problems += validate_hosts(nodes, fleet) if nodes else []
    for host in sorted(others):
        own = property_problems(host_document(others[host])) + role_variable_problems(others[host])
        problems += [f"host {host}: {p}"
                     for p in mask_secrets(own + _class_problems(others[host]), secret_values(others[host]))]
    if routers:
        problems += router_problems(routers, fleet)
    if monitors:
        problems += monitoring_problems(monitors, fleet)
    problems += ports.listener_problems(all_hosts, list(collected))
    # Every message once; secrets of every host, and passwords in URLs, masked in all of them.
    every_secret = sorted({s for v in all_hosts.values() for s in secret_values(v)}, key=len, reverse=True)
    return list(dict.fromkeys(mask_secrets(problems, every_secret)))


def inventory_warnings(sources: list[str]) -> list[str]:
    """The precedence surprises of the inventory's files (validation/precedence.py), as sentences
    naming both places; the variable names vllm-fleet reads are the schema's, the roles' options
    and the connection variables."""
    from vllm_fleet.role_specs import role_names  # noqa: PLC0415 - project data, read once

    known = set(fleet_variables()) | set(role_options()) | set(CONNECTION_VARIABLES)
    prefixes = ("fleet_", *(f"{r}_" for r in sorted(role_names())))
    return [w for source in sources for w in precedence.precedence_warnings(source, known, prefixes)]


@lru_cache(maxsize=1)
def validated_variables() -> frozenset[str]:
    """The names of the variables validation reads, besides any with a role's prefix: the schema's
    fleet_*, the roles' options and the connection variables."""
    return frozenset(fleet_variables()) | frozenset(role_options()) | frozenset(CONNECTION_VARIABLES)


#: The kinds of warning, in the order they are printed; `--strict` refuses them all,
#: validate_inventory_strict_checksums only the checksums.
WARNING_KINDS = ("precedence", "checksums", "serve", "mirror_key")


def run_warnings(all_hosts: dict[str, dict], run_hosts: list[str], sources: list[str]) -> dict[str, list[str]]:
    """Every warning of the inventory for the hosts of a run, by kind (WARNING_KINDS): the precedence
    surprises of its files (`sources`), placeholder checksums in any variable of a host of the run,
    the run's fleet nodes whose vLLM release is not described, so that their serve flags go
    unchecked, and the run's hosts whose apt would trust the mirror's key on first use. The one list
    that a run (roles/stages/validate_inventory) and `vllm-fleet status` print."""
    run = {h: all_hosts[h] for h in run_hosts if h in all_hosts}
    return {"precedence": inventory_warnings(sources),
            "checksums": placeholder_warnings(run),
            "serve": unchecked_serve_warnings({h: v for h, v in run.items() if "fleet" in _groups(v)}),
            "mirror_key": mirror_key_warnings(all_hosts, list(run))}


def _unused_profiles(doc: dict, models: list[dict]) -> list[dict]:
    """The serve flags of each launch profile of the inventory that no model uses, as a model of
    that kind would get them (the group's defaults under them), for serve_option_problems."""
    profiles = doc.get("fleet_launch_profiles")
    used = {m.get("kind") for m in models}
    out = []
    for kind, profile in sorted(profiles.items()) if isinstance(profiles, dict) else []:
        if kind in used or not isinstance(profile, dict) or not isinstance(profile.get("serve"), dict):
            continue
        out.append({"name": f"(launch profile {kind})", "serve": {flag_key(str(k)): v for k, v in
                                                                   profile["serve"].items()}, "env": {}})
    return out


def models_needing(models: list[dict]) -> int:
    """Largest device set among resolved models (for preflight)."""
    return max((node_devices(m) for m in models if m["enabled"]), default=0)
