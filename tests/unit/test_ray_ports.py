"""What Ray opens on a span's members is in the port registry, and no pass-through option list
undoes a rule (issue 33, item 6)."""

from __future__ import annotations

import copy

import pytest

from tests import fuzz_inventory as fz
from vllm_fleet import cluster, validation


@pytest.fixture(scope="module")
def spanning() -> dict[str, dict]:
    """The example with a second NVIDIA node and gpt-oss-20b spanning both (tp 2 x pp 2)."""
    hosts = fz.load_inventory(fz.EXAMPLE)
    hosts["nvidia-02"] = {**copy.deepcopy(hosts["nvidia-01"]), "ansible_host": "192.0.2.42"}
    for host in ("nvidia-01", "nvidia-02"):
        model = hosts[host]["fleet_models"][0]
        model.pop("lora_adapters", None)
        model["serve"] = {k: v for k, v in model["serve"].items() if "lora" not in k}
        model["serve"].update(tensor_parallel_size=2, pipeline_parallel_size=2)
        model["span"] = {"nodes": ["nvidia-01", "nvidia-02"], "head": "nvidia-01"}
    assert validation.validate_inventory(hosts, sorted(hosts)) == []
    return hosts


def _with(hosts, host, **variables):
    out = copy.deepcopy(hosts)
    out[host].update(variables)
    return out


@pytest.mark.parametrize("host,port,what", [
    ("nvidia-01", 10050, "worker processes"), ("nvidia-02", 19999, "worker processes"),
    ("nvidia-01", 10001, "client server"), ("nvidia-02", 52365, "dashboard agent")])
def test_a_listener_on_a_port_ray_takes_is_refused(spanning, host, port, what):
    # The health agent listens on every node once the inventory has a router: the registry's
    # listener of a member whatever its name or address.
    hosts = _with(spanning, host, health_agent_port=port)
    hosts["router-01"] = {"group_names": ["router"], "ansible_host": "192.0.2.5", "router_models": []}
    problems = validation.validate_inventory(hosts, sorted(hosts))
    assert any(p.startswith(f"host {host}: health_agent_port = {port}: port {port} is where Ray's {what}")
               for p in problems), problems


def test_the_worker_ports_move_with_the_span_and_reach_ray_start(spanning):
    hosts = copy.deepcopy(spanning)
    for host in ("nvidia-01", "nvidia-02"):
        hosts[host]["fleet_models"][0]["span"]["worker_ports"] = [30000, 30063]
        hosts[host]["health_agent_port"] = 10050
    hosts["router-01"] = {"group_names": ["router"], "ansible_host": "192.0.2.5", "router_models": []}
    assert validation.validate_inventory(hosts, sorted(hosts)) == []
    model = {"name": "m", "devices": [0], "span": {"role": "worker", "port": 6379, "worker_ports": [30000, 30063]}}
    argv = cluster.ray_start_argv(model, "ray", address="a", head_address="h", resource=None, temp_dir="/t")
    assert "--min-worker-port=30000" in argv and "--max-worker-port=30063" in argv


def test_worker_ports_backwards_are_refused(spanning):
    hosts = copy.deepcopy(spanning)
    for host in ("nvidia-01", "nvidia-02"):
        hosts[host]["fleet_models"][0]["span"]["worker_ports"] = [20000, 19000]
    assert any("span.worker_ports" in p for p in validation.validate_inventory(hosts, sorted(hosts)))


@pytest.mark.parametrize("option", cluster.RAY_GOVERNED_OPTIONS)
def test_ray_start_options_cannot_reopen_what_vllm_fleet_sets(spanning, option):
    problems = validation.validate_inventory(_with(spanning, "nvidia-01",
                                                   ray_cluster_start_options=[f"{option}=x"]), ["nvidia-01"])
    assert any(p.startswith(f"host nvidia-01: ray_cluster_start_options = '{option}=x'") for p in problems), problems


def test_other_ray_start_options_pass(spanning):
    hosts = _with(spanning, "nvidia-01", ray_cluster_start_options=["--object-spilling-directory=/srv/spill"])
    assert validation.validate_inventory(hosts, sorted(hosts)) == []


@pytest.mark.parametrize("option", ["--privileged", "--network=host", "--net", "-p", "--publish=8000:8000",
                                    "--cap-add=SYS_ADMIN", "--pid=host", "--device=/dev/mem"])
def test_container_options_cannot_undo_the_privilege_and_network_rules(spanning, option):
    problems = validation.validate_inventory(_with(spanning, "nvidia-01", vllm_service_container={
        "options": ["--ipc=host", option]}), ["nvidia-01"])
    assert any(p.startswith(f"host nvidia-01: vllm_service_container.options = '{option}'") for p in problems)
    assert not any("'--ipc=host'" in p for p in problems)
