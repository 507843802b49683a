"""Check mode on nodes that were never provisioned, and one vendor's nodes all failing
while the others go on. conftest runs this module first, while every node is fresh; run
later, its fixture resets the nodes that others converged."""

from __future__ import annotations

import copy

import pytest

import vllm_fleet

from .conftest import INVENTORY, LAB, fresh_nodes, group_vars, recap, run_playbook, write_overrides

NODES = ["ascend-01", "ascend-02", "nvidia-01", "nvidia-02"]


@pytest.fixture(scope="module")
def fresh(lab):
    """The lab with every node never provisioned (check mode changes nothing, so the module's
    second test finds them so too)."""
    fresh_nodes(lab, NODES)
    return lab


def test_check_mode_on_fresh_nodes_writes_nothing_and_says_where_it_stopped(fresh):
    result = vllm_fleet.provision(str(INVENTORY), check=True)
    assert result.exit_code == vllm_fleet.EXIT_OK, str(result)
    assert sorted(result.check_stopped) == NODES, str(result)
    assert "Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run (version 25.2.0) is not downloaded yet" \
        == result.check_stopped["ascend-01"]
    assert result.check_stopped["nvidia-02"].startswith("the apt sources of nvidia-driver-")
    for node in NODES:
        left = fresh.run(LAB, node, "ls -d /opt/vllm-fleet /var/cache/vllm-fleet /home/models 2>&1; id vllm 2>&1")
        assert left.count("No such file") == 3 and "no such user" in left, (node, left)


def test_one_vendor_failing_on_every_node_does_not_stop_the_others(fresh):
    """Every node runs in one play over the fleet (strategy free): Ansible ends a play only
    when all of its hosts have failed, so the NVIDIA nodes go on to their own stop."""
    matrix = copy.deepcopy(group_vars("ascend-nodes")["fleet_matrix"])
    driver = {k: v for k, v in matrix["npu_driver"].items() if k not in ("file", "url")}
    matrix["npu_driver"] = {**driver, "path": "/nonexistent/npu-driver.run"}
    overrides = write_overrides({"ascend-01": {"fleet_matrix": matrix}, "ascend-02": {"fleet_matrix": matrix}})
    proc = run_playbook("--check", overrides=overrides)
    counts = recap(proc.stdout)
    assert counts["ascend-01"]["failed"] == 1 and counts["ascend-02"]["failed"] == 1, proc.stdout[-3000:]
    assert "ascend-01: /nonexistent/npu-driver.run does not exist." in proc.stdout
    assert counts["nvidia-01"]["failed"] == 0 and counts["nvidia-02"]["failed"] == 0, proc.stdout[-3000:]
    # The NVIDIA nodes went on to the point where check mode stops previewing them.
    assert proc.stdout.count("check mode stops previewing here: the apt sources of nvidia-driver-") == 2, \
        proc.stdout[-3000:]
