"""Rolling changes (vllm-fleet rollout): what the API sends to site.yml, what it reports, and
which routers a node is drained on. The batches, drains and rescues themselves run in the lab
(tests/lab/router/test_router_rollout.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ansible_playbook, example_hosts
from tests.unit.test_router import _inventory
from vllm_fleet import api, cli, router

ROOT = Path(__file__).resolve().parents[2]


def test_a_node_is_drained_on_every_router_in_front_of_the_models_it_serves():
    fleet = example_hosts()
    routers = {"r2": [{"name": "gpt-oss-20b", "port": 9000}],
               "r1": [{"name": "gpt-oss-20b", "port": 9000}, {"name": "bge-m3", "port": 9001}]}
    assert [(r["router"], r["model"]) for r in router.routes("nvidia-01", routers, fleet)] == [
        ("r1", "gpt-oss-20b"), ("r2", "gpt-oss-20b")]
    # The router's own list goes with each route: its drain tasks resolve the server from it.
    assert router.routes("nvidia-01", routers, fleet)[0]["router_models"] == routers["r1"]
    assert [(r["router"], r["model"]) for r in router.routes("cpu-01", routers, fleet)] == [("r1", "bge-m3")]
    # A node no router names a model of: nothing to drain.
    assert router.routes("ascend-01", routers, fleet) == []
    assert router.routes("nvidia-01", {}, fleet) == []


@pytest.mark.ansible
def test_the_filter_finds_the_routes_from_the_inventory(tmp_path):
    inventory = _inventory(tmp_path)
    book = tmp_path / "play.yml"
    book.write_text("""
- hosts: nvidia-02
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "ROUTES {{ hostvars | fleet_router_routes(inventory_hostname) | map(attribute='router') | list }}
          {{ hostvars | fleet_router_routes(inventory_hostname) | map(attribute='model') | list }}"
""")
    proc = ansible_playbook("-i", str(inventory), str(book),
                            env={"ANSIBLE_FILTER_PLUGINS": str(ROOT / "filter_plugins")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "ROUTES ['router-01'] ['gpt-oss-20b']" in proc.stdout


def test_rollout_runs_site_yml_with_the_batch_size_and_failure_threshold(monkeypatch):
    calls = []
    monkeypatch.setattr(api, "run_playbook", lambda playbook, inventory, **kw: calls.append((playbook, kw)) or "r")
    assert api.rollout("inventories/example", limit="nvidia-nodes", serial="25%", max_fail_percentage=10,
                       extravars={"x": 1}) == "r"
    ((playbook, kwargs),) = calls
    assert playbook == "site.yml" and kwargs["limit"] == "nvidia-nodes"
    assert kwargs["extravars"] == {"x": 1, "fleet_rollout_serial": "25%", "fleet_rollout_max_fail_percentage": 10}
    assert kwargs["rollout"] == {"serial": "25%", "max_fail_percentage": 10, "nodes": ["nvidia-01"]}
    api.rollout("inventories/example", serial=2)
    assert calls[-1][1]["extravars"]["fleet_rollout_serial"] == 2
    assert calls[-1][1]["rollout"]["nodes"] == ["ascend-01", "metax-01", "musa-01", "nvidia-01", "cpu-01"]


@pytest.mark.parametrize("serial", [0, "0", "-1", "0%", "101%", "1.5", "all", ""])
def test_a_batch_size_that_is_no_count_or_percentage_is_refused(serial):
    with pytest.raises(ValueError, match="a number of nodes"):
        api.rollout("inventories/example", serial=serial)


@pytest.mark.parametrize("percentage", [-1, 101, 2.5, True, "10"])
def test_a_failure_threshold_outside_0_to_100_is_refused(percentage):
    with pytest.raises(ValueError, match="from 0 to 100"):
        api.rollout("inventories/example", max_fail_percentage=percentage)


def _events(turns: list[str], failed: dict[str, str]) -> list[dict]:
    events = [{"event": "runner_on_ok", "event_data": {"host": h, "task": "Note the node's turn",
                                                        "res": {"ansible_facts": {"fleet_rollout_turn": [h]}}}}
              for h in turns]
    events += [{"event": "runner_on_failed", "event_data": {"host": h, "task": "The node's turn failed",
                                                            "role": "services/fleet_rollout", "res": {"msg": m}}}
               for h, m in failed.items()]
    events.append({"event": "playbook_on_stats", "event_data": {
        "ok": {h: 5 for h in turns}, "failures": {h: 1 for h in failed}, "processed": {h: 1 for h in turns}}})
    return events


def test_the_summary_names_the_failed_node_and_the_untouched_ones():
    collector = api._Collector([], None)
    for event in _events(["n1"], {"n1": "n1: gate failed; back on release abc, serving"}):
        collector.consume(event)
    assert collector.rollout_reached == ["n1"]
    result = api.RunResult(playbook="site.yml", inventory="inv", limit=None, check=False, status="failed", rc=2,
                           hosts=collector.hosts(), failures=collector.final_failures(),
                           rollout={"serial": "1", "max_fail_percentage": 0, "nodes": ["n1", "n2", "n3"],
                                    "reached": ["n1"], "not_reached": ["n2", "n3"]})
    text = str(result)
    assert "n1: failed at 'The node's turn failed': n1: gate failed; back on release abc, serving" in text
    assert "rollout, 1 node(s) at a time: 1 of 3 node(s) reached; stopped before n2, n3 (untouched)" in text
    assert result.exit_code == api.EXIT_FAILED
    assert result.to_dict()["rollout"]["not_reached"] == ["n2", "n3"]


def test_the_cli_passes_serial_and_threshold(monkeypatch, capsys):
    seen = {}

    def fake(inventory, **kwargs):
        seen.update(kwargs)
        return api.RunResult(playbook="site.yml", inventory=str(inventory), limit=None, check=False,
                             status="successful", rc=0, rollout={"serial": kwargs["serial"], "nodes": [],
                                                                 "reached": ["a"], "not_reached": []})
    monkeypatch.setattr(api, "rollout", fake)
    assert cli.main(["rollout", "-i", "inventories/example", "--serial", "50%", "--max-fail-percentage", "20",
                     "-q", "--json"]) == 0
    assert seen["serial"] == "50%" and seen["max_fail_percentage"] == 20
    assert json.loads(capsys.readouterr().out)["rollout"]["reached"] == ["a"]

