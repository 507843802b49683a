"""Ray only where a model spans nodes (issue 35, item 6): the example's NVIDIA and Ascend matrices
pin Ray for the span docs/operations/ray.md shows, but a node none of whose models spans nodes
installs none, in its venv or its image; doctor, the release's name and the mirror agree
(the contract's cluster.pins, vllm_fleet.release.node_pins)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.conftest import ROOT, ansible_playbook, example_hosts
from vllm_fleet import models, release, vendors
from vllm_fleet.mirror import bom

SPAN = {"name": "big", "kind": "chat", "path": "/home/models/big",
        "span": {"nodes": ["nvidia-01", "nvidia-02"], "head": "nvidia-01"},
        "serve": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}}
SPANNING = [v for v in vendors.VENDORS if vendors.contract(v).get("cluster")]


def test_the_example_pins_ray_for_spans_it_does_not_have():
    for host in ("nvidia-01", "ascend-01"):
        host_vars = example_hosts()[host]
        assert host_vars["fleet_matrix"]["ray"] == "2.49.2"
        assert not models.spans_node(host_vars["fleet_models"], host)


@pytest.mark.parametrize("vendor", SPANNING)
def test_ray_is_a_pin_of_a_spans_members_only(vendor):
    contract = vendors.contract(vendor)
    assert contract["cluster"]["pins"] == {"ray": "ray"} and "ray" not in contract["pins"]
    assert "ray" not in vendors.pins(vendor) and vendors.pins(vendor, spans=True)["ray"] == "ray"
    assert "ray" not in vendors.release_keys(vendor) and "ray" in vendors.release_keys(vendor, spans=True)
    # Every other pin is the same on both; a node joining a span is a new release (with Ray).
    assert {k: v for k, v in vendors.pins(vendor, spans=True).items() if k != "ray"} == vendors.pins(vendor)
    matrix = example_hosts()[f"{vendor}-01"]["fleet_matrix"]
    assert vendors.vendor_release_id(matrix, vendor) != vendors.vendor_release_id(matrix, vendor, spans=True)
    assert release.pin_specs(vendors.pins(vendor), matrix) == [
        s for s in release.pin_specs(vendors.pins(vendor, spans=True), matrix) if not s.startswith("ray==")]


def test_a_node_spans_when_a_served_model_names_it_among_its_nodes():
    assert models.spans_node([SPAN], "nvidia-02") and models.spans_node([SPAN], "nvidia-01")
    assert not models.spans_node([SPAN], "nvidia-03")
    assert not models.spans_node([{**SPAN, "enabled": False}], "nvidia-01")
    assert not models.spans_node([{**SPAN, "state": "absent"}], "nvidia-01")
    assert not models.spans_node([{k: v for k, v in SPAN.items() if k != "span"}], "nvidia-01")
    assert not models.spans_node(None, "nvidia-01")


def _mirrored_pins(hosts: dict, host: str) -> set[str]:
    bill = bom.bill_of_materials({host: {**hosts[host], "groups": {"fleet": [host]}}})
    return {spec for item in bill.of("pip") if f"{host}: " in " ".join(item.wanted_by) for spec in item.specs}


def test_the_mirror_holds_ray_for_a_spans_members_only():
    hosts = copy.deepcopy(example_hosts())
    assert not [s for s in _mirrored_pins(hosts, "nvidia-01") if s.startswith("ray==")]
    hosts["nvidia-01"]["fleet_models"] = [SPAN]
    assert "ray==2.49.2" in _mirrored_pins(hosts, "nvidia-01")


def _task_var(path: str, name: str) -> str:
    """A variable an install step of a vendor's task file passes on, as written there."""
    (value,) = [t["vars"][name] for t in yaml.safe_load((ROOT / path).read_text()) if name in t.get("vars", {})]
    return value


@pytest.mark.ansible
@pytest.mark.parametrize("spans", [False, True], ids=["no-span", "span"])
def test_the_install_step_doctor_the_release_and_the_image_take_ray_on_a_spans_members_only(tmp_path, spans):
    """The roles' own expressions, rendered by Ansible for the example's NVIDIA and Ascend nodes."""
    show = {
        "nvidia_install": _task_var("roles/vendors/nvidia/tasks/vllm_host.yml", "python_env_packages"),
        "ascend_install": _task_var("roles/vendors/ascend/tasks/vllm_host.yml", "vllm_source_repin"),
        "doctor": "{{ fleet_vendor.doctor.checks | map(attribute='packages') | list }}",
        "release": "{{ _fleet_release_keys }}",
        "image": "{{ lookup('ansible.builtin.template', '"
                 + str(ROOT / "roles/blocks/container_image/templates/ascend.Dockerfile.j2")
                 + "') if fleet_accelerator.vendor == 'ascend' else '' }}",
    }
    book = tmp_path / "show.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "nvidia-01,ascend-01", "gather_facts": False, "roles": ["stages/fleet"],
        "tasks": [{"ansible.builtin.copy": {"content": "{{ show | to_json }}",
                                            "dest": str(tmp_path) + "/{{ inventory_hostname }}.json"},
                   "vars": {"show": show}, "delegate_to": "localhost"}]}]))
    extra = []
    if spans:
        span = [{**SPAN, "span": {"nodes": ["nvidia-01", "ascend-01"], "head": "nvidia-01"}}]
        extra = ["-e", json.dumps({"fleet_models": span})]
    proc = ansible_playbook("-i", "inventories/example", str(book), "-c", "local", *extra,
                            env={"ANSIBLE_ROLES_PATH": str(ROOT / "roles")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    nvidia = json.loads((tmp_path / "nvidia-01.json").read_text())
    ascend = json.loads((tmp_path / "ascend-01.json").read_text())
    ray = ["ray==2.49.2"] if spans else []
    assert nvidia["nvidia_install"] == [
        "vllm==0.11.2", "torch==2.9.0", "transformers==4.57.1", "openai-harmony==0.0.8", *ray]
    assert ascend["ascend_install"] == [
        "torch==2.7.1", "torch-npu==2.7.1", "transformers==4.57.1", "openai-harmony==0.0.8", *ray]
    for node in (nvidia, ascend):
        (packages,) = node["doctor"]
        assert ("ray" in packages) == spans, packages
        assert ("ray" in node["release"]) == spans, node["release"]
    # The Ascend image installs the node's pins too; container mode has no spans (validation
    # refuses them there), so it never has Ray.
    (pip,) = [line for line in ascend["image"].splitlines() if line.startswith("RUN pip install torch==")]
    assert ("ray==" in pip) == spans, pip
