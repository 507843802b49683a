"""Shared pytest fixtures of vllm-fleet."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import os
import socket
import socketserver
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "inventories" / "example"
# What the example's replicas of one served name differ in (they are of different vendors: the
# weights each vendor runs, its dtype, its launch profile's context, the adapters a node has);
# a router entry over the example lets these differ (validation refuses the others).
EXAMPLE_DIFFERENCES = ["source", "dtype", "max_model_len", "lora_adapters"]


def fleet_groups(inventory: Path) -> dict[str, dict[str, dict]]:
    """Each vendor group under `fleet` in `inventory`'s hosts.yml -> its hosts -> their variables there."""
    doc = yaml.safe_load((inventory / "hosts.yml").read_text())
    return {group: {host: host_vars or {} for host, host_vars in (body.get("hosts") or {}).items()}
            for group, body in doc["all"]["children"]["fleet"]["children"].items()}


#: Each fleet host of the example inventory -> its vendor group, as its hosts.yml has them.
GROUP_OF = {host: group for group, hosts in fleet_groups(EXAMPLE).items() for host in hosts}


class OffLoopbackTrap(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that answers nothing but records who asked: set as a client's
    HTTP(S)_PROXY (with NO_PROXY=127.0.0.1), it receives every request meant for the internet."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.hits: list[str] = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(inner):
                self.hits.append(inner.rfile.readline(4096).decode(errors="replace").strip())
                inner.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        super().__init__(("127.0.0.1", 0), Handler)


def start_labweb(root: Path, log: Path, faults: Path | None = None) -> tuple[subprocess.Popen, str]:
    """The lab's web server (lab/fixtures/services/labweb.py) over `root` on a free 127.0.0.1 port,
    its log in `log`, once it accepts connections: (process, base URL). The caller terminates it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    labweb = Path(__file__).resolve().parents[1] / "lab" / "fixtures" / "services" / "labweb.py"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(labweb), "--root", str(root), "--port", str(port),
                                 *(["--faults", str(faults)] if faults else [])],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    wait_for_port(proc, port, log)
    return proc, f"http://127.0.0.1:{port}"


def wait_for_port(proc: subprocess.Popen, port: int, log: Path, timeout: float = 10) -> None:
    """Until `proc` accepts connections on 127.0.0.1:`port`; fails with its `log` if it exits or times out."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def load_module(path: Path, name: str | None = None, register: bool = False) -> ModuleType:
    """A Python file that is not on sys.path as a module: a library/ module, a filter plugin,
    a script without .py (scripts/bench-provision) or a lab fixture. `name` defaults to the
    file's stem; `register` puts it in sys.modules first (a module whose dataclasses resolve
    their annotations through it). No bytecode is written: a __pycache__ beside a lab fixture
    would end up in the tree the lab turns into a repository."""
    path = Path(path)
    name = name or path.stem.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    previous, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = previous
    return module


# A playbook that takes 50 s on an idle machine takes several minutes while CI's labs share
# its two cores; the limit only catches a run that hangs.
PLAYBOOK_TIMEOUT = 1200


def venv_tool(name: str) -> str:
    """A console script (ansible-playbook, vllm-fleet, ...) of the venv that runs the tests: ROOT/.venv
    under scripts/test, another controller's venv (its Python picks its ansible-core, docs/testing.md)
    when that venv's python runs pytest."""
    return str(Path(sys.executable).parent / name)


def ansible_playbook(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """ansible-playbook from the venv that runs the tests, run from the repository root with its
    ansible.cfg (as a user would), output captured; `env` adds to the environment."""
    full_env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **(env or {})}
    return subprocess.run([venv_tool("ansible-playbook"), *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT)


def ansible_module(name: str, args: dict, check: bool = False, diff: bool = False) -> dict:
    """One of the project's modules (library/) through the ansible CLI on localhost, as a role
    runs it; returns its result (the JSON after "localhost | CHANGED =>", "| SUCCESS =>" or
    "| FAILED! =>", whatever --diff prints after it left out)."""
    import json

    cmd = [venv_tool("ansible"), "localhost", "-c", "local", "-i", "localhost,",
           "-e", f"ansible_python_interpreter={sys.executable}", "-m", name, "-a", json.dumps(args)]
    proc = subprocess.run(cmd + (["--check"] if check else []) + (["--diff"] if diff else []), cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert " => " in proc.stdout, proc.stdout + proc.stderr
    return json.JSONDecoder().raw_decode(proc.stdout.split(" => ", 1)[1])[0]


def load_group_vars(inventory: Path, group: str) -> dict:
    merged: dict = {}
    for path in sorted((inventory / "group_vars" / group).glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def example_hosts() -> dict[str, dict]:
    """Variables of each example host as Ansible would merge them (all < fleet < vendor group < host)."""
    base = {**load_group_vars(EXAMPLE, "all"), **load_group_vars(EXAMPLE, "fleet")}
    return {host: {**base, **load_group_vars(EXAMPLE, group), **host_vars}
            for group, hosts in fleet_groups(EXAMPLE).items() for host, host_vars in hosts.items()}


@pytest.fixture
def example():
    """A fresh deep copy of the example inventory's host variables."""
    return copy.deepcopy(example_hosts())


def lab_host_vars(ctx: dict, node, group: str) -> dict:
    """One lab node's variables as `vllm-fleet lab up` writes them: the lab inventory's
    templates (group_vars of `all` and `group`, then the node's host_vars) rendered with `ctx`
    (vllm_fleet_lab.inventory.render_context)."""
    import jinja2

    lab_inventory = ROOT / "lab" / "inventory"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(lab_inventory)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    host_vars: dict = {}
    for name in ("all", group):
        for tpl in sorted((lab_inventory / "group_vars" / name).glob("*.j2")):
            host_vars.update(yaml.safe_load(env.get_template(f"group_vars/{name}/{tpl.name}").render(**ctx)) or {})
    host_vars.update(yaml.safe_load(env.get_template("host_vars/node.yml.j2").render(node=node, **ctx)))
    return host_vars


# ---------------------------------------------------------------- tests that run Ansible
# A test that starts Ansible (a CLI of it, molecule, or a playbook through ansible-runner, as
# vllm_fleet.api does) is marked `ansible`, so that `-m "not ansible"` is the pure unit tests,
# which take seconds and run in parallel (scripts/test). The mark is checked, not trusted: an
# unmarked test that starts Ansible fails, naming what it started.
_ANSIBLE_PROGRAMS = ("ansible", "molecule")
_started: dict[str, list[str]] = {}
_current: list[str] = []


def starts_ansible(fixture_function):
    """Under @pytest.fixture: the fixture starts Ansible, so every test that uses it is marked
    `ansible` (a module-scoped fixture runs in whichever test comes first)."""
    fixture_function.starts_ansible = True
    return fixture_function


def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for definitions in (info.name2fixturedefs.values() if info else []):
            if any(getattr(d.func, "starts_ansible", False) for d in definitions):
                item.add_marker(pytest.mark.ansible)
                break


def _program(args) -> str:
    first = args if isinstance(args, (str, bytes, os.PathLike)) else (list(args)[:1] or [""])[0]
    return os.path.basename(os.fsdecode(first).split()[0]) if os.fsdecode(first).strip() else ""


def _note_start(what: str) -> None:
    if _current:
        _started.setdefault(_current[-1], []).append(what)


_popen_init = subprocess.Popen.__init__


def _watching_popen_init(self, args, *rest, **kwargs):
    program = _program(args)
    if program.startswith(_ANSIBLE_PROGRAMS):
        _note_start(program)
    _popen_init(self, args, *rest, **kwargs)


def pytest_configure(config):
    subprocess.Popen.__init__ = _watching_popen_init
    try:
        import ansible_runner
    except ImportError:  # pragma: no cover - the venv has it
        return
    for name in ("run", "run_async"):
        original = getattr(ansible_runner, name)

        def watching(*args, _original=original, _name=name, **kwargs):
            _note_start(f"ansible_runner.{_name}")
            return _original(*args, **kwargs)
        setattr(ansible_runner, name, watching)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item.nodeid)
    try:
        yield
    finally:
        _current.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "teardown" or report.failed or item.get_closest_marker("ansible") \
            or item.get_closest_marker("lab"):
        return
    started = _started.pop(item.nodeid, [])
    if started:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started Ansible ({', '.join(sorted(set(started)))}) but is not marked "
                           "`ansible`: add `pytestmark = pytest.mark.ansible` to its module or "
                           "`@pytest.mark.ansible` to the test (scripts/test runs the unmarked tests apart)")
