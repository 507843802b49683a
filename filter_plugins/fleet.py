"""Filters of vllm-fleet: inventory validation, model resolution, rendering.

Thin wrappers: the logic lives in the `vllm_fleet` package so that the roles,
`vllm-fleet plan` and the tests share one implementation.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

import yaml
from ansible.errors import AnsibleFilterError

# Ansible loads this file in every worker process that renders one of these filters, so
# it imports only what those need; validation (jsonschema) is imported by its filters.
try:
    from vllm_fleet import cluster, models, monitoring, project, release, render, router, state
    from vllm_fleet.plain import plain as _plain
except ImportError:  # running ansible-playbook from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vllm_fleet import cluster, models, monitoring, project, release, render, router, state
    from vllm_fleet.plain import plain as _plain


def fleet_inventory_problems(hostvars, hosts, sources=None):
    """fleet_inventory_report's first half (no filter of its own): (problems, variables). The
    problems: every problem of the inventory for `hosts` (names), as sentences, [] if valid; those
    of its files (`sources`: ansible_inventory_sources; vllm_fleet.validation.files, the checks the
    CLI makes before it starts a run, so that plain ansible-playbook refuses the same inventories),
    then vllm_fleet.validation.validate_inventory over every host's variables as the roles will
    render them. The variables: those, per host, for the report's warnings to read."""
    from vllm_fleet import validation  # noqa: PLC0415 - jsonschema: only in its filters
    from vllm_fleet.validation import files  # noqa: PLC0415

    try:
        problems = [p for source in sources or [] if Path(str(source)).exists()
                    for p in files.file_problems(str(source))]
        unrendered: dict[str, dict[str, str]] = {}
        later: dict[str, dict[str, str]] = {}
        every = {h: _validated_vars(hostvars, h, unrendered.setdefault(str(h), {}), later.setdefault(str(h), {}))
                 for h in hostvars.keys()}
        problems += _inline_secret_problems()
        return problems + validation.validate_inventory(every, [str(h) for h in hosts], unrendered=unrendered,
                                                        later=later), every
    except Exception as exc:  # a bug here must name the filter, not look like an inventory error
        raise AnsibleFilterError(f"fleet_inventory_problems: {exc}") from exc


def _inline_secret_problems() -> list[str]:
    """A secret among the extra vars given inline on this ansible-playbook's command line (not
    -e @FILE): refused by vllm_fleet.validation.secrets.inline_secret_problems."""
    from ansible import context  # noqa: PLC0415 - the command line of this ansible-playbook
    from ansible.parsing.splitter import parse_kv  # noqa: PLC0415

    from vllm_fleet.validation.secrets import inline_secret_problems  # noqa: PLC0415

    inline: dict = {}
    for item in (context.CLIARGS or {}).get("extra_vars") or ():
        text = str(item).strip()
        if not text or text.startswith("@"):
            continue
        try:
            data = yaml.safe_load(text) if text[0] in "{[" else parse_kv(text)
        except Exception:  # noqa: BLE001 - Ansible itself refuses what it cannot parse
            continue
        if isinstance(data, dict):
            inline.update(data)
    return [f"extra var {p}" for p in inline_secret_problems(inline)]


#: The tags of playbooks/validate.yml's tasks; `always` makes any --tags run them.
_VALIDATION_TAGS = {"always", "validate"}


def fleet_validation_not_skipped(pattern, groups=None, limit=None, sources=None):
    """`pattern`, the validation play's hosts, unless the command line's task selection would skip
    the validation of the inventory (--skip-tags always/validate, --start-at-task), or the run has
    surely no host in `pattern` (`groups`: the inventory's, `limit`: ansible_limit; Ansible would
    skip every play and call the run a success): then the run stops before its first play.
    Templated by the play's `hosts:` in ansible-playbook's own process, before any task (a task
    of any tag could itself be skipped)."""
    from ansible import context  # noqa: PLC0415 - the command line of this ansible-playbook

    from vllm_fleet.validation import files  # noqa: PLC0415 - only the pure file checks

    args = context.CLIARGS or {}
    # --syntax-check (ansible-lint runs it, without an inventory) and the --list-* views run nothing.
    looking = any(args.get(k) for k in ("syntax", "listhosts", "listtasks", "listtags"))
    if groups is not None and not looking:
        members = {str(g): {str(h) for h in hosts} for g, hosts in _plain(groups).items()}
        problem = files.no_inventory_problem([str(s) for s in sources or []],
                                             len(set().union(*members.values())) if members else 0)
        if problem:
            raise AnsibleFilterError(problem)
        problem = files.surely_no_hosts(members, str(pattern), str(limit) if limit else None,
                                        ", ".join(str(s) for s in sources or []) or "(given)")
        if problem:
            raise AnsibleFilterError(problem)

    skipped = sorted(_VALIDATION_TAGS & {str(t) for t in args.get("skip_tags") or ()})
    why = ""
    if skipped:
        why = f"--skip-tags {','.join(skipped)}"
    elif args.get("start_at_task"):
        why = f"--start-at-task {args['start_at_task']!r}"
    if why:
        raise AnsibleFilterError(
            f"{why} would skip the validation of the inventory, which every run makes before it touches a "
            "host; accepted: --tags and --skip-tags of other tags, -l to choose hosts (validation is quick: "
            "it contacts no host)")
    return pattern


def _verdict_file() -> Path:
    """Where the validation play leaves its verdict for the play after it: a file in this run's own
    temporary directory (Ansible's DEFAULT_LOCAL_TMP: made private by ansible-playbook's process for
    this one run and removed when it ends; the workers it forks, where tasks render, see the same path)."""
    from ansible import constants as C  # noqa: PLC0415, N812 - Ansible's own spelling

    return Path(C.DEFAULT_LOCAL_TMP) / "vllm-fleet-validation.json"


def fleet_validation_verdict_write(problems):
    """Write the validation play's verdict (its problems, [] when valid) where the play after it reads
    it, and return how many problems it has. A filter, not a copy task: the copy module costs a
    Python process on the controller (1.7 s of a 1 s validation on the 2-core CI machine); this
    writes from the worker that renders it, in check mode too."""
    path = _verdict_file()
    path.write_text(json.dumps([str(p) for p in _plain(problems)]))
    path.chmod(0o600)
    return len(problems)


def fleet_validation_verdict(pattern):
    """`pattern` when the validation play before found no problem (playbooks/validate.yml). Otherwise
    the run stops here, at this play's `hosts:`, before any task: ansible-playbook then exits 4, the
    code vllm-fleet gives a refused inventory (a failed task could only make it 2, a failed host),
    with the same sentences. No verdict (the play before never wrote one) stops the run too. The
    verdict is read once: a later import of validate.yml in the same run judges again."""
    from ansible import context  # noqa: PLC0415 - the command line of this ansible-playbook

    args = context.CLIARGS or {}
    if any(args.get(k) for k in ("syntax", "listhosts", "listtasks", "listtags")):
        return pattern  # nothing runs: no verdict was written
    path = _verdict_file()
    try:
        problems = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(
            f"The inventory was not validated: the play 'Validate the inventory' left no verdict ({exc}); "
            "nothing was changed on any host") from exc
    if not isinstance(problems, list):
        raise AnsibleFilterError(f"The inventory was not validated: its verdict is no list ({path})")
    if problems:
        raise AnsibleFilterError("\n  - ".join(
            ["The inventory is invalid; nothing was changed on any host:"] + [str(p) for p in problems]))
    return pattern


def _validated_vars(hostvars, host, unrendered=None, later=None):
    """The variables of `host` that validation reads, as plain values: rendered as the roles will
    render them (templates, lookups, vault). A variable that cannot be rendered is left out and,
    where `unrendered` is given, its error kept there by name (validation refuses it by name:
    vllm_fleet.validation.render_problems); without it, the error is raised as before. Where
    `later` is given, a variable whose template reads something known only later (facts, the
    environment, a command: vllm_fleet.validation.later) is left out unrendered and its refusal
    kept there by name."""
    from vllm_fleet import validation  # noqa: PLC0415 - jsonschema: only in its filters

    hv = hostvars[host]
    wanted = validation.validated_variables()
    names = [k for k in hv.keys() if k in wanted or any(k.startswith(r + "_") for r in _role_names())]
    if unrendered is None:
        return {k: _plain(hv[k]) for k in names}
    out = {}
    deferred = validation.later_reads(_as_written(_raw_vars(hostvars, host)), names) if later is not None else {}
    for k in names:
        if k in deferred:
            # Judged now, used later as something else: refused (validation.later), never rendered here.
            later[k] = deferred[k]
            continue
        try:
            out[k] = _plain(hv[k])
        except Exception as exc:  # noqa: BLE001 - whatever a template raises is the inventory's problem
            message = " ".join(str(getattr(exc, "message", "") or exc).split())
            missing = re.search(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined", message)
            close = difflib.get_close_matches(missing.group(1), [str(n) for n in hv.keys()], n=1) if missing else []
            unrendered[k] = message + (f" (did you mean {close[0]!r}?)" if close else "")
    return out


def _raw_vars(hostvars, host) -> dict:
    """The host's variables as written (templates unrendered), or {} where Ansible cannot say."""
    try:
        return hostvars.raw_get(host)
    except Exception:  # noqa: BLE001 - only for the rule of values known later: the values are still judged
        return {}


def _as_written(value):
    """`value` as plain data, a string Ansible would not render (`!unsafe`: not trusted as a
    template) as None: it reads nothing."""
    try:
        from ansible.template import is_trusted_as_template  # noqa: PLC0415 - ansible-core >= 2.19
    except ImportError:  # before data tagging every string is a template
        def is_trusted_as_template(_value):
            return True

    def walk(v):
        if isinstance(v, dict) or hasattr(v, "items"):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if isinstance(v, str):
            return str(v) if is_trusted_as_template(v) else None
        return v

    return walk(value)


def fleet_inputs_digest(hostvars, host, groups=None):
    """One digest of what `host`'s converge reads on the controller (vllm_fleet.state.inputs_digest):
    its variables as validation reads them, the inventory's groups and vllm-fleet's own files."""
    try:
        return state.inputs_digest(_validated_vars(hostvars, host), project.code_digest(), _plain(groups or {}))
    except Exception as exc:  # the message must not carry a variable's value (secrets): name the filter only
        raise AnsibleFilterError(f"fleet_inputs_digest: {type(exc).__name__}") from None


def _fleet_and_monitoring(hostvars):
    """Every fleet node and monitoring host of the inventory, as validation reads them."""
    return {h: _validated_vars(hostvars, h) for h in hostvars.keys()
            if {"fleet", "monitoring"} & set(hostvars[h].get("group_names") or [])}


def fleet_monitoring_targets(hostvars):
    """What Prometheus scrapes (vllm_fleet/monitoring.py): {models: [...], nodes: [...]}."""
    try:
        hosts = _fleet_and_monitoring(hostvars)
        fleet = {h: v for h, v in hosts.items() if "fleet" in v.get("group_names", [])}
        routers = {h: _validated_vars(hostvars, h) for h in hostvars.keys()
                   if "router" in (hostvars[h].get("group_names") or [])}
        return {"models": monitoring.model_targets(fleet), "nodes": monitoring.node_targets(hosts),
                "routers": monitoring.router_targets(routers)}
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_monitoring_targets: {exc}") from exc


def fleet_monitoring_api_keys(hostvars):
    """{credentials file name: API key} of every model with a key (secrets: use with no_log)."""
    try:
        fleet = {h: v for h, v in _fleet_and_monitoring(hostvars).items() if "fleet" in v.get("group_names", [])}
        return monitoring.api_keys(fleet)
    except Exception as exc:  # the message must not carry a key: name the filter only
        raise AnsibleFilterError(f"fleet_monitoring_api_keys: {type(exc).__name__}") from None


def fleet_engine_api_key(fleet_models, name, group_key=""):
    """The API key the engine of the model `name` asks for (vllm_fleet.models.engine_api_key):
    its own secret_env.VLLM_API_KEY over the group's fleet_serve_api_key (a secret: use with no_log)."""
    try:
        return models.engine_api_key(models.inventory_model(_plain(fleet_models), _plain(name)), _plain(group_key))
    except Exception as exc:  # the message must not carry a key: name the filter only
        raise AnsibleFilterError(f"fleet_engine_api_key: {type(exc).__name__}") from None


def fleet_router_backends(hostvars, router_models):
    """The router's backends (vllm_fleet.router.backends) from every fleet node of the inventory."""
    fleet = {h: _validated_vars(hostvars, h) for h in hostvars.keys()
             if "fleet" in (hostvars[h].get("group_names") or [])}
    try:
        return router.backends(_plain(router_models), fleet)
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_router_backends: {exc}") from exc


def fleet_router_engine_key(backend, hostvars):
    """The engines' key the router puts on a backend's requests where teams have keys
    (vllm_fleet.router.engine_key)."""
    try:
        fleet = {server["host"]: _validated_vars(hostvars, server["host"]) for server in _plain(backend)["servers"]}
        return router.engine_key(_plain(backend), fleet)
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_router_engine_key: {exc}") from exc


def fleet_router_pool_argv(pool, executable, check_interval, check_fall, check_rise, metrics_address, timeout):
    """A vllm-router pool's command line but its workers (vllm_fleet.router.pool_argv)."""
    try:
        return router.pool_argv(_plain(pool), str(executable), check_interval, int(check_fall), int(check_rise),
                                str(metrics_address), timeout)
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_router_pool_argv: {exc}") from exc


def fleet_router_page(hostvars, backends, title, currency, presets):
    """The chat page's config.json and the page server's proxied metrics (vllm_fleet.router):
    {config, upstreams}; nodes have exporters once the inventory has a monitoring host."""
    try:
        fleet = {h: _validated_vars(hostvars, h) for h in hostvars.keys()
                 if "fleet" in (hostvars[h].get("group_names") or [])}
        monitored = any("monitoring" in (hostvars[h].get("group_names") or []) for h in hostvars.keys())
        ports = {h: monitoring.exporter_port(v) for h, v in fleet.items()} if monitored else {}
        backends = _plain(backends)
        return {"config": router.page_config(backends, fleet, str(title), str(currency), _plain(presets), ports),
                "upstreams": router.page_upstreams(backends, ports)}
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_router_page: {exc}") from exc


def fleet_router_routes(hostvars, node):
    """The routers in front of `node` (vllm_fleet.router.routes): every router host's
    router_models against every fleet node of the inventory."""
    fleet = {h: _validated_vars(hostvars, h) for h in hostvars.keys()
             if "fleet" in (hostvars[h].get("group_names") or [])}
    routers = {h: _plain(hostvars[h].get("router_models") or []) for h in hostvars.keys()
               if "router" in (hostvars[h].get("group_names") or [])}
    try:
        return router.routes(str(node), routers, fleet)
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_router_routes: {exc}") from exc


def fleet_inventory_report(hostvars, hosts, sources=None, strict=False, checksums=False):
    """{problems, warnings} of the inventory for `hosts`: fleet_inventory_problems', then every
    warning of the run (vllm_fleet.validation.run_warnings: the precedence surprises of its files,
    placeholder checksums, releases whose serve flags cannot be checked, a mirror's apt key trusted on
    first use), each a warning, or a problem with `strict` (all of them) or `checksums` (the
    placeholder checksums)."""
    from vllm_fleet import validation  # noqa: PLC0415 - jsonschema: only in its filters

    problems, every = fleet_inventory_problems(hostvars, hosts, sources)
    try:
        found = validation.run_warnings(every, [str(h) for h in hosts],
                                        [str(s) for s in sources or [] if Path(str(s)).exists()])
    except Exception as exc:  # a bug here must name the filter, not look like an inventory error
        raise AnsibleFilterError(f"fleet_inventory_report: {exc}") from exc
    refused = [w for kind in validation.WARNING_KINDS for w in found[kind]
               if strict or (checksums and kind == "checksums")]
    return {"problems": problems + refused,
            "warnings": [w for kind in validation.WARNING_KINDS for w in found[kind] if w not in refused]}


def _role_names():
    from vllm_fleet import validation  # noqa: PLC0415 - jsonschema: only in its filters

    return {role for role, _ in validation.role_options().values()}


def fleet_node_models(inputs, host):
    """What node `host` serves (vllm_fleet.models.node_models, the one resolution): `inputs` holds
    the host's models.NODE_INPUTS as the play sees them (role defaults included), with
    fleet_serve_api_key as whether there is one. Called once, in roles/stages/fleet/vars
    (`_fleet_node_models`); every role reads that."""
    resolved, problems = models.node_models(_plain(inputs), None if host is None else str(host))
    if problems:
        raise AnsibleFilterError("fleet_node_models: " + "; ".join(problems))
    return resolved


def fleet_cluster_address(hostvars, host):
    """The address `host`'s Ray member binds (vllm_fleet.cluster.cluster_address)."""
    hv = hostvars[str(host)]
    return cluster.cluster_address(str(host), {k: _plain(hv.get(k)) for k in ("fleet_cluster_address", "ansible_host")})


def fleet_ray_env(model, cluster_contract, address, interface, visible_env, head_address):
    """A spanning model's member environment (vllm_fleet.cluster.member_env)."""
    model = _plain(model)
    return cluster.member_env(_plain(cluster_contract), str(address), _plain(interface) or None,
                              _plain(visible_env) or None, model.get("devices") or [], str(head_address),
                              int(model["span"]["port"]))


def fleet_ray_start_argv(model, ray, address, head_address, resource, temp_dir, num_cpus=0, object_store_bytes=0,
                         extra=None):
    """`ray start` of a spanning model's member (vllm_fleet.cluster.ray_start_argv)."""
    return cluster.ray_start_argv(_plain(model), str(ray), address=str(address), head_address=str(head_address),
                                  resource=_plain(resource) or None, temp_dir=str(temp_dir), num_cpus=int(num_cpus),
                                  object_store_bytes=int(object_store_bytes), extra=_plain(extra) or [])


def fleet_ray_gate_spec(model, members, resource, timeout, delay=2):
    """What the head's gate waits for (vllm_fleet.cluster.gate_spec)."""
    return cluster.gate_spec(_plain(model), _plain(members), _plain(resource) or None, int(timeout), int(delay))


def fleet_fabric_spec(model, member, address, head_address, env, checks):
    """What a spanning model's member checks before its Ray unit starts (vllm_fleet.cluster.fabric_spec)."""
    return cluster.fabric_spec(_plain(model), str(member), str(address), str(head_address), _plain(env) or {},
                               _plain(checks) or [])


def fleet_fabric_head_probes(model, hostvars):
    """On a span's head, what each other member must reach (vllm_fleet.cluster.head_probes)."""
    model = _plain(model)
    addresses = {str(host): fleet_cluster_address(hostvars, host) for host in model["span"]["nodes"]}
    return cluster.head_probes(model, addresses)


def vllm_serve_argv(model, executable="vllm"):
    return render.serve_argv(_plain(model), executable)


def vllm_launch_argv(model, executable, launcher, env_scripts=None, conda=None):
    return render.launch_argv(_plain(model), executable, launcher, _plain(env_scripts), _plain(conda))


def vllm_container_argv(model, settings, runtime, env_files, image):
    return render.container_argv(_plain(model), _plain(settings), runtime=runtime, env_files=_plain(env_files),
                                 image=image)


def fleet_unit_devices(model, patterns, count):
    """The device nodes a model's host-mode units may open (vllm_fleet.render.unit_devices)."""
    try:
        return render.unit_devices(_plain(model), _plain(patterns) or [], int(count or 0))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_unit_devices: {exc}") from exc


def systemd_command(argv):
    return render.systemd_command(_plain(argv))


def shell_command(argv):
    return render.shell_command(_plain(argv))


def _escaper(render_fn, doc):
    """A filter that renders through vllm_fleet.render's `render_fn` (one escaper per target
    format), turning its ValueError into an error that names the filter."""
    def escape(value):
        try:
            return render_fn(_plain(value))
        except ValueError as exc:
            raise AnsibleFilterError(f"{render_fn.__name__}: {exc}") from exc
    escape.__name__, escape.__doc__ = render_fn.__name__, doc
    return escape


env_file = _escaper(render.env_file, "An environment file's lines (vllm_fleet.render.env_file), or an error.")
plain_word = _escaper(render.plain_word, "A value that must stay one word where it lands, or an error.")
single_word = _escaper(render.single_word, "A value without whitespace or control characters, or an error.")
systemd_text = _escaper(render.systemd_text, "Free text of a systemd unit line, % doubled, or an error.")
haproxy_quote = _escaper(render.haproxy_quote, "One word of an HAProxy configuration line, or an error.")


def tiktoken_cache_key(url):
    if not isinstance(url, str) or "://" not in url:
        raise AnsibleFilterError(f"tiktoken_cache_key: expected a URL, got {url!r}")
    return render.tiktoken_cache_key(url)


def fleet_units_to_start(show_output):
    """Units that `systemctl show --property=Id,UnitFileState,ActiveState` reports as not enabled or not running."""
    if not isinstance(show_output, str):
        raise AnsibleFilterError(f"fleet_units_to_start: expected systemctl's output as text, got {show_output!r}")
    return state.units_to_start(show_output)


def fleet_leftover_units(installed, served, fleet_models, prune=False, program="vllm"):
    """{remove, orphaned}: the installed units (paths) that are not `served` (unit names), by
    vllm_fleet.state.leftover_units; listed: the `program` units of every model of `fleet_models`
    (the node's inventory, disabled and absent ones included)."""
    try:
        listed = [models.unit_name(str(m["name"]), program) for m in _plain(fleet_models or [])
                  if isinstance(m, dict) and "name" in m]
        return state.leftover_units([str(u) for u in installed], [str(u) for u in served], listed, bool(prune))
    except Exception as exc:
        raise AnsibleFilterError(f"fleet_leftover_units: {exc}") from exc


def fleet_install_action(row, upgrade="upgrade", fresh="install"):
    """What to do about one row of fleet_versions: 'none', `upgrade` or `fresh`."""
    if not isinstance(row, dict) and not hasattr(row, "items"):
        raise AnsibleFilterError(f"fleet_install_action: expected a row of fleet_versions, got {row!r}")
    return state.install_action(_plain(row), upgrade, fresh)


def fleet_doctor_row(row):
    """One row of doctor's comparison as a readable line."""
    return state.doctor_line(_plain(row))


def fleet_doctor_mismatch(row):
    """The mismatch sentence of a loaded-driver row."""
    return state.driver_mismatch(_plain(row))


def fleet_release_id(matrix, keys, vendor):
    """The id of the release a vendor's matrix defines (vllm_fleet/release.py)."""
    try:
        return release.release_id(_plain(matrix), _plain(keys), str(vendor))
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_release_id: {exc}") from exc


def fleet_release_keys(release_entries, pins):
    """The matrix entries that name the vendor's release: the contract's release and pins
    (given apart: rendering the whole contract would render doctor's paths, which need facts)."""
    return release.release_keys(_plain(release_entries), _plain(pins))


def fleet_node_pins(pins, span_pins, fleet_models, host):
    """The node's pins: the contract's, and its cluster's (Ray) where one of the node's models spans
    nodes (vllm_fleet.release.node_pins, vllm_fleet.models.spans_node)."""
    try:
        return release.node_pins(_plain(pins), _plain(span_pins), models.spans_node(_plain(fleet_models), str(host)))
    except ValueError as exc:
        raise AnsibleFilterError(f"fleet_node_pins: {exc}") from exc


def fleet_pin_specs(pins, matrix):
    """The contract's pins as pip requirements at the matrix's versions (`torch==2.7.1`)."""
    try:
        return release.pin_specs(_plain(pins), _plain(matrix))
    except ValueError as exc:
        raise AnsibleFilterError(f"fleet_pin_specs: {exc}") from exc


def fleet_pin_versions(pins, matrix):
    """The contract's pins as {distribution: version}: what doctor compares."""
    try:
        return release.pin_versions(_plain(pins), _plain(matrix))
    except ValueError as exc:
        raise AnsibleFilterError(f"fleet_pin_versions: {exc}") from exc


def fleet_release_inputs(matrix, keys, vendor):
    """What that release is built from (written into its completion marker)."""
    try:
        return release.release_inputs(_plain(matrix), _plain(keys), str(vendor))
    except (KeyError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_release_inputs: {exc}") from exc


# ------------------------------------------------------------------ the fleet's mirror (vllm_fleet/mirror/layout.py)

def fleet_mirror_url(mirror_hosts, hostvars):
    """The URL of the fleet's mirror (the first host of the group mirror), "" without one."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415 - only in the plays that read it

    return layout.mirror_url(_plain(mirror_hosts or []), hostvars)


def fleet_node_source(url, name, value):
    """What a node fetches the source `name` from: the mirror at `url`, else the inventory's `value`."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415

    return layout.node_source(str(url or ""), str(name), _plain(value))


def fleet_mirror_apt_source(url, enabled=True):
    """The deb822 source of the mirror's apt repository at `url` and its key's URL; {} without a mirror,
    or when the hosts keep their own apt sources (`enabled` false: fleet_mirror_apt)."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415

    return layout.apt_source(str(url or "")) if enabled else {}


def fleet_openpgp_key(key):
    """What an ASCII-armored OpenPGP public key is: {fingerprints, problem}, the v4 fingerprint of each of
    its primary keys (40 upper-case hex digits) or why it is none ([] and a sentence); roles/blocks/apt_mirror
    checks the mirror's key against fleet_mirror_apt_key_fingerprint with it. Hand-written
    (vllm_fleet/mirror/openpgp.py): the controller need not have gpg, and python-gnupg only drives gpg."""
    from vllm_fleet.mirror import openpgp  # noqa: PLC0415

    try:
        return {"fingerprints": openpgp.fingerprints(str(key or "")), "problem": ""}
    except ValueError as exc:
        return {"fingerprints": [], "problem": str(exc)}


def fleet_mirror_sources(entry, url, kind):
    """The URLs a node fetches a matrix entry from: its place in the mirror, else its own sources."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415

    try:
        return layout.mirrored_sources(_plain(entry), str(url or ""), str(kind))
    except (KeyError, IndexError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_mirror_sources: {exc}") from exc


def fleet_mirror_model_url(source, url):
    """The base URL of a model's snapshot in the mirror at `url` (a hub's or a git source's: layout.model_path,
    where the sync writes it)."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415

    return f"{url}/{layout.model_path(_plain(source))}"


def fleet_mirror_sums(text):
    """The files of a model snapshot in the fleet's mirror, from its sha256 list: [{name, sha256}]."""
    from vllm_fleet.mirror import layout  # noqa: PLC0415

    try:
        return layout.parse_sums(str(text))
    except ValueError as exc:
        raise AnsibleFilterError(f"fleet_mirror_sums: {exc}") from exc


def fleet_mirror_problems(hostvars, groups, manifest, url, inventory="", hosts_of_run=None):
    """What the run's hosts (fleet nodes, routers, monitoring hosts) would fetch that the mirror's manifest
    does not hold, and a source of theirs that passes the mirror by, as refusals."""
    from vllm_fleet.mirror import check  # noqa: PLC0415

    hosts = {}
    members = {h for g in ("fleet", "router", "monitoring") for h in _plain(groups).get(g, [])}
    for host in sorted(members & set(_plain(hosts_of_run)) if hosts_of_run is not None else members):
        own = hostvars[host]
        hosts[host] = {key: _plain(own[key]) for key in check.KEYS if key in own}
        hosts[host]["groups"] = _plain(groups)
    return check.missing(hosts, _plain(manifest), str(url), str(inventory))


def fleet_plan_files(role_files, plan_dir, host, hostvars):
    """A role's files of `host` as one fleet_files call's arguments that write them into the plan
    (vllm_fleet/plans.py): under plan_dir/<host>/, every secret of the inventory masked."""
    from vllm_fleet import plans as plan  # noqa: PLC0415 - only where a plan is made

    return plan.files(_plain(role_files), str(plan_dir), str(host), plan.inventory_secrets(hostvars))


def fleet_plan_dir_problem(plan_dir):
    """Why plan_dir cannot take a plan ('' when it can: new, empty, or an earlier plan's)."""
    from vllm_fleet import plans as plan  # noqa: PLC0415 - only where a plan is made

    return plan.problem(str(plan_dir))


class FilterModule:
    """vllm-fleet filters."""

    def filters(self):
        return {
            "fleet_validation_not_skipped": fleet_validation_not_skipped,
            "fleet_validation_verdict": fleet_validation_verdict,
            "fleet_validation_verdict_write": fleet_validation_verdict_write,
            "fleet_plan_files": fleet_plan_files,
            "fleet_plan_dir_problem": fleet_plan_dir_problem,
            "fleet_inventory_report": fleet_inventory_report,
            "fleet_router_backends": fleet_router_backends,
            "fleet_router_routes": fleet_router_routes,
            "fleet_router_pool_argv": fleet_router_pool_argv,
            "fleet_router_engine_key": fleet_router_engine_key,
            "fleet_router_page": fleet_router_page,
            "fleet_router_seconds": lambda value: router.haproxy_seconds(value),
            "fleet_router_worker_url": lambda server: router.worker_url(_plain(server)),
            "fleet_router_nginx_listen": lambda listen, port: router.nginx_listen(listen, port),
            "fleet_local_address": lambda listen, url=False: models.local_address(listen, url),
            "fleet_mirror_url": fleet_mirror_url,
            "fleet_node_source": fleet_node_source,
            "fleet_mirror_sources": fleet_mirror_sources,
            "fleet_mirror_apt_source": fleet_mirror_apt_source,
            "fleet_openpgp_key": fleet_openpgp_key,
            "fleet_mirror_model_url": fleet_mirror_model_url,
            "fleet_mirror_problems": fleet_mirror_problems,
            "fleet_mirror_sums": fleet_mirror_sums,
            "fleet_monitoring_targets": fleet_monitoring_targets,
            "fleet_monitoring_api_keys": fleet_monitoring_api_keys,
            "fleet_engine_api_key": fleet_engine_api_key,
            "fleet_node_models": fleet_node_models,
            "vllm_serve_argv": vllm_serve_argv,
            "vllm_launch_argv": vllm_launch_argv,
            "vllm_container_argv": vllm_container_argv,
            "fleet_unit_devices": fleet_unit_devices,
            "systemd_command": systemd_command,
            "shell_command": shell_command,
            "env_file": env_file,
            "plain_word": plain_word,
            "single_word": single_word,
            "systemd_text": systemd_text,
            "haproxy_quote": haproxy_quote,
            "tiktoken_cache_key": tiktoken_cache_key,
            "fleet_units_to_start": fleet_units_to_start,
            "fleet_inputs_digest": fleet_inputs_digest,
            "fleet_install_action": fleet_install_action,
            "fleet_leftover_units": fleet_leftover_units,
            "fleet_doctor_row": fleet_doctor_row,
            "fleet_doctor_mismatch": fleet_doctor_mismatch,
            "fleet_release_id": fleet_release_id,
            "fleet_release_inputs": fleet_release_inputs,
            "fleet_release_keys": fleet_release_keys,
            "fleet_node_pins": fleet_node_pins,
            "fleet_pin_specs": fleet_pin_specs,
            "fleet_pin_versions": fleet_pin_versions,
            "fleet_cluster_address": fleet_cluster_address,
            "fleet_ray_env": fleet_ray_env,
            "fleet_ray_start_argv": fleet_ray_start_argv,
            "fleet_ray_gate_spec": fleet_ray_gate_spec,
            "fleet_fabric_spec": fleet_fabric_spec,
            "fleet_fabric_head_probes": fleet_fabric_head_probes,
        }
