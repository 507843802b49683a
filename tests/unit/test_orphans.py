"""Never destroy by omission (issue 33, item 5): a unit whose model the inventory no longer lists
keeps running and is reported (the run's summary, status) until the inventory says
`state: absent` or the run prunes. The roles' side runs on the real engine in
molecule/cpu/verify.yml (orphaned, then pruned)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vllm_fleet import api, live_status, state
from vllm_fleet.models import resolve_models
from vllm_fleet.project import role_dir

ROOT = Path(__file__).resolve().parents[2]
UNITS = "/etc/systemd/system"


@pytest.mark.parametrize("prune,removed,orphaned", [
    (False, ["vllm-disabled"], ["vllm-gone"]),
    (True, ["vllm-disabled", "vllm-gone"], []),
])
def test_what_becomes_of_the_units_no_model_serves(prune, removed, orphaned):
    installed = [f"{UNITS}/vllm-{n}.service" for n in ("served", "disabled", "gone")]
    out = state.leftover_units(installed, ["vllm-served"], ["vllm-served", "vllm-disabled"], prune)
    assert out == {"remove": removed, "orphaned": orphaned}


def test_state_absent_is_not_served_and_its_unit_goes():
    base = {"kind": "chat", "path": "/home/models/m", "source": {"type": "path"}}
    models, problems = resolve_models([{**base, "name": "kept"}, {**base, "name": "old", "state": "absent"}],
                                      {"vendor": "nvidia", "count": 1}, host="nvidia-01")
    assert problems == []
    assert {m["name"]: m["enabled"] for m in models} == {"kept": True, "old": False}
    served = [m["unit"] for m in models if m["enabled"]]
    listed = [m["unit"] for m in models]
    assert state.leftover_units([f"{UNITS}/vllm-old.service"], served, listed) == {"remove": ["vllm-old"],
                                                                                   "orphaned": []}


def test_the_roles_markers_are_the_ones_status_looks_for():
    for role in ("vllm_service", "ray_cluster"):
        marker = yaml.safe_load((role_dir(role) / "vars" / "main.yml").read_text())[f"_{role}_marker"]
        assert f"# {marker}".startswith(live_status.MANAGED), role


def test_status_reads_every_managed_unit_and_names_the_orphans():
    script = live_status.node_script([], "cpu")
    assert "systemctl show" not in script  # no unit of the inventory: no manager's properties either
    assert all(glob in script for glob in live_status.MANAGED_UNITS)
    node = live_status.parse_node_output("cpu-01", "cpu", "=== vllm-fleet-status installed\nvllm-kept active\n"
                                         "vllm-old active\nray-old failed\n")
    assert live_status.orphaned_units(node.installed, [{"name": "kept"}]) == {"ray-old": "failed",
                                                                            "vllm-old": "active"}


def test_a_run_reports_its_orphans():
    events = [{"event": "runner_on_ok", "event_data": {"host": "nvidia-01", "task": "t", "res": {
        "ansible_facts": {name: ["vllm-old"]}}}} for name in api.ORPHANED_FACTS]
    result = api.result_from_events(events, playbook="site.yml", inventory="inv", status="successful")
    assert result.orphaned == {"nvidia-01": ["vllm-old"]}
    assert "nvidia-01: orphaned, left running: vllm-old" in str(result)
    assert result.to_dict()["orphaned"] == {"nvidia-01": ["vllm-old"]}


def test_provision_prune_is_the_extra_var(monkeypatch):
    seen = {}
    monkeypatch.setattr(api, "run_playbook", lambda playbook, inventory, **kw: seen.update(kw))
    api.provision("inventories/example", prune=True)
    assert seen["extravars"] == {"fleet_prune": True}
    api.provision("inventories/example")
    assert seen["extravars"] == {}
