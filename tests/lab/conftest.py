"""A lab for the integration tests: its own name, ports and inventory, so it never
disturbs the lab a person uses (`vllm-fleet lab up` with the default name)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests import doc_commands
from tests.conftest import venv_tool
from vllm_fleet.project import role_dir

ROOT = Path(__file__).resolve().parents[2]
# VLLM_FLEET_LAB_PREFIX names the labs apart when two checkouts run the suite at once.
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "itest"
INVENTORY = ROOT / ".cache" / "itest" / "inventory"
#: How long a lab test waits for one command (a converge, a rollout) before calling it hung:
#: a guard, not a target. Five labs share CI's 2 cores, and a fresh converge there has taken
#: over 15 minutes when the machine was slow; the targets are measured by their own checks.
RUN_TIMEOUT = 1800


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.lab)
    # The order saves work; no test needs it to pass. Tests that need never-provisioned nodes
    # ask for them (fresh_nodes), which resets only nodes a test before them converged: in this
    # order none. test_check_mode goes first, test_drift (which converges every node) last but
    # one, test_status (which converges the nodes itself) after it, when its converge is a no-op.
    order = {"test_check_mode": 0, "test_drift": 2, "test_status": 3}
    items.sort(key=lambda item: order.get(item.module.__name__.rsplit(".", 1)[-1], 1))


@contextlib.contextmanager
def lab_session(name: str, inventory: Path, vendors: list[str], nodes: int = 1, routers: int = 0,
                mirror: bool = False, container_nodes=()):
    """A lab of its own for the tests of a session, package or module (every lab fixture is this):
    fresh nodes (tests expect nodes that were never provisioned), `nodes` per vendor, `routers`
    router nodes and, with `mirror`, the fleet's own mirror (mirror-01, filled by `vllm-fleet mirror
    sync`), `container_nodes` in container mode, its inventory at `inventory`; yields the lab API, and
    removes the lab after, unless VLLM_FLEET_KEEP_LAB=1 keeps it for a look at the nodes. Skips where
    the lab cannot run (not root)."""
    import vllm_fleet_lab as lab_api

    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    quiet = lambda m: None  # noqa: E731
    lab_api.down(name, log=quiet)
    lab_api.up(name, vendors=vendors, nodes_per_vendor=nodes, routers=routers, mirror=mirror,
                container_nodes=container_nodes, inventory_dir=inventory, log=quiet)
    try:
        yield lab_api
    finally:
        if not os.environ.get("VLLM_FLEET_KEEP_LAB"):
            lab_api.down(name, log=quiet)


def role_default(role: str, variable: str):
    """A role's default (roles/<layer>/<role>/defaults/main.yml), the one home of the node paths tests look at."""
    import yaml

    return yaml.safe_load((role_dir(role) / "defaults" / "main.yml").read_text())[variable]


#: Where a run writes on a node from its first steps on (vllm-fleet's directory, the download
#: cache, the models, Ascend's install path); a node without any of them was never provisioned.
DOWNLOADS = role_default("download", "download_cache_dir")
MODELS = role_default("fleet", "fleet_models_dir")
ASCEND_INSTALL = role_default("ascend", "ascend_install_path")
PROVISIONED = (role_default("fleet", "fleet_base_dir"), str(Path(DOWNLOADS).parent), MODELS, ASCEND_INSTALL)


def fresh_nodes(lab_api, nodes: list[str], name: str | None = None,
                leftovers: tuple[str, ...] = PROVISIONED) -> list[str]:
    """Make `nodes` never-provisioned for the test that calls this, as far as it looks
    (`leftovers`, shell patterns): those a test before it left any of them on get a fresh root
    (lab.reset); return their names."""
    name = name or LAB
    used = [node for node in nodes
            if lab_api.run(name, node, "ls -d " + " ".join(leftovers) + " 2>/dev/null || true").strip()]
    if used:
        lab_api.reset(name, used, log=lambda m: None)
    return used


@contextlib.contextmanager
def blocked_route(name: str, source: str, destination: str, port: int):
    """A fault between two lab nodes: TCP from `source` to `destination`:`port` is dropped, as a
    firewall between two hosts would. Lab nodes share the host's network namespace, each with an
    address of its own on loopback (fleet_cluster_address 127.0.0.N), so one nftables rule in the
    host's output hook, keyed on both addresses, cuts that route only; its table is removed after."""
    table = f"vllm-fleet-lab-{name}"
    rules = (f"table inet {table} {{\n  chain output {{\n    type filter hook output priority 0; policy accept;\n"
             f"    ip saddr {source} ip daddr {destination} tcp dport {port} drop\n  }}\n}}\n")
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], check=False, capture_output=True)


@pytest.fixture(scope="session")
def lab():
    # Two nodes per vendor: failures on one node must leave its neighbour untouched.
    with lab_session(LAB, INVENTORY, ["ascend", "nvidia"], nodes=2) as lab_api:
        yield lab_api


OVERRIDES = ROOT / ".cache" / "itest" / "overrides.yml"


def write_overrides(host_vars: dict[str, dict]) -> Path:
    """A second inventory source giving some hosts their own values (host vars beat group vars)."""
    import yaml

    OVERRIDES.parent.mkdir(parents=True, exist_ok=True)
    OVERRIDES.write_text(yaml.safe_dump({"all": {"hosts": host_vars}}, sort_keys=False))
    return OVERRIDES


def group_vars(group: str) -> dict:
    import yaml

    merged: dict = {}
    for path in sorted((INVENTORY / "group_vars" / group).glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def lab_env() -> dict:
    """The environment of an ansible-playbook or vllm-fleet run against a test lab: the
    project's ansible.cfg, plain output."""
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0"}


def run_playbook(*args: str, playbook: str = "site.yml", check: bool = False,
                 overrides: Path | None = None) -> subprocess.CompletedProcess:
    """ansible-playbook against the test lab, from the project root like a user would."""
    cmd = [venv_tool("ansible-playbook"), "-i", str(INVENTORY)]
    if overrides:
        cmd += ["-i", str(overrides)]
    cmd += [playbook, *args]
    proc = run_kept(cmd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                             f"{proc.stderr[-2000:]}")
    return proc


def run_doc_command(page: str, *contains: str, inventory: Path = INVENTORY,
                    lacks: tuple[str, ...] = (), mounts: dict[str, Path] | None = None,
                    lab: str | None = None, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """A page's command line run as written on the lab of `inventory` (tests/doc_commands.py), its output
    kept; with `mounts`, the page's machine paths are the test's directories (doc_commands.in_mounts);
    with `lab`, `vllm-fleet lab` without --name acts on that lab; `path`'s directories come after
    .venv/bin on the PATH (doc_commands.run_doc)."""
    proc = doc_commands.run_doc_command(page, *contains, inventory=inventory, lacks=lacks, timeout=RUN_TIMEOUT,
                                        mounts=mounts, lab=lab, path=path)
    keep_run_log(["bash", "-c", doc_commands.doc_command(page, *contains, lacks=lacks)], proc)
    return proc


def set_host_vars(host: str, inventory: Path = INVENTORY, **values) -> None:
    """Values of one host, in the lab inventory's own host_vars (which a page's command, run as written,
    and `vllm-fleet` read too), beside the lab's own (its ports); None removes a value."""
    import yaml

    path = inventory / "host_vars" / f"{host}.yml"
    merged = {**((yaml.safe_load(path.read_text()) if path.exists() else None) or {}), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({k: v for k, v in merged.items() if v is not None}, sort_keys=False))


@contextlib.contextmanager
def host_vars_set(host: str, inventory: Path = INVENTORY, **values):
    """set_host_vars for the length of a `with`: the file is as it was after."""
    path = inventory / "host_vars" / f"{host}.yml"
    before = path.read_text() if path.exists() else None
    set_host_vars(host, inventory, **values)
    try:
        yield path
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_text(before)


RUN_LOGS = ROOT / ".cache" / "test-logs" / "playbooks"


def run_kept(cmd: list[str], timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """A lab test's ansible-playbook or vllm-fleet, from the project root with the lab's
    environment, its whole output kept (keep_run_log)."""
    proc = subprocess.run(cmd, cwd=ROOT, env=lab_env(), capture_output=True, text=True, timeout=timeout)
    keep_run_log(cmd, proc)
    return proc


def keep_run_log(cmd: list[str], proc: subprocess.CompletedProcess) -> Path:
    """Every run's whole output, kept beside the lab jobs' logs: a test that passed slowly, or one
    whose assertion shows only a tail, can be read afterwards task by task (with profile_tasks'
    timings). Named after the test that ran it, numbered in order."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "no-test").split(" ")[0]
    path, _, name = test.partition("::")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{Path(path).stem}__{name}")[:150]
    RUN_LOGS.mkdir(parents=True, exist_ok=True)
    path = RUN_LOGS / f"{stem}-{len(list(RUN_LOGS.glob(stem + '-*.log'))) + 1}.log"
    path.write_text(f"$ {' '.join(cmd)}\nexit {proc.returncode}\n\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return path


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines -> {host: {ok, changed, unreachable, failed, ...}}."""
    out: dict[str, dict[str, int]] = {}
    in_recap = False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        if in_recap and ":" in line and "=" in line:
            host, _, rest = line.partition(":")
            out[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
        elif in_recap and not line.strip():
            in_recap = False
    return out


def slowest_tasks(stdout: str) -> dict[str, float]:
    """The TASKS RECAP of ansible.cfg's profile_tasks: {task: seconds} of a run's slowest tasks
    (task_output_limit of them); a task not listed took at most the least of these."""
    recap_text = stdout.rsplit("TASKS RECAP", 1)[-1] if "TASKS RECAP" in stdout else ""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S.*?) -{3,} ([\d.]+)s$", recap_text, re.M)}


def changed_tasks(stdout: str) -> dict[str, list[str]]:
    """Per host, the names of the tasks that reported `changed` (default callback output)."""
    out: dict[str, list[str]] = {}
    task = None
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):line.rindex("]")]
        elif line.startswith("changed: [") and task:
            host = line[len("changed: ["):].split("]")[0].split(" -> ")[0]
            out.setdefault(host, []).append(task)
    return out


def chat_completion(port: int, model: str, timeout: float = 30, key: str | None = None) -> dict:
    """One short chat completion from `model` at 127.0.0.1:`port` (a node's engine or a router),
    with `key` as its bearer token if given."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "who are you"}],
                       "max_tokens": 8}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        assert answer.status == 200
        return json.loads(answer.read())


def answer_text(answer: dict) -> str:
    """What the model said: gpt-oss reasons first (harmony's analysis channel), so a short
    answer may be reasoning only."""
    message = answer["choices"][0]["message"]
    text = message.get("content") or message.get("reasoning_content") or ""
    assert text, message
    return text
