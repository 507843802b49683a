"""The router's lab: two NVIDIA nodes serving the same model behind one HAProxy router node.

Shared by the router's tests (test_router.py) and the rolling changes' (test_router_rollout.py,
which run after them: they change the nodes' flags and release).

NVIDIA because its host mode is versioned (a release per matrix, roles/blocks/fleet_release), which a
rollout switches and rolls back, and its stack converges in about a minute with the engine
stand-in; the CPU node's real engine would take about 2 minutes and 2 GB per node and per
release and prove nothing more about routing. Each node serves one model (gpt-oss-20b, without
its LoRA adapters). Which node answered is read from each node's engine access log (its journal)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import urllib.error
from pathlib import Path

import pytest
import yaml

from tests.conftest import venv_tool
from tests.lab import conftest as lab_conftest
from tests.lab.conftest import answer_text, chat_completion, lab_session, recap, run_kept

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "router"
WORK = ROOT / ".cache" / "router-test"
INVENTORY = WORK / "inventory"
MODEL = "gpt-oss-20b"
UNIT = f"vllm-{MODEL}"
NODES = ("nvidia-01", "nvidia-02")
ROUTER = "router-01"
BASE = "/opt/vllm-fleet"


def playbook(*args: str, playbook: str = "site.yml") -> subprocess.CompletedProcess:
    cmd = [venv_tool("ansible-playbook"), "-i", str(INVENTORY), playbook, *args]
    return run_kept(cmd)


def vllm_fleet(*args: str) -> subprocess.CompletedProcess:
    return run_kept([venv_tool("vllm-fleet"), *args, "-i", str(INVENTORY), "-q"])


def set_host_vars(host: str, **values) -> None:
    """Values of one host in the router lab's inventory (tests.lab.conftest.set_host_vars)."""
    lab_conftest.set_host_vars(host, INVENTORY, **values)


def host_vars(host: str) -> dict:
    path = INVENTORY / "host_vars" / f"{host}.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def group_matrix() -> dict:
    return yaml.safe_load((INVENTORY / "group_vars/nvidia-nodes/matrix.yml").read_text())["fleet_matrix"]


@pytest.fixture(scope="package")
def routed():
    """The lab booted and converged; yields (lab API, router port). Timings go to the test's output."""
    from vllm_fleet_lab.paths import lab_paths

    start = time.monotonic()
    with lab_session(LAB, INVENTORY, ["nvidia"], nodes=2, routers=1) as lab_api:
        booted = time.monotonic()
        port = lab_paths(LAB).service_port(2, 0)  # router-01 is the third node (index 2)
        models = yaml.safe_load((INVENTORY / "group_vars/nvidia-nodes/models.yml").read_text())["fleet_models"]
        model = next(m for m in models if m["name"] == MODEL)
        model = {**model, "lora_adapters": [],
                 "serve": {k: v for k, v in model["serve"].items() if "lora" not in k}}
        for node in NODES:
            # A unit whose engine fails restarts after 2 s (not 10): the readiness gate gives up
            # on a bad release after its restarts in seconds.
            set_host_vars(node, fleet_models=[model], vllm_service_restart_sec=2)
        set_host_vars(ROUTER, router_models=[{"name": MODEL, "port": port}], router_check_interval="1s")
        proc = playbook()
        converged = time.monotonic()
        print(f"\nlab up {booted - start:.1f} s, site.yml {converged - booted:.1f} s")
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        assert set(recap(proc.stdout)) == {*NODES, ROUTER}
        yield lab_api, port


def chat(port: int, timeout: float = 30, key: str | None = None) -> dict:
    return chat_completion(port, MODEL, timeout, key)


def answered(lab_api) -> dict[str, int]:
    """Chat completions each node's engine has logged so far (not the routes vLLM's router asks
    besides, /v1/chat/completions/render and /tokenize)."""
    count = f"journalctl -u {UNIT} -o cat | grep -c '\"POST /v1/chat/completions HTTP' || true"
    return {node: int(lab_api.run(LAB, node, count).strip() or 0) for node in NODES}


def server_status(lab_api) -> dict[str, str]:
    """HAProxy's view of each server of the model's backend (UP, DOWN, DRAIN, ...). HAProxy writes
    a drained server with an agent check (every server: roles/blocks/health_agent) as "DRAIN (agent)":
    the state is the first word."""
    out = lab_api.run(LAB, ROUTER, 'echo "show stat" | socat stdio unix-connect:/run/haproxy/admin.sock')
    rows = [line.split(",") for line in out.splitlines() if line.startswith(f"model_{MODEL},")]
    return {row[1]: row[17].split(" (")[0] for row in rows if row[1] in NODES}


def wait_status(lab_api, node: str, status: str, timeout: float = 20) -> float:
    start = time.monotonic()
    while server_status(lab_api).get(node) != status:
        assert time.monotonic() - start < timeout, f"{node} not {status}: {server_status(lab_api)}"
        time.sleep(0.2)
    return time.monotonic() - start


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {node: after[node] - before[node] for node in NODES}


class Client(threading.Thread):
    """Chat completions through the router, one after another, until stopped; every failure kept."""

    def __init__(self, port: int, key: str | None = None):
        super().__init__(daemon=True)
        self.port, self.key = port, key
        self.sent = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.sent += 1
            try:
                assert answer_text(chat(self.port, timeout=60, key=self.key))
            except (OSError, AssertionError, urllib.error.HTTPError, ValueError) as exc:
                self.failures.append(f"request {self.sent}: {exc!r}")
            time.sleep(0.05)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join(timeout=90)


def on_node(lab_api, node: str, command: str) -> str:
    return lab_api.run(LAB, node, command, timeout=120).strip()


def engine_args(lab_api, node: str) -> list[str]:
    """The running engine's command line."""
    pid = on_node(lab_api, node, f"systemctl show -p MainPID --value {UNIT}")
    return on_node(lab_api, node, f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def current(lab_api, node: str) -> str:
    return on_node(lab_api, node, f"readlink {BASE}/current")
