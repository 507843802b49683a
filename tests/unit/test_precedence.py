"""Precedence surprises (issue 33, item 4): a value the inventory sets that never reaches a host,
or that nothing reads, is a warning naming both places; --strict refuses it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE, ansible_playbook
from vllm_fleet import validation


@pytest.fixture
def inventory(tmp_path) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE, inv)
    return inv


def _hosts(inv: Path, edit) -> None:
    doc = yaml.safe_load((inv / "hosts.yml").read_text())
    edit(doc["all"]["children"])
    (inv / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _write(inv: Path, rel: str, text: str) -> None:
    (inv / rel).parent.mkdir(parents=True, exist_ok=True)
    (inv / rel).write_text(text)


def test_the_example_has_no_surprise(inventory):
    assert validation.inventory_warnings([str(inventory)]) == []


def test_a_vars_directory_of_no_group(inventory):
    _write(inventory, "group_vars/nvidai-nodes/serve.yml", "fleet_serve_listen: 0.0.0.0\n")
    (warning,) = validation.inventory_warnings([str(inventory)])
    assert warning.startswith("group_vars/nvidai-nodes: names no group") and "'nvidia-nodes'" in warning


def test_two_files_of_one_directory(inventory):
    _write(inventory, "group_vars/nvidia-nodes/zz.yml", "fleet_serve_env: {A: '1'}\n")
    (warning,) = validation.inventory_warnings([str(inventory)])
    assert "group_vars/nvidia-nodes/serve.yml:" in warning and "group_vars/nvidia-nodes/zz.yml:1" in warning


def test_the_inventory_files_vars_lose_to_group_vars(inventory):
    _hosts(inventory, lambda c: c["fleet"]["children"]["nvidia-nodes"].update(vars={"fleet_serve_env": {"B": "2"}}))
    (warning,) = validation.inventory_warnings([str(inventory)])
    assert warning.startswith("fleet_serve_env of group nvidia-nodes is set in hosts.yml:")
    assert "group_vars/nvidia-nodes/serve.yml" in warning and "never reaches a host" in warning


def test_sibling_groups_decided_by_name(inventory):
    def edit(children):
        children["fleet"]["children"]["nvidia-nodes"]["vars"] = {"fleet_serve_base_port": 9200}
        children["fleet"]["children"]["a-gpus"] = {"hosts": {"nvidia-01": None},
                                                   "vars": {"fleet_serve_base_port": 9100}}
    _hosts(inventory, edit)
    warnings = validation.inventory_warnings([str(inventory)])
    assert any("set differently by groups a-gpus" in w and "nvidia-nodes's because its name sorts later" in w
               for w in warnings), warnings


def test_a_mapping_replaced_whole(inventory):
    _write(inventory, "group_vars/nvidia-nodes/hub.yml", "fleet_hub: {hf_endpoint: 'http://hf.internal'}\n")
    (warning,) = validation.inventory_warnings([str(inventory)])
    assert "fleet_hub of group nvidia-nodes" in warning and "modelscope_endpoint" in warning


def test_a_host_defined_twice(inventory):
    def edit(children):
        children["fleet"]["children"]["cpu-nodes"]["hosts"]["cpu-01"]["fleet_serve_base_port"] = 8000
        children["extra"] = {"hosts": {"cpu-01": {"fleet_serve_base_port": 8100}}}
    _hosts(inventory, edit)
    warnings = validation.inventory_warnings([str(inventory)])
    assert any(w.startswith("host cpu-01 is defined twice") for w in warnings), warnings


def test_a_name_one_letter_from_a_known_one(inventory):
    _write(inventory, "host_vars/nvidia-01.yml", "ansible_hostt: 192.0.2.99\nfleet_serve_listenn: x\nmy_key: y\n")
    warnings = validation.inventory_warnings([str(inventory)])
    # ansible_* are Ansible's; fleet_* unknown ones are refused by validation (roles.py), not warned about.
    assert warnings == []
    _write(inventory, "host_vars/nvidia-01.yml", "ansible_hosts: 192.0.2.99\nfleet_service_usr: vllm\n"
                                                 "fleet_serve_listn: y\nfleet_serve_api_keys: z\nsrve_listen: q\n")
    assert validation.inventory_warnings([str(inventory)]) == []  # nothing is close enough to be a typo of ours
    _write(inventory, "host_vars/nvidia-01.yml", "fleet_models_dirr: /x\nmonitoring_prometheus_prt: 1\n"
                                                 "heath_agent_port: 9100\n")
    warnings = validation.inventory_warnings([str(inventory)])
    assert any(w.startswith("heath_agent_port (host_vars/nvidia-01.yml:3) is read by nothing") and
               "'health_agent_port'" in w for w in warnings), warnings


def test_a_name_read_by_a_template_is_read(inventory):
    _write(inventory, "host_vars/nvidia-01.yml",
           'heath_agent_port: 9100\nhealth_agent_port: "{{ heath_agent_port }}"\n')
    assert validation.inventory_warnings([str(inventory)]) == []


def test_a_vendor_host_outside_the_play(inventory):
    _hosts(inventory, lambda c: c.update(spare={"hosts": {"ascend-09": {"ansible_host": "192.0.2.99",
                                                                        "fleet_accelerator": {"vendor": "ascend"}}}}))
    (warning,) = validation.inventory_warnings([str(inventory)])
    assert warning.startswith("host ascend-09 has a fleet_accelerator but is not in the group fleet")


@pytest.mark.ansible
def test_warned_on_both_entry_points_and_refused_with_strict(inventory):
    from vllm_fleet import api

    _write(inventory, "group_vars/nvidia-nodes/zz.yml", "fleet_serve_env: {A: '1'}\n")
    proc = ansible_playbook("-i", str(inventory), "playbooks/validate.yml")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "group_vars/nvidia-nodes/zz.yml:1; Ansible keeps" in proc.stdout
    result = api.run_playbook("playbooks/validate.yml", inventory)
    assert result.exit_code == 0 and any("zz.yml:1; Ansible keeps" in w for w in result.warnings)
    assert "warning: fleet_serve_env is set for group nvidia-nodes" in str(result)
    strict = api.run_playbook("playbooks/validate.yml", inventory, extravars={"validate_inventory_strict": True})
    assert strict.exit_code == 4 and any("zz.yml:1; Ansible keeps" in p for p in strict.problems)


# ------------------------------------------------------------------ the warnings say what Ansible does

def _ansible_value(inv: Path, host: str, var: str):
    """The value Ansible itself gives `host` (ansible-inventory, the same vars plugins as a play)."""
    import json
    import subprocess

    from tests.conftest import venv_tool

    proc = subprocess.run([venv_tool("ansible-inventory"), "-i", str(inv), "--host", host], capture_output=True,
                          text=True, check=True, timeout=120)
    return json.loads(proc.stdout).get(var)


@pytest.mark.ansible
def test_an_inventory_files_vars_lose_to_group_vars_all_whatever_the_depth(inventory):
    _hosts(inventory, lambda c: c["fleet"].update(vars={"fleet_serve_base_port": 9300}))
    warnings = validation.inventory_warnings([str(inventory)])
    assert any(w.startswith("fleet_serve_base_port of group fleet (hosts.yml:") and "never reaches host nvidia-01"
               and "group all sets it in group_vars/all/fleet.yml" in w for w in warnings), warnings
    assert _ansible_value(inventory, "nvidia-01", "fleet_serve_base_port") == 8000


@pytest.mark.ansible
@pytest.mark.parametrize("entry, read", [("group_vars/all.yaml", "group_vars/all"),
                                         ("group_vars/nvidia-nodes.yml", "group_vars/nvidia-nodes"),
                                         ("host_vars/nvidia-01.yaml", "host_vars/nvidia-01.yml")])
def test_a_vars_file_beside_another_of_its_name_is_never_read(inventory, entry, read):
    if read.endswith(".yml"):
        _write(inventory, read, "fleet_min_free_disk_gb: 30\n")
    _write(inventory, entry, "fleet_min_free_disk_gb: 40\n")
    warnings = validation.inventory_warnings([str(inventory)])
    assert any(w.startswith(f"{entry} is never read: Ansible reads {read} ") for w in warnings), warnings
    assert not any("keeps " + entry in w for w in warnings), warnings
    assert _ansible_value(inventory, "nvidia-01", "fleet_min_free_disk_gb") != 40
