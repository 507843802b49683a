"""A new vendor is the files docs/CONTRIBUTING-VENDOR.md lists, and nothing else (issue 22).

ACME, a made-up vendor, is added to a copy of the tree from `acme/` (the same paths as in
the tree): its role (contract, defaults, argument specs, matrix schema, stack), its facts
spec (one entry of VENDORS in module_utils/vllm_fleet_accel.py, the only edit of a
file that exists), its lab publisher, hardware profile and SMI simulator, its lab group
vars and its example group vars. No other file of the copy is touched. Then, with the
copy's own code:

1. `plan` on the example inventory with one ACME host: validation takes the vendor and its
   matrix schema from the role (a matrix without the driver is refused, naming the host and
   the variable, exit 4), and the host's unit and command line are written;
2. `lab up --vendors acme` builds the vendor's publisher and boots a node with its hardware;
   site.yml converges it (driver, gate, vLLM, model, unit) and `doctor` agrees with the matrix;
3. the model answers on the node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import venv_tool
from tests.lab.conftest import RUN_TIMEOUT, recap

ROOT = Path(__file__).resolve().parents[3]
VENDOR_FILES = Path(__file__).resolve().parent / "acme"
FACTS_ENTRY = VENDOR_FILES / "module_utils" / "vendors_entry.py.txt"
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "sixth"
HOST = "acme-01"


def copy_tree(dest: Path) -> None:
    """The project's files as a fresh clone has them (tracked, and new files not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if name.startswith("tests/lab/vendor/") or not src.is_file():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def add_vendor(tree: Path) -> list[str]:
    """Lay the vendor's files over the copy and add its facts spec; returns the paths it added."""
    added = []
    for src in sorted(p for p in VENDOR_FILES.rglob("*") if p.is_file() and p != FACTS_ENTRY):
        rel = src.relative_to(VENDOR_FILES)
        assert not (tree / rel).exists(), f"{rel} exists in the tree: a vendor adds files, it does not edit them"
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, tree / rel)
        added.append(str(rel))
    accel = tree / "module_utils" / "vllm_fleet_accel.py"
    text = accel.read_text()
    start = text.index("\nVENDORS = {\n")
    end = text.index("\n}\n", start)  # the table's closing brace
    accel.write_text(text[:end + 1] + FACTS_ENTRY.read_text() + text[end + 1:])
    return added


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tree = tmp_path_factory.mktemp("sixth-vendor") / "vllm-fleet"
    copy_tree(tree)
    added = add_vendor(tree)
    print(f"\nACME added as {len(added)} files and one VENDORS entry")
    # The example inventory with one host of the new vendor, as a user would add it.
    hosts = tree / "inventories" / "example" / "hosts.yml"
    doc = yaml.safe_load(hosts.read_text())
    doc["all"]["children"]["fleet"]["children"]["acme-nodes"] = {"hosts": {HOST: {"ansible_host": "192.0.2.61"}}}
    hosts.write_text(yaml.safe_dump(doc, sort_keys=False))
    return tree


def env(tree: Path) -> dict:
    """The copy's code first on the path, the product's and the lab's (lab/vllm_fleet_lab: the venv's
    vllm-fleet and vllm-fleet-lab are this checkout's, installed editable; `vllm-fleet lab` is found by
    the venv's entry point and imported from the path)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "lab")]),
            "ANSIBLE_CONFIG": str(tree / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DEPRECATION_WARNINGS": "0"}


def cli(tree: Path, *args: str, timeout: int = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_fleet.cli", *args], cwd=tree, env=env(tree),
                          capture_output=True, text=True, timeout=timeout)


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def test_the_copy_runs_its_own_code(tree):
    probe = subprocess.run([sys.executable, "-c", "import vllm_fleet, vllm_fleet_lab.cli; "
                            "from vllm_fleet import vendors; print(vllm_fleet.__file__); "
                            "print(vllm_fleet_lab.cli.__file__); print(','.join(vendors.VENDORS))"],
                           cwd=tree, env=env(tree), capture_output=True, text=True, check=True)
    where, lab_where, listed = probe.stdout.split()
    assert Path(where).is_relative_to(tree) and Path(lab_where).is_relative_to(tree)
    assert listed.split(",")[-1] == "acme"


def test_plan_validates_and_renders_the_new_vendor(tree, tmp_path):
    inventory = str(tree / "inventories" / "example")
    matrix = tree / "inventories" / "example" / "group_vars" / "acme-nodes" / "matrix.yml"
    good = matrix.read_text()
    broken = yaml.safe_load(good)
    del broken["fleet_matrix"]["acme_driver"]
    matrix.write_text(yaml.safe_dump(broken))
    try:
        refused = cli(tree, "plan", "-i", inventory, "-l", HOST, "-o", str(tmp_path / "refused"), "-q")
    finally:
        matrix.write_text(good)
    assert refused.returncode == 4, out(refused)
    assert HOST in refused.stdout and "fleet_matrix.acme_driver is missing" in refused.stdout, out(refused)

    plan = cli(tree, "plan", "-i", inventory, "-l", HOST, "-o", str(tmp_path / "plan"), "--json", "-q")
    assert plan.returncode == 0, out(plan)
    assert list(json.loads(plan.stdout)["files"]) == [HOST]
    node = tmp_path / "plan" / HOST
    # The contract reached the shared roles: the device nodes a unit may open, the device variable.
    unit = (node / "etc" / "systemd" / "system" / "vllm-qwen3-4b.service").read_text()
    assert "DeviceAllow=/dev/acme0 rw" in unit and "DeviceAllow=/dev/acmectl rw" in unit, unit
    assert "ACME_VISIBLE_DEVICES=0" in (node / "etc" / "vllm-fleet" / "vllm-qwen3-4b.env").read_text()


def test_a_lab_node_of_the_new_vendor_converges_and_serves(tree):
    inventory = tree / ".cache" / "sixth" / "inventory"
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    cli(tree, "lab", "down", "--name", LAB)
    start = time.monotonic()
    up = cli(tree, "lab", "up", "--name", LAB, "--vendors", "acme", "--inventory", str(inventory))
    try:
        assert up.returncode == 0, out(up)
        print(f"lab up (1 ACME node) {time.monotonic() - start:.1f} s")
        start = time.monotonic()
        converge = subprocess.run([venv_tool("ansible-playbook"), "-i", str(inventory), "site.yml"],
                                  cwd=tree, env=env(tree), capture_output=True, text=True, timeout=RUN_TIMEOUT)
        print(f"converge {time.monotonic() - start:.1f} s")
        assert converge.returncode == 0, out(converge)
        assert recap(converge.stdout)[HOST]["failed"] == 0
        doctor = cli(tree, "doctor", "-i", str(inventory), "-q")
        assert doctor.returncode == 0, out(doctor)
        assert "acme_driver" in doctor.stdout or "1.2.3" in doctor.stdout, out(doctor)

        host_vars = yaml.safe_load((inventory / "host_vars" / f"{HOST}.yml").read_text())
        port = host_vars["fleet_serve_base_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as answer:
            served = [m["id"] for m in json.load(answer)["data"]]
        assert served == ["qwen3-4b"]
    finally:
        if not os.environ.get("VLLM_FLEET_KEEP_LAB"):
            cli(tree, "lab", "down", "--name", LAB)
