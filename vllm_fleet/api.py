"""The Python API: run vllm-fleet's playbooks through ansible-runner.

    import vllm_fleet
    result = vllm_fleet.provision("inventories/lab", limit="ascend-nodes")
    print(result)                      # per-host table
    result.ok, result.exit_code        # True/False, 0 / 2 failed / 3 unreachable / 4 invalid inventory /
                                       # 130 interrupted
    result.hosts["ascend-01"].changed  # counts per host
    result.failures                    # each failed task with its host and message
    result.artifacts_dir               # ansible-runner's artifacts of the run

Every call takes the inventory (a path), an optional limit, extra variables, and an
optional `event_handler` called with each ansible-runner event (already scrubbed of
secrets). Secrets (hub tokens, API keys) go in `secrets`: they reach Ansible through a
0600 file outside the runner's directories and are removed afterwards, every event is
scrubbed of their values before it is handed to the handler or written, and the
artifacts directory is scrubbed again after the run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_fleet import bench as _bench
from vllm_fleet import canary as _canary
from vllm_fleet import inventory as _inventory
from vllm_fleet import live_status, role_specs
from vllm_fleet import plans as _plan
from vllm_fleet import secrets as secrets_mod
from vllm_fleet.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID_INVENTORY, EXIT_OK, EXIT_UNREACHABLE
from vllm_fleet.mirror import bom as _mirror_bom
from vllm_fleet.mirror import pack as _mirror_pack
from vllm_fleet.mirror import store as _mirror_store
from vllm_fleet.mirror import sync as _mirror_sync
from vllm_fleet.project import PROJECT_DIR
from vllm_fleet.validation import files as _inventory_files
from vllm_fleet.validation import play_keywords as _play_keywords

MASK = secrets_mod.MASK
#: The validation play's role as Ansible names it in events (its path under roles/).
VALIDATION_ROLE = "stages/validate_inventory"

EventHandler = Callable[[dict], Any]


@dataclass
class TaskFailure:
    """A task that failed (or found its host unreachable)."""

    host: str
    task: str
    message: str
    role: str | None = None
    unreachable: bool = False


@dataclass
class HostResult:
    """What one host went through, from the play recap."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    #: When validation refused the inventory: True for a host with problems, False for one without.
    invalid: bool | None = None

    @property
    def status(self) -> str:
        if self.invalid is not None:
            return "invalid" if self.invalid else "valid"
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


@dataclass
class RunResult:
    """The outcome of one playbook run."""

    playbook: str
    inventory: str
    limit: str | None
    check: bool
    status: str
    rc: int
    hosts: dict[str, HostResult] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    started: float = 0.0
    duration: float = 0.0
    artifacts_dir: str = ""
    task_durations: dict[str, float] = field(default_factory=dict)
    #: Per host, in check mode: what a real run would first create, where the preview stopped.
    check_stopped: dict[str, str] = field(default_factory=dict)
    #: Per host, the units left running although the inventory no longer lists their models
    #: (removed only with `state: absent` or fleet_prune: roles/blocks/vllm_service, roles/blocks/ray_cluster).
    orphaned: dict[str, list[str]] = field(default_factory=dict)
    #: What validation warned about (roles/stages/validate_inventory, vllm_fleet.validation.run_warnings): a
    #: value that never reaches a host, a variable nothing reads, placeholder checksums, a vLLM release
    #: whose serve flags could not be checked, a mirror's apt key trusted on first use; refused instead
    #: with --strict.
    warnings: list[str] = field(default_factory=list)
    #: Per host, what doctor compared: rows of {component, kind, expected, installed, ok, detail}.
    components: dict[str, list[dict]] = field(default_factory=dict)
    #: Per host whose release was read: {from, to, installed} (roles/blocks/fleet_release); from == to
    #: when the run did not move it.
    releases: dict[str, dict] = field(default_factory=dict)
    #: A rollout's progress: {serial, max_fail_percentage, reached: nodes whose turn came, in
    #: order, not_reached: the run's other fleet nodes (untouched)}; None for other runs.
    rollout: dict | None = None

    def __post_init__(self):
        # Validation judges every host at once and stops the run before any is touched: say which
        # hosts have problems.
        if self.problems:
            for host, r in self.hosts.items():
                r.invalid = any(p.startswith(f"host {host}:") for p in self.problems)

    @property
    def invalid_inventory(self) -> bool:
        return bool(self.problems)

    @property
    def invalid_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.invalid)

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.failed and not r.unreachable and r.invalid is None)

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.unreachable)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures and not self.problems

    @property
    def exit_code(self) -> int:
        """0 success; 4 the inventory is invalid; 130 interrupted; 3 a host was unreachable; 2 a host failed."""
        if self.problems:
            return EXIT_INVALID_INVENTORY
        if self.status == "canceled":
            return EXIT_INTERRUPTED
        if self.unreachable_hosts:
            return EXIT_UNREACHABLE
        if self.failed_hosts or self.rc != 0:
            return EXIT_FAILED
        return EXIT_OK

    def to_dict(self) -> dict:
        return {
            "playbook": self.playbook, "inventory": self.inventory, "limit": self.limit, "check": self.check,
            "status": self.status, "rc": self.rc, "exit_code": self.exit_code, "ok": self.ok,
            "duration_s": round(self.duration, 1), "artifacts_dir": self.artifacts_dir,
            "hosts": {h: {**r.__dict__, "status": r.status} for h, r in sorted(self.hosts.items())},
            "failures": [f.__dict__ for f in self.failures],
            "invalid_inventory": self.invalid_inventory, "invalid_hosts": self.invalid_hosts, "problems": self.problems,
            "check_stopped": dict(sorted(self.check_stopped.items())),
            "orphaned": dict(sorted(self.orphaned.items())),
            "warnings": self.warnings,
            "components": dict(sorted(self.components.items())),
            "releases": dict(sorted(self.releases.items())),
            "rollout": self.rollout,
            "slowest_tasks": dict(sorted(self.task_durations.items(), key=lambda kv: -kv[1])[:10]),
        }

    def warning_lines(self) -> list[str]:
        """Validation's warnings as the summary prints them. Every summary that shows a run, whole
        or in part (a plan, a canary rollout, a mirror sync), prints these lines: a warning no
        summary shows is one nobody sees."""
        return [f"warning: {w}" for w in self.warnings]

    def __str__(self) -> str:
        lines = [f"{self.playbook} on {self.inventory}" + (f" (limit {self.limit})" if self.limit else "")
                 + (" [check mode]" if self.check else "") + f": {self.status} in {self.duration:.0f} s"]
        lines += self.warning_lines()
        if self.problems:
            lines.append("The inventory is invalid; nothing was changed on any host:")
            lines += [f"  - {p}" for p in self.problems]
        if self.hosts:
            width = max(len("HOST"), *(len(h) for h in self.hosts))
            lines.append(f"{'HOST'.ljust(width)}  {'STATUS':<11} {'OK':>4} {'CHANGED':>7} {'FAILED':>6} "
                         f"{'UNREACHABLE':>11} {'SKIPPED':>7}")
            for host, r in sorted(self.hosts.items()):
                lines.append(f"{host.ljust(width)}  {r.status:<11} {r.ok:>4} {r.changed:>7} {r.failed:>6} "
                             f"{r.unreachable:>11} {r.skipped:>7}")
        for f in self.failures:
            if self.problems and f.role == VALIDATION_ROLE:
                continue
            what = "unreachable" if f.unreachable else "failed"
            lines.append(f"{f.host}: {what} at '{f.task}': {f.message}")
        lines += components_table(self.components)
        for host, release in sorted(self.releases.items()):
            moved = release["from"] != release["to"]
            lines.append(f"{host}: release {release['from'] or 'none'} -> {release['to']}" if moved
                         else f"{host}: release {release['to'] or 'none'} (unchanged)")
        if self.rollout is not None:
            lines.append(f"rollout, {self.rollout['serial']} node(s) at a time: {len(self.rollout['reached'])} of "
                         f"{len(self.rollout['reached']) + len(self.rollout['not_reached'])} node(s) reached"
                         + (f"; stopped before {', '.join(self.rollout['not_reached'])} (untouched)"
                            if self.rollout['not_reached'] else ""))
        for host, reason in sorted(self.check_stopped.items()):
            lines.append(f"{host}: check mode stopped previewing: {reason} (a real run does it first)")
        for host, units in sorted(self.orphaned.items()):
            lines.append(f"{host}: orphaned, left running: {', '.join(units)} (the inventory no longer lists their "
                         "models; `state: absent` or --prune removes them)")
        if self.artifacts_dir:
            lines.append(f"artifacts: {self.artifacts_dir}")
        return "\n".join(lines)


def components_table(components: dict[str, list[dict]]) -> list[str]:
    """Doctor's comparison as a table: per host, each component with expected, installed and verdict."""
    rows = [(host, r.get("component", ""), r.get("kind", ""),
             "any" if r.get("expected") is None else str(r.get("expected")),
             "-" if r.get("installed") in (None, "") else str(r.get("installed")),
             "ok" if r.get("ok") else "DIFFERS", str(r.get("detail") or ""))
            for host, host_rows in sorted(components.items()) for r in host_rows]
    if not rows:
        return []
    head = ("HOST", "COMPONENT", "KIND", "EXPECTED", "INSTALLED", "VERDICT")
    widths = [min(max(len(row[i]) for row in rows + [head]), 44) for i in range(len(head))]

    def line(cells):
        return "  ".join(str(c)[:w].ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()

    out = [line(head)]
    out += [line(row[:-1]) + (f"  ({row[-1][:80]})" if row[5] != "ok" and row[-1] else "") for row in rows]
    return out


# ------------------------------------------------------------------ secrets

def _secret_values(secrets: dict | None) -> list[str]:
    """Every value inside `secrets` (all of them are secret), longest first."""
    return secrets_mod.secret_values(secrets or {}, role_specs.secret_declarations(), secret=True)


def _environment_secrets() -> list[str]:
    """Values of environment variables named like secrets (the one rule: vllm_fleet.secrets.SECRET_NAME)."""
    return [v for k, v in os.environ.items()
            if secrets_mod.SECRET_NAME.search(k) and len(v.strip()) >= secrets_mod.MIN_MASKED_LENGTH]


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """`value` with every printed form of a secret masked (vllm_fleet.secrets.scrub)."""
    return secrets_mod.scrub(value, secrets)


def scrub_tree(root: Path, secrets: Iterable[str]) -> None:
    """Mask secrets, in every printed form, in every file under root (defence in depth behind
    no_log and event scrubbing)."""
    secrets = list(secrets)
    if not secrets:
        return
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        cleaned = secrets_mod.scrub_bytes(data, secrets)
        if cleaned != data:
            path.write_bytes(cleaned)


# ------------------------------------------------------------------ events -> result

#: The facts in which roles/blocks/vllm_service and roles/blocks/ray_cluster say which units they left running.
ORPHANED_FACTS = ("vllm_service_orphaned_units", "ray_cluster_orphaned_units")


class _Collector:
    """Turns ansible-runner events into a RunResult as they arrive."""

    def __init__(self, secrets: list[str], handler: EventHandler | None):
        self.secrets = secrets
        self.handler = handler
        self.failures: list[TaskFailure] = []
        self.stats: dict[str, dict] = {}
        #: Per host, the ok tasks its events showed: the recap's stand-in when Ansible stopped before
        #: its recap (a refused inventory stops the run at the verdict play's `hosts:`).
        self.seen: dict[str, int] = {}
        self.problems: list[str] = []
        self.task_durations: dict[str, float] = {}
        self.check_stopped: dict[str, str] = {}
        self.orphaned: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self.components: dict[str, list[dict]] = {}
        self.releases: dict[str, dict] = {}
        self.rollout_reached: list[str] = []
        #: Events of tasks on hosts (runner_on_*): none when Ansible stopped before its first task.
        self.task_events = 0

    def __call__(self, event: dict) -> bool:
        scrub(event, self.secrets)
        self.consume(event)
        if self.handler is not None:
            self.handler(event)
        return True  # keep the (scrubbed) event in the artifacts

    def consume(self, event: dict) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        self.task_events += kind.startswith("runner_on_")
        if kind.startswith("runner_on_") and data.get("host"):
            self.seen[str(data["host"])] = self.seen.get(str(data["host"]), 0) + (kind == "runner_on_ok")
        if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            res = data.get("res") or {}
            message = str(res.get("msg") or res.get("stderr") or res.get("reason") or "").strip()
            role = data.get("role")
            task = data.get("task") or ""
            self.failures.append(TaskFailure(host=data.get("host", "?"), task=task, role=role, message=message,
                                             unreachable=kind == "runner_on_unreachable"))
            if role == VALIDATION_ROLE and "The inventory is invalid" in message:
                self.problems = [line.strip()[2:] for line in message.splitlines()[1:] if line.strip().startswith("- ")]
        elif kind == "runner_on_ok" or kind == "runner_on_failed":
            facts = (data.get("res") or {}).get("ansible_facts") or {}
            if kind == "runner_on_ok" and "fleet_check_mode_stopped" in facts:
                self.check_stopped[data.get("host", "?")] = str(facts["fleet_check_mode_stopped"])
            report = facts.get("_validate_inventory_report")
            if kind == "runner_on_ok" and isinstance(report, dict) and isinstance(report.get("warnings"), list):
                self.warnings = [str(w) for w in report["warnings"]]
            # The verdict: the run stops at the next play's `hosts:` (playbooks/validate.yml), which
            # is no task event; the problems are the report's.
            if kind == "runner_on_ok" and isinstance(report, dict) and report.get("problems"):
                self.problems = [str(p) for p in report["problems"]]
            for name in ORPHANED_FACTS:
                if kind == "runner_on_ok" and isinstance(facts.get(name), list):
                    host = data.get("host", "?")
                    self.orphaned[host] = sorted(set(self.orphaned.get(host, [])) | set(map(str, facts[name])))
            if kind == "runner_on_ok" and isinstance(facts.get("doctor_report"), list):
                self.components[data.get("host", "?")] = facts["doctor_report"]
            if (kind == "runner_on_ok" and "fleet_rollout_turn" in facts
                    and data.get("host") not in self.rollout_reached):
                self.rollout_reached.append(data.get("host", "?"))
            if kind == "runner_on_ok" and isinstance(facts.get("fleet_release_state"), dict):
                self._release(data.get("host", "?"), facts["fleet_release_state"])
            duration = data.get("duration")
            if isinstance(duration, (int, float)):
                key = f"{data.get('role') + ' : ' if data.get('role') else ''}{data.get('task', '')}"
                self.task_durations[key] = self.task_durations.get(key, 0.0) + duration
        elif kind == "playbook_on_stats":
            for name, key in (("ok", "ok"), ("changed", "changed"), ("failed", "failures"), ("unreachable", "dark"),
                              ("skipped", "skipped"), ("rescued", "rescued"), ("ignored", "ignored")):
                for host, count in (data.get(key) or {}).items():
                    self.stats.setdefault(host, {})[name] = count
            for host in data.get("processed") or {}:
                self.stats.setdefault(host, {})

    def _release(self, host: str, state: dict) -> None:
        """The first read of a host's releases says where it was; the last one where it is."""
        before = self.releases.get(host, {}).get("from", state.get("switched_from", state.get("current", "")))
        self.releases[host] = {"from": before or "", "to": state.get("current", ""),
                               "installed": list(state.get("installed") or [])}

    def hosts(self) -> dict[str, HostResult]:
        if not self.stats:
            return {h: HostResult(host=h, ok=ok) for h, ok in self.seen.items()}
        return {h: HostResult(host=h, **counts) for h, counts in self.stats.items()}

    def final_failures(self) -> list[TaskFailure]:
        """The failures that stopped a host. Failed tasks a block rescued (a mirror that
        did not answer before the next one did) leave no trace in the recap, so per host
        only the last `failed + unreachable` failures of the recap's count are kept."""
        if not self.stats:
            return list(self.failures)
        kept: list[TaskFailure] = []
        for host in sorted({f.host for f in self.failures}):
            counts = self.stats.get(host, {})
            n = counts.get("failed", 0) + counts.get("unreachable", 0)
            if n:
                kept += [f for f in self.failures if f.host == host][-n:]
        return kept


def result_from_events(events: Iterable[dict], *, playbook: str = "", inventory: str = "", limit: str | None = None,
                       check: bool = False, status: str = "", rc: int = 0, artifacts_dir: str = "") -> RunResult:
    """Build a RunResult from recorded ansible-runner events (job_events/*.json)."""
    collector = _Collector([], None)
    for event in events:
        collector.consume(event)
    return RunResult(playbook=playbook, inventory=inventory, limit=limit, check=check, status=status, rc=rc,
                     hosts=collector.hosts(), failures=collector.final_failures(), problems=collector.problems,
                     artifacts_dir=artifacts_dir, task_durations=collector.task_durations,
                     check_stopped=collector.check_stopped, orphaned=collector.orphaned, warnings=collector.warnings,
                     components=collector.components, releases=collector.releases)


# ------------------------------------------------------------------ inventory files

# The checks of the inventory's files themselves live in vllm_fleet.validation.files (pure);
# what needs Ansible (the hosts a limit selects, decrypting a vault) is here.
_InventoryLoader = _inventory_files.InventoryLoader
inventory_files = _inventory_files.inventory_files
EXTRA_VARS_ONLY = _inventory_files.EXTRA_VARS_ONLY


def inventory_syntax_problems(inventory: str | os.PathLike) -> list[str]:
    """Problems of the inventory's files, each with file (and line): YAML syntax errors, keys given
    twice in one mapping, vars files that are no mapping, inventory files of a shape Ansible
    would skip, and variables that only work on the command line (EXTRA_VARS_ONLY); [] when
    there are none.

    Checked here, before ansible-runner starts, because Ansible reports a broken
    group_vars file as a failed run (exit 2), or forgives it with a warning, and not as an
    invalid inventory. Vault-encrypted files are skipped (inventory_run_problems opens them).
    """
    return _inventory_files.file_problems(inventory)


#: The groups whose hosts a playbook's plays run on (every one imports validate.yml first).
_PLAYBOOK_GROUPS = {"site.yml": "fleet:router:monitoring:mirror"}


def _vault_decrypt(secrets: list, unusable: list[str]) -> Callable[[str], str]:
    """decrypt(ciphertext) -> text for inventory_files.vault_problems (VaultError when it cannot)."""
    from ansible.errors import AnsibleError  # noqa: PLC0415 - Ansible loads slowly: only when needed
    from ansible.parsing.vault import VaultLib  # noqa: PLC0415

    vault = VaultLib(secrets)

    def decrypt(cipher: str) -> str:
        if not secrets:
            raise _inventory_files.VaultError("; ".join(unusable), no_password=not unusable)
        try:
            return vault.decrypt(cipher.strip()).decode("utf-8")
        except (AnsibleError, UnicodeDecodeError, ValueError) as exc:
            raise _inventory_files.VaultError(" ".join(str(exc).split())) from None

    return decrypt


def inventory_run_problems(inventory: str | os.PathLike, limit: str | None = None,
                           playbook: str = "site.yml") -> list[str]:
    """What would make a run of `playbook` on the inventory fail or touch nothing, found with
    Ansible's own code before the run: a vault file or value the given passwords cannot open,
    and no host of the inventory in the run (Ansible skips a play whose hosts match nothing
    and calls the run successful); [] when there is none."""
    pattern = _PLAYBOOK_GROUPS.get(playbook, "fleet")
    vaults = _inventory_files.vault_payloads(inventory)
    if not vaults and _inventory_files.surely_has_hosts(_inventory_files.yaml_groups(inventory), pattern, limit):
        return []  # the common case, without importing Ansible (~0.4 s of CPU)
    from ansible.errors import AnsibleError  # noqa: PLC0415 - Ansible loads slowly: only when needed

    if vaults:
        secrets, unusable = _inventory.vault_secrets()
        problems = _inventory_files.vault_problems(inventory, _vault_decrypt(secrets, unusable))
        if problems:
            return problems
    try:
        _loader, manager = _inventory.read(inventory)  # with the vault secrets: an encrypted hosts.yml
        in_inventory = len(manager.get_hosts("all"))
        # Only the groups the inventory has: Ansible warns about each missing one.
        present = ":".join(g for g in pattern.split(":") if g in manager.groups)
        in_groups = len(manager.get_hosts(present)) if present else 0
        if limit and in_groups:
            manager.subset(limit)
        in_run = len(manager.get_hosts(present)) if in_groups else 0
    except AnsibleError as exc:
        return [f"inventory {inventory}: Ansible cannot read it: {' '.join(str(exc).split())}"]
    if not in_run:
        return [_inventory_files.no_hosts_problem(str(inventory), pattern, limit, in_groups, in_inventory)]
    return []


# ------------------------------------------------------------------ running

def run_playbook(playbook: str, inventory: str | os.PathLike, *, limit: str | None = None,
                 extravars: dict | None = None, secrets: dict | None = None, check: bool = False,
                 event_handler: EventHandler | None = None, private_data_dir: str | os.PathLike | None = None,
                 verbosity: int = 0, quiet: bool = True, rollout: dict | None = None) -> RunResult:
    """Run one of the project's playbooks (path relative to the project) through ansible-runner.
    `rollout` ({serial, max_fail_percentage, nodes}): the run is a rollout of those nodes."""
    import ansible_runner  # noqa: PLC0415 - ansible-runner and Ansible only when a playbook runs

    inventory_path = Path(inventory)
    if not inventory_path.is_absolute():
        in_cwd = Path.cwd() / inventory_path
        inventory_path = in_cwd if in_cwd.exists() else PROJECT_DIR / inventory_path
    if not inventory_path.exists():
        raise FileNotFoundError(f"inventory {inventory} does not exist")
    syntax = inventory_syntax_problems(inventory_path) or inventory_run_problems(inventory_path, limit, playbook)
    if syntax:
        return RunResult(playbook=playbook, inventory=str(inventory), limit=limit, check=check, status="invalid",
                         rc=EXIT_INVALID_INVENTORY, problems=syntax, started=time.time())
    pdd = Path(private_data_dir) if private_data_dir else Path(tempfile.mkdtemp(prefix="vllm-fleet-run-"))
    pdd.mkdir(parents=True, exist_ok=True)
    secret_values = _secret_values(secrets)
    cmdline = ["--check"] if check else []
    secret_dir = None
    if secrets:
        # Outside the runner's directories, readable by us only, gone after the run.
        secret_dir = Path(tempfile.mkdtemp(prefix="vllm-fleet-secrets-"))
        secret_file = secret_dir / "secrets.json"
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(secrets, fh)
        cmdline += ["-e", f"@{secret_file}"]
    # ansible-runner records its environment in the artifacts ("command"): values of
    # variables named like secrets are masked there too.
    secret_values = sorted(set(secret_values) | set(_environment_secrets()), key=len, reverse=True)
    collector = _Collector(secret_values, event_handler)
    # The ansible-playbook next to this Python (the project's venv), activated or not.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    started = time.time()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(pdd),
            project_dir=str(PROJECT_DIR),
            playbook=playbook,
            inventory=str(inventory_path),
            limit=limit,
            extravars=extravars or {},
            cmdline=" ".join(cmdline) if cmdline else None,
            envvars={"ANSIBLE_CONFIG": str(PROJECT_DIR / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "PATH": path,
                     "ANSIBLE_DEPRECATION_WARNINGS": "0"},
            event_handler=collector,
            suppress_env_files=True,
            quiet=quiet,
            verbosity=verbosity,
        )
    finally:
        if secret_dir:
            shutil.rmtree(secret_dir, ignore_errors=True)
    artifacts = Path(runner.config.artifact_dir)
    scrub_tree(artifacts, secret_values)
    status, problems, failures = runner.status, collector.problems, collector.final_failures()
    if runner.status == "failed" and not collector.stats and not collector.task_events and not failures:
        # Ansible stopped before its first task (no recap): say why instead of an empty result.
        stdout = (artifacts / "stdout").read_text(errors="replace") if (artifacts / "stdout").is_file() else ""
        problems = problems or _inventory_files.startup_vault_problems(stdout)
        if problems:
            status = "invalid"
        else:
            errors = _inventory_files.startup_errors(stdout)
            failures = [TaskFailure(host="controller", task="(before the first task)",
                                    message="; ".join(errors) or f"ansible-playbook exited with {runner.rc}; "
                                                                 f"its output: {artifacts / 'stdout'}")]
    return RunResult(playbook=playbook, inventory=str(inventory), limit=limit, check=check, status=status,
                     rc=runner.rc, hosts=collector.hosts(), failures=failures, problems=problems,
                     started=started, duration=time.time() - started, artifacts_dir=str(artifacts),
                     task_durations=collector.task_durations, check_stopped=collector.check_stopped,
                     orphaned=collector.orphaned, warnings=collector.warnings,
                     components=collector.components, releases=collector.releases,
                     rollout=({**rollout, "reached": collector.rollout_reached,
                               "not_reached": [h for h in rollout["nodes"] if h not in collector.rollout_reached]}
                              if rollout is not None else None))


def provision(inventory, limit=None, extravars=None, check=False, full=False, prune=False, **kwargs) -> RunResult:
    """Provision the inventory's nodes with site.yml (all stages, or `limit`).

    A node still as its last converge left it, with the same inputs, skips its steps after one
    read of its state (playbooks/tasks/converge-node.yml); `full` sends every node through
    them (the extra var fleet_full). `prune` (fleet_prune) also removes the units of models the
    inventory no longer lists, which a run otherwise leaves running and reports (`result.orphaned`).
    """
    extravars = {**(extravars or {}), **({"fleet_full": True} if full else {}),
                 **({"fleet_prune": True} if prune else {})}
    return run_playbook("site.yml", inventory, limit=limit, extravars=extravars, check=check, **kwargs)


def doctor(inventory, limit=None, extravars=None, **kwargs) -> RunResult:
    """Compare each node's installed versions with the matrix (reads only)."""
    return run_playbook("playbooks/doctor.yml", inventory, limit=limit, extravars=extravars, **kwargs)


def rollback(inventory, limit=None, extravars=None, **kwargs) -> RunResult:
    """Return each node to its previous release (no download, no build), restart its units on it
    and pass their readiness gate; `result.releases` says per node from which release to which."""
    return run_playbook("playbooks/rollback.yml", inventory, limit=limit, extravars=extravars, **kwargs)


def rollout(inventory, limit=None, extravars=None, serial: int | str = 1, max_fail_percentage: int = 0,
            **kwargs) -> RunResult:
    """Apply the inventory's changes (site.yml) `serial` nodes at a time (a count or "N%"): each node
    drained from the routers in front of its models, converged, gated, readied again; a node that
    fails goes back to the release it came from, and once more than `max_fail_percentage` percent of
    a batch failed (Ansible's rule; a batch whose nodes all failed always stops) no later batch
    starts. `result.rollout` says which nodes were reached, `result.releases` on which release each is."""
    serial = str(serial).strip()
    # The rules validation applies to the extra vars on every route (validation.play_keywords).
    if _play_keywords.serial_problems(serial, "serial"):
        raise ValueError(f"serial {serial!r}: {_play_keywords.SERIAL_ACCEPTED}")
    if isinstance(max_fail_percentage, bool) or not isinstance(max_fail_percentage, int) \
            or _play_keywords.max_fail_percentage_problems(max_fail_percentage):
        raise ValueError(f"max_fail_percentage {max_fail_percentage!r}: a whole number from 0 to 100")
    nodes = fleet_nodes(inventory, limit)
    rollout_vars = {"fleet_rollout_serial": int(serial) if serial.isdigit() else serial,
                    "fleet_rollout_max_fail_percentage": max_fail_percentage}
    return run_playbook("site.yml", inventory, limit=limit, extravars={**(extravars or {}), **rollout_vars},
                        rollout={"serial": serial, "max_fail_percentage": max_fail_percentage, "nodes": nodes},
                        **kwargs)


@dataclass
class CanaryRollout:
    """A rollout whose first nodes were judged by seed 000's benchmark before the others
    (vllm_fleet.canary): the canaries' run, the verdict per model, and then either the other
    nodes' run or the canaries' rollback."""

    canaries: list[str]
    rest: list[str]
    canary_run: RunResult
    judgements: list = field(default_factory=list)
    rest_run: RunResult | None = None
    rollback_run: RunResult | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.canary_run.ok and not self.error and all(j.ok for j in self.judgements) \
            and (self.rest_run is None or self.rest_run.ok)

    @property
    def exit_code(self) -> int:
        for run in (self.canary_run, self.rest_run):
            if run is not None and not run.ok:
                return run.exit_code
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_dict(self) -> dict:
        return {"ok": self.ok, "exit_code": self.exit_code, "canaries": self.canaries, "rest": self.rest,
                "error": self.error,
                "judgements": [{"host": j.host, "model": j.model, "release": j.release, "figures": j.figures,
                                "baseline": j.baseline, "problems": j.problems} for j in self.judgements],
                "canary_run": self.canary_run.to_dict(),
                "rest_run": self.rest_run.to_dict() if self.rest_run else None,
                "rollback_run": self.rollback_run.to_dict() if self.rollback_run else None}

    def __str__(self) -> str:
        lines = [f"canaries {', '.join(self.canaries)}: converged" if self.canary_run.ok
                 else f"canaries {', '.join(self.canaries)}: the converge failed", *(j.line() for j in self.judgements)]
        if self.error:
            lines.append(self.error)
        if self.canary_run.ok:
            lines += self.canary_run.warning_lines()  # the canaries' run is shown only when it failed
        if not self.canary_run.ok:
            lines.append(str(self.canary_run))
        elif self.rollback_run is not None:
            lines.append("the canaries were rolled back to their previous release"
                         if self.rollback_run.ok else f"rolling the canaries back failed:\n{self.rollback_run}")
            lines.append(f"not reached: {', '.join(self.rest) or 'none'}")
        elif self.rest_run is not None:
            lines.append(f"the other nodes ({', '.join(self.rest)}):\n{self.rest_run}")
        return "\n".join(lines)


def canary_rollout(inventory, canary: int, limit=None, extravars=None, secrets=None, serial: int | str = 1,
                   max_fail_percentage: int = 0, history_dir: str | os.PathLike = _canary.HISTORY_DIR,
                   conversations: list[int] | None = None, max_tokens: int | None = 128, bench_timeout: float = 600.0,
                   accuracy_set: str | os.PathLike | None = None, accuracy_limit: int | None = None,
                   **kwargs) -> CanaryRollout:
    """rollout() of the first `canary` nodes of the run, then seed 000's benchmark on their chat
    models against the last figures accepted for each (vllm_fleet.canary): within the inventory's
    tolerances, the figures are recorded in `history_dir` and the other nodes are rolled out
    `serial` at a time; otherwise the canaries go back to their previous release (rollback())
    and no other node is touched. The verdict carries the figures. With `accuracy_set` (a local
    dataset directory of seed 001's evalscope accuracy run, at most `accuracy_limit` samples per
    subset), each canary model's accuracy is measured too and may lose at most the inventory's
    fleet_canary_accuracy_drop_points against the last accuracy accepted on that set."""
    accuracy_work = None
    if accuracy_set is not None:
        if problem := _bench.accuracy_set_problem(accuracy_set):
            raise ValueError(f"accuracy set {problem}")
        if _bench.evalscope_executable() is None:
            raise ValueError("an accuracy set needs evalscope: pip install 'vllm-fleet[evalscope]'")
        if accuracy_limit is not None and (isinstance(accuracy_limit, bool) or not isinstance(accuracy_limit, int)
                                           or accuracy_limit < 1):
            raise ValueError(f"accuracy limit {accuracy_limit!r}: a number of samples per subset, at least 1")
        accuracy_work = Path(history_dir).parent / "canary-accuracy" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    canaries, rest = _canary.split(fleet_nodes(inventory, limit), canary)
    # The canaries' own tolerances with what the targets are resolved from.
    hostvars = _bench.inventory_hostvars(str(inventory), ",".join(canaries),
                                         keys=_inventory.HOST_KEYS + tuple(_canary.TOLERANCES))
    limits = _canary.tolerances([hostvars[h] for h in canaries if h in hostvars])
    run = rollout(inventory, limit=",".join(canaries), extravars=extravars, secrets=secrets, serial=len(canaries),
                  max_fail_percentage=0, **kwargs)
    outcome = CanaryRollout(canaries=canaries, rest=rest, canary_run=run)
    if not run.ok:
        return outcome
    try:
        targets = _bench.targets_from_hostvars(hostvars, extravars, secrets)
        figures = _bench.bench_targets(targets, conversations=conversations, max_tokens=max_tokens,
                                       timeout=bench_timeout, chart_file=False) if targets else None
    except _bench.BenchError as exc:
        targets, figures, outcome.error = [], None, f"the benchmark gate could not run: {exc}"
    if figures is None:
        # Nothing judged is nothing accepted: the canaries go back, no other node is touched.
        outcome.error = outcome.error or "no chat model on the canaries: the benchmark gate has nothing to judge"
        outcome.rollback_run = rollback(inventory, limit=",".join(canaries), extravars=extravars, secrets=secrets,
                                        **kwargs)
        return outcome
    for result in figures.results:
        release = (run.releases.get(result.host) or {}).get("to") or "-"
        accuracy = None
        if accuracy_work is not None:
            accuracy = _canary_accuracy(targets, result, accuracy_set, accuracy_limit, accuracy_work)
        outcome.judgements.append(_canary.judge(result, release, _canary.baseline(history_dir, result.served),
                                                limits, accuracy))
    if all(j.ok for j in outcome.judgements):
        for judgement in outcome.judgements:
            _canary.record(history_dir, judgement, figures.conversations, max_tokens)
        if rest:
            outcome.rest_run = rollout(inventory, limit=",".join(rest), extravars=extravars, secrets=secrets,
                                       serial=serial, max_fail_percentage=max_fail_percentage, **kwargs)
        return outcome
    outcome.rollback_run = rollback(inventory, limit=",".join(canaries), extravars=extravars, secrets=secrets,
                                    **kwargs)
    return outcome


def _canary_accuracy(targets, result, accuracy_set, limit, work_dir) -> _canary.Accuracy:
    """A canary model's accuracy on the set (seed 001's evalscope run), or why it has none."""
    name = f"{Path(accuracy_set).resolve()}" + (f" (at most {limit} per subset)" if limit else "")
    target = next((t for t in targets if t.host == result.host and t.served == result.served), None)
    if target is None or result.error:
        return _canary.Accuracy(set=name, error=result.error or "the model is not a benchmark target")
    try:
        percent = _bench.evalscope_accuracy(target, accuracy_set, work_dir=work_dir / f"{target.host}-{target.name}",
                                            limit=limit)
    except _bench.BenchError as exc:
        return _canary.Accuracy(set=name, error=str(exc))
    return _canary.Accuracy(set=name, percent=percent)


def fleet_nodes(inventory, limit: str | None = None) -> list[str]:
    """The inventory's fleet nodes a run with `limit` targets, in inventory order (Ansible's own
    inventory parser: the same hosts ansible-playbook would see)."""
    return _inventory.hosts(inventory, limit, "fleet")


def verify(inventory, limit=None, extravars=None, **kwargs) -> RunResult:
    """Check that every served model's unit is active and answers its smoke request (reads only)."""
    return run_playbook("playbooks/verify.yml", inventory, limit=limit, extravars=extravars, **kwargs)


@dataclass
class PlanResult:
    run: RunResult
    out_dir: str
    files: dict[str, list[str]]
    commands: dict[str, dict[str, str]]
    #: The plan's files of the whole fleet, beside the hosts' directories (model-distribution.yml: the
    #: waves of each hub model revision, where nodes fetch in waves).
    fleet_files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.run.ok

    def __str__(self) -> str:
        lines = [f"plan of {self.run.inventory} in {self.out_dir}"]
        for host in sorted(self.files):
            lines.append(f"{host}: {len(self.files[host])} file(s)")
            for unit, command in sorted(self.commands.get(host, {}).items()):
                lines.append(f"  {unit}: {command}")
        lines += [f"the fleet: {name}" for name in self.fleet_files]
        lines += [str(self.run)] if not self.run.ok else self.run.warning_lines()
        return "\n".join(lines)


def plan(inventory, out_dir, limit=None, extravars=None, secrets=None, **kwargs) -> PlanResult:
    """Write every host's files (units, environment files, launcher, Dockerfile) and command lines into
    `out_dir/<host>/...` without contacting any node."""
    out = _plan.prepare(out_dir)  # refused (ValueError) before Ansible starts, if not a plan's directory
    run = run_playbook("playbooks/plan.yml", inventory, limit=limit,
                       extravars={**(extravars or {}), "plan_dir": str(out)}, secrets=secrets, **kwargs)
    scrub_tree(out, _secret_values(secrets))
    files: dict[str, list[str]] = {}
    commands: dict[str, dict[str, str]] = {}
    # A refused or failed plan lists nothing: no file of it is the whole truth.
    for host_dir in sorted(p for p in out.iterdir() if p.is_dir() and run.ok):
        files[host_dir.name] = sorted(str(p.relative_to(host_dir)) for p in host_dir.rglob("*") if p.is_file())
        for cmd in sorted((host_dir / "commands").glob("*.sh")):
            commands.setdefault(host_dir.name, {})[cmd.stem] = cmd.read_text().strip().splitlines()[-1]
    fleet_files = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != _plan.MARKER and run.ok)
    return PlanResult(run=run, out_dir=str(out), files=files, commands=commands, fleet_files=fleet_files)


# ------------------------------------------------------------------ status (vllm_fleet/live_status.py)

def status(inventory, limit=None, **kwargs):
    """Every model on every node, read live: unit state, /health, requests, KV cache, tokens/s and
    device health, without an Ansible run (vllm_fleet.live_status.status; `.exit_code` 0/3/5)."""
    return live_status.status(inventory, limit=limit, **kwargs)


def bench(inventory, limit=None, extravars=None, secrets=None, **kwargs):
    """Seed 000's multi-turn chat test on every chat model of the selected hosts (no playbook
    run: the controller asks the models directly); see vllm_fleet.bench.bench for the options.
    Returns a vllm_fleet.bench.BenchResult (figures per model, files written)."""
    return _bench.bench(inventory, limit, extravars=extravars, secrets=secrets, **kwargs)


# ------------------------------------------------------------------ the fleet's mirror (vllm_fleet/mirror)

@dataclass
class MirrorResult:
    """A `mirror sync`: the validation run of the inventory it read, then (when valid) the sync's summary."""

    run: RunResult
    summary: _mirror_sync.Summary | None = None

    @property
    def exit_code(self) -> int:
        if not self.run.ok:
            return self.run.exit_code
        return EXIT_OK if self.summary is not None and self.summary.ok else EXIT_FAILED


def mirror_sync(inventory, out_dir, limit=None, extravars=None, check=False, log=print, apt_key="",
                **kwargs) -> MirrorResult:
    """Fill the mirror directory `out_dir` with everything the inventory's hosts (or `limit`) would fetch
    (vllm_fleet.mirror): the inventory is validated first, as a run would be (playbooks/validate.yml);
    `check` lists what would be fetched and its size, fetching nothing; `apt_key` names the GnuPG key
    (of GNUPGHOME) that signs its apt repository, else the mirror's own (created once in keys/)."""
    run = run_playbook("playbooks/validate.yml", inventory, limit=limit, extravars=extravars, **kwargs)
    if not run.ok:
        return MirrorResult(run)
    hosts = _inventory.host_vars(inventory, limit=limit, pattern="all", keys=_mirror_bom.KEYS,
                                 extra=extravars)
    return MirrorResult(run, _mirror_sync.sync(_mirror_bom.bill_of_materials(hosts), Path(out_dir), check=check,
                                               apt_key=apt_key, log=log))


def mirror_verify(path, log=print) -> list[str]:
    """Every problem of a mirror directory (or of a pack's volumes) against its manifest; [] when whole."""
    path = Path(path)
    if (path / _mirror_pack.PACK).is_file():
        return _mirror_pack.verify_pack(path, log=log)
    return _mirror_store.verify(path, log=log)


def mirror_pack(root, out, volume_bytes: int, log=print) -> list[str]:
    """Pack a whole mirror into checksummed volumes of at most `volume_bytes` (vllm_fleet.mirror.pack)."""
    return _mirror_pack.pack(Path(root), Path(out), volume_bytes, log=log)


def mirror_unpack(out, root, log=print) -> list[str]:
    """Check a pack's volumes, extract them into `root` and verify the mirror they hold."""
    return _mirror_pack.unpack(Path(out), Path(root), log=log)
