"""The fault battery's own lab: two Ascend nodes (the one vendor whose run has every
part a fault needs: .run installers through the download role, a git checkout with a
dead first mirror, a model fetch, a unit behind a readiness gate), booted once for the
session. Faults are injected only from here and from the lab's fixtures (the web
server's fault modes, mounts and signals on a node); no role knows it is in a lab.

The tests run in file order: the cheap faults on fresh nodes first (small playbooks,
seconds each), then the one full run that is interrupted (reboot, Ctrl-C) and re-run,
then the faults that need serving nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import venv_tool

from ..conftest import RUN_TIMEOUT, lab_session, run_kept

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "faults"
INVENTORY = ROOT / ".cache" / "faults" / "inventory"
HERE = Path(__file__).resolve().parent
ORDER = ["test_download", "test_interrupted", "test_service", "test_disk_full"]


def pytest_collection_modifyitems(items):
    def key(item):
        module = item.module.__name__.rsplit(".", 1)[-1]
        return ORDER.index(module) if module in ORDER else len(ORDER)
    items.sort(key=key)


@pytest.fixture(scope="session")
def lab():
    with lab_session(LAB, INVENTORY, ["ascend"], nodes=2) as lab_api:
        yield lab_api
        lab_api.set_faults(LAB, {})


@pytest.fixture()
def faults(lab):
    """Set the web server's faults for one test; none are left behind."""
    yield lambda mapping: lab.set_faults(LAB, mapping)
    lab.set_faults(LAB, {})


def playbook_cmd(*args: str, playbook: str = "site.yml") -> list[str]:
    path = playbook if playbook == "site.yml" else str(HERE / playbook)
    return [venv_tool("ansible-playbook"), "-i", str(INVENTORY), path, *args]


def run_playbook(*args: str, playbook: str = "site.yml", timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """ansible-playbook against the battery's lab (site.yml, or one of this folder's small playbooks)."""
    return run_kept(playbook_cmd(*args, playbook=playbook), timeout=timeout)


def artifact_path(lab, key: str) -> str:
    """The URL path the web server serves a matrix artifact of the Ascend group under."""
    url = lab.manifest(LAB)["artifacts"][key]["url"]
    return "/" + url.split("/", 3)[3]
