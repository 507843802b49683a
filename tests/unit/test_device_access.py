"""Device access per model (issue 35, item 6): a host-mode unit may open the vendor's control
nodes and, of its per-device nodes, only those of its own model's devices, for every vendor whose
device nodes are numbered as its processes number the devices (vllm_fleet.render.unit_devices);
the Ray unit of a model that spans nodes gets the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE, ansible_playbook, example_hosts, starts_ansible
from vllm_fleet import render, vendors
from vllm_fleet.models import resolve_models

#: A model spanning two Ascend nodes on two NPUs of each (tp x pp = 2 x 2 = 2 NPUs x 2 nodes).
SPAN = {"name": "big", "kind": "chat", "path": "/home/models/big",
        "span": {"nodes": ["ascend-01", "ascend-02"], "head": "ascend-01"},
        "serve": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}}


def allowed(unit: Path) -> list[str]:
    return [line.split("=", 1)[1].removesuffix(" rw") for line in unit.read_text().splitlines()
            if line.startswith("DeviceAllow=")]


def test_index_stands_for_each_of_the_models_devices_and_node_index_for_the_nodes():
    model = {"devices": [1, 3]}
    assert render.unit_devices(model, ["/dev/mtgpu.{index}", "char-drm"], 8) == [
        "/dev/mtgpu.1", "/dev/mtgpu.3", "char-drm"]
    assert render.unit_devices(model, ["/dev/nvidia{node_index}", "/dev/nvidiactl"], 2) == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
    # A model without devices (CPU nodes, a disabled model) opens no per-device node.
    assert render.unit_devices({"devices": []}, ["/dev/acme{index}", "/dev/acmectl"], 4) == ["/dev/acmectl"]
    with pytest.raises(ValueError, match="names both"):
        render.unit_devices(model, ["/dev/x{index}-{node_index}"], 2)


@pytest.mark.parametrize("vendor", vendors.VENDORS)
def test_every_per_device_node_of_a_contract_names_which_devices_it_stands_for(vendor):
    """The class: a contract's per-device node is {index} (the model's) or {node_index} (the node's,
    said why in the contract); a literal numbered node would open one device to every model."""
    for entry in vendors.contract(vendor).get("unit_devices") or []:
        if entry.startswith("char-"):
            continue
        assert "{index}" in entry or "{node_index}" in entry or not any(c.isdigit() for c in entry), (vendor, entry)


@pytest.fixture(scope="module")
@starts_ansible
def span_plan(tmp_path_factory):
    """The example's plan, with a second Ascend node and a model spanning the two on two NPUs each."""
    tmp = tmp_path_factory.mktemp("devices")
    inventory = tmp / "inventory"
    shutil.copytree(EXAMPLE, inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["fleet"]["children"]["ascend-nodes"]["hosts"]["ascend-02"] = {
        "ansible_host": "192.0.2.12"}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inventory / "group_vars" / "ascend-nodes" / "models.yml").write_text(yaml.safe_dump({"fleet_models": [SPAN]}))
    out = tmp / "plan"
    proc = ansible_playbook("-i", str(inventory), "playbooks/plan.yml", "-e", f"plan_dir={out}",
                            "-l", "ascend-nodes,musa-nodes,nvidia-nodes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out


@pytest.mark.ansible
def test_a_moore_threads_unit_opens_its_models_gpus_only(span_plan):
    musa = example_hosts()["musa-01"]
    models, _ = resolve_models(musa["fleet_models"], musa["fleet_accelerator"], host="musa-01")
    served = [m for m in models if m["enabled"]]
    assert len(served) > 1 and all(len(m["devices"]) == 1 for m in served)
    for model in served:
        unit = span_plan / "musa-01/etc/systemd/system" / f"{model['unit']}.service"
        assert allowed(unit) == [f"/dev/mtgpu.{d}" for d in model["devices"]] + ["char-drm"], unit


@pytest.mark.ansible
def test_a_spanning_models_units_open_its_npus_only_on_every_member(span_plan):
    control = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    own = ["/dev/davinci0", "/dev/davinci1"] + control
    assert allowed(span_plan / "ascend-01/etc/systemd/system/vllm-big.service") == own
    for host in ("ascend-01", "ascend-02"):
        assert allowed(span_plan / host / "etc/systemd/system/ray-big.service") == own, host


@pytest.mark.ansible
def test_nvidia_units_open_every_gpu_of_the_node_as_the_contract_says_why(span_plan):
    # /dev/nvidiaN is the driver's minor number, not necessarily the GPU's CUDA index: a unit
    # file cannot pick the model's; CUDA_VISIBLE_DEVICES limits it (roles/vendors/nvidia/vars/main.yml).
    (unit,) = (span_plan / "nvidia-01/etc/systemd/system").glob("vllm-*.service")
    assert allowed(unit)[:2] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert vendors.contract("nvidia")["unit_devices"][0] == "/dev/nvidia{node_index}"
