"""Models that span nodes (fleet_models[].span): what validation refuses, before any host is
touched, and how each member resolves its share of the model."""

from __future__ import annotations

import copy

import pytest

from vllm_fleet.models import resolve_models
from vllm_fleet.validation import validate_hosts

SPAN_MODEL = {
    "name": "big-moe",
    "kind": "chat",
    "path": "/home/models/big-moe",
    "span": {"nodes": ["nvidia-01", "nvidia-02"], "head": "nvidia-01"},
    "serve": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
}


@pytest.fixture
def fleet(example):
    """Two NVIDIA nodes (2 GPUs each) of one group, with Ray pinned and a model spanning both."""
    first = example["nvidia-01"]
    first["fleet_matrix"]["ray"] = "2.49.2"
    first["fleet_models"] = [copy.deepcopy(SPAN_MODEL)]
    second = copy.deepcopy(first)
    second["ansible_host"] = "192.0.2.42"
    return {"nvidia-01": first, "nvidia-02": second}


def span_problems(hosts):
    return [p for p in validate_hosts(hosts) if "big-moe" in p]


def set_model(hosts, **changes):
    for host_vars in hosts.values():
        for model in host_vars["fleet_models"]:
            if model["name"] == "big-moe":
                for key, value in changes.items():
                    if value is None:
                        model.pop(key, None)
                    else:
                        model[key] = copy.deepcopy(value)


def test_a_correct_span_is_valid(fleet):
    assert validate_hosts(fleet) == []


def test_each_member_resolves_its_share(fleet):
    head, _ = resolve_models(fleet["nvidia-01"]["fleet_models"], fleet["nvidia-01"]["fleet_accelerator"],
                             host="nvidia-01")
    worker, _ = resolve_models(fleet["nvidia-02"]["fleet_models"], fleet["nvidia-02"]["fleet_accelerator"],
                               host="nvidia-02")
    (h,), (w,) = head, worker
    assert h["span"]["role"] == "head" and w["span"]["role"] == "worker"
    assert h["port"] == 8000 and h["url"] == "http://127.0.0.1:8000"
    assert w["port"] is None and w["url"] is None, "a worker serves no API: vllm serve runs on the head only"
    # tensor parallel inside a node: each member gives the model tp devices, not tp x pp.
    assert h["devices"] == w["devices"] == [0, 1]
    assert h["serve"]["distributed_executor_backend"] == "ray"
    assert h["span"]["port"] == 6379 and h["span"]["unit"] == "ray-big-moe"


def test_a_host_outside_the_span_does_not_get_the_model(fleet):
    models, problems = resolve_models(fleet["nvidia-01"]["fleet_models"], fleet["nvidia-01"]["fleet_accelerator"],
                                      host="nvidia-03")
    assert models == [] and problems == []


def test_pipeline_size_must_be_the_number_of_nodes(fleet):
    set_model(fleet, serve={"tensor_parallel_size": 2, "pipeline_parallel_size": 3})
    problems = span_problems(fleet)
    assert problems, "a pp that is not the number of nodes must be refused"
    assert all("spans 2 nodes but serve.pipeline_parallel_size is 3; set it to 2" in p for p in problems)
    assert {p.split(":")[0] for p in problems} == {"host nvidia-01", "host nvidia-02"}


def test_tensor_size_is_required(fleet):
    set_model(fleet, serve={"pipeline_parallel_size": 2})
    assert any("serve.tensor_parallel_size is None; set it to the devices the model takes on each node" in p
               for p in span_problems(fleet))


def test_tensor_size_beyond_a_nodes_devices(fleet):
    set_model(fleet, serve={"tensor_parallel_size": 4, "pipeline_parallel_size": 2})
    problems = span_problems(fleet)
    assert any("model big-moe: needs 4 devices (tensor_parallel_size on each node it spans) but "
               "fleet_accelerator.count is 2" in p for p in problems)


def test_explicit_devices_must_add_up(fleet):
    set_model(fleet, devices=[0], serve={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
    problems = span_problems(fleet)
    assert any("tp x pp = 2 x 2 = 4 devices, but devices gives 1 per node x 2 nodes = 2" in p for p in problems)


def test_data_parallel_is_refused(fleet):
    set_model(fleet, serve={"tensor_parallel_size": 1, "pipeline_parallel_size": 2, "data_parallel_size": 2})
    assert any("data_parallel_size 2; a spanning model is one replica" in p for p in span_problems(fleet))


def test_another_backend_is_refused(fleet):
    set_model(fleet, serve={"tensor_parallel_size": 2, "pipeline_parallel_size": 2,
                            "distributed_executor_backend": "mp"})
    assert any("distributed_executor_backend must be ray" in p for p in span_problems(fleet))


def test_head_must_be_a_member(fleet):
    set_model(fleet, span={"nodes": ["nvidia-01", "nvidia-02"], "head": "nvidia-09"})
    problems = span_problems(fleet)
    assert any("span.head = 'nvidia-09' is not one of its nodes ['nvidia-01', 'nvidia-02']; accepted: one of "
               "span.nodes" in p for p in problems)


def test_member_must_be_in_the_inventory(fleet):
    set_model(fleet, span={"nodes": ["nvidia-01", "nvidia-02", "nvidia-07"], "head": "nvidia-01"},
              serve={"tensor_parallel_size": 2, "pipeline_parallel_size": 3})
    problems = span_problems(fleet)
    assert "model big-moe: span.nodes names ['nvidia-07'], not host(s) of the fleet; accepted: inventory hosts of " \
           "one <vendor>-nodes group" in problems


def test_members_of_different_vendors_are_refused(fleet, example):
    ascend = example["ascend-01"]
    ascend["fleet_matrix"]["ray"] = "2.49.2"
    ascend["fleet_models"] = copy.deepcopy(fleet["nvidia-01"]["fleet_models"])
    fleet["nvidia-02"] = ascend
    problems = span_problems(fleet)
    assert "model big-moe: spans hosts of different vendors (nvidia-01: nvidia, nvidia-02: ascend); a span's nodes " \
           "must all be one vendor's (one <vendor>-nodes group)" in problems


def test_members_with_different_matrices_are_refused(fleet):
    fleet["nvidia-02"]["fleet_matrix"]["vllm"] = {"version": "0.11.0"}
    problems = span_problems(fleet)
    assert "model big-moe: the fleet_matrix of ['nvidia-02'] differs from nvidia-01's (in vllm); a span's nodes must " \
           "run one matrix: set it once in the vendor group" in problems


def test_ray_must_be_pinned(fleet):
    for host_vars in fleet.values():
        del host_vars["fleet_matrix"]["ray"]
    assert any("has no fleet_matrix.ray; pin Ray there" in p for p in span_problems(fleet))


def test_a_member_declaring_it_differently_is_refused(fleet):
    fleet["nvidia-02"]["fleet_models"][0]["span"]["port"] = 6380
    problems = span_problems(fleet)
    assert any("host nvidia-02 is in its span but its fleet_models declare it differently (as nvidia-01 does); "
               "declare a spanning model once, in the vendor group's fleet_models" in p for p in problems)


def test_a_member_not_declaring_it_is_refused(fleet):
    fleet["nvidia-02"]["fleet_models"] = []
    assert any("host nvidia-02 is in its span but its fleet_models do not declare it" in p
               for p in span_problems(fleet))


def test_a_device_another_model_holds_is_refused(fleet):
    other = {"name": "small", "kind": "chat", "path": "/home/models/small", "devices": [1],
             "serve": {"tensor_parallel_size": 1}}
    fleet["nvidia-02"]["fleet_models"].insert(0, other)
    set_model(fleet, devices=[0, 1])
    problems = validate_hosts(fleet)
    assert "host nvidia-02: model big-moe: device 1 is already given to model small; device sets of models on one " \
           "host must not overlap" in problems


def test_members_need_distinct_cluster_addresses(fleet):
    fleet["nvidia-02"]["ansible_host"] = fleet["nvidia-01"]["ansible_host"]
    fleet["nvidia-02"]["ansible_port"] = 2222
    problems = span_problems(fleet)
    assert any("hosts nvidia-01 and nvidia-02 both have the cluster address 192.0.2.41" in p
               and "give each member its own fleet_cluster_address" in p for p in problems)
    fleet["nvidia-02"]["fleet_cluster_address"] = "10.0.0.2"
    assert span_problems(fleet) == []


def test_container_mode_is_refused(fleet):
    for host_vars in fleet.values():
        host_vars["fleet_deploy_mode"] = "container"
    assert any("run in container mode; spanning models run in host mode only" in p for p in span_problems(fleet))


def test_a_vendor_without_a_cluster_contract_is_refused(example):
    first = example["metax-01"]
    first["fleet_models"] = [{**copy.deepcopy(SPAN_MODEL),
                              "span": {"nodes": ["metax-01", "metax-02"], "head": "metax-01"},
                              "serve": {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}}]
    second = copy.deepcopy(first)
    second["ansible_host"] = "192.0.2.22"
    problems = span_problems({"metax-01": first, "metax-02": second})
    assert any("vendor metax has no Ray cluster contract, so its models cannot span nodes; accepted vendors: "
               "ascend, nvidia" in p for p in problems)


def test_span_shape_is_checked_by_the_schema(fleet):
    set_model(fleet, span={"nodes": ["nvidia-01"], "head": "nvidia-01"})
    assert any("span.nodes" in p and "two or more distinct inventory host names" in p for p in validate_hosts(fleet))


def test_two_spans_on_one_ray_port_are_refused(fleet):
    second = {**copy.deepcopy(SPAN_MODEL), "name": "big-moe-2", "path": "/home/models/b2",
              "serve": {"tensor_parallel_size": 1, "pipeline_parallel_size": 2}}
    set_model(fleet, serve={"tensor_parallel_size": 1, "pipeline_parallel_size": 2})
    for host_vars in fleet.values():
        host_vars["fleet_models"].append(copy.deepcopy(second))
    problems = validate_hosts(fleet)
    assert any("model big-moe-2: its Ray port 6379 on host nvidia-01 is model big-moe's too" in p for p in problems)


def member(fleet, host):
    (model,), _ = resolve_models(fleet[host]["fleet_models"], fleet[host]["fleet_accelerator"], host=host)
    return model


def test_ray_start_of_head_and_worker(fleet):
    from vllm_fleet.cluster import ray_start_argv

    head = ray_start_argv(member(fleet, "nvidia-01"), "/v/bin/ray", address="10.0.0.1", head_address="10.0.0.1",
                          resource="GPU", temp_dir="/h/ray/6379")
    assert head == ["/v/bin/ray", "start", "--block", "--node-ip-address=10.0.0.1", "--disable-usage-stats",
                    "--temp-dir=/h/ray/6379", "--head", "--port=6379", "--include-dashboard=false",
                    # Ray's own worker ports, given explicitly: the port registry holds them.
                    "--min-worker-port=10002", "--max-worker-port=19999", "--num-gpus=2"]
    worker = ray_start_argv(member(fleet, "nvidia-02"), "/v/bin/ray", address="10.0.0.2", head_address="10.0.0.1",
                            resource="NPU", temp_dir="/h/ray/6379", num_cpus=2, object_store_bytes=80_000_000)
    assert "--address=10.0.0.1:6379" in worker and "--head" not in worker
    assert '--resources={"NPU":2}' in worker and "--num-cpus=2" in worker and "--object-store-memory=80000000" in worker


def test_member_environment_fills_the_vendor_contract(fleet):
    from vllm_fleet import vendors
    from vllm_fleet.cluster import member_env

    model = member(fleet, "nvidia-02")
    env = member_env(vendors.contract("ascend")["cluster"], "10.0.0.2", "enp189s0f0", "ASCEND_RT_VISIBLE_DEVICES",
                     model["devices"], "10.0.0.1", 6379)
    assert env["HCCL_INTRA_ROCE_ENABLE"] == "1" and env["HCCL_IF_IP"] == "10.0.0.2"
    assert env["GLOO_SOCKET_IFNAME"] == "enp189s0f0" and env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert env["RAY_ADDRESS"] == "10.0.0.1:6379"
    # Without an interface the libraries pick one: no variable names an empty one.
    env = member_env(vendors.contract("nvidia")["cluster"], "10.0.0.2", "", "CUDA_VISIBLE_DEVICES", [0, 1],
                     "10.0.0.1", 6379)
    assert "NCCL_SOCKET_IFNAME" not in env and env["VLLM_HOST_IP"] == "10.0.0.2"


def test_the_lab_serves_the_ray_its_versions_name():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    version = yaml.safe_load((root / "lab/inventory/versions.yml").read_text())["nvidia"]["ray"]
    pins = (root / "lab/fixtures/wheels/real-requirements.txt").read_text().split()
    assert f"ray=={version}" in pins


def test_a_router_sends_a_spanning_model_to_its_head_only(fleet, example):
    from vllm_fleet import router

    third = copy.deepcopy(fleet["nvidia-01"])  # a third node of the group, outside the span
    third["ansible_host"] = "192.0.2.43"
    (backend,) = router.backends([{"name": "big-moe", "port": 9000}], {**fleet, "nvidia-03": third})
    assert [(s["host"], s["port"]) for s in backend["servers"]] == [("nvidia-01", 8000)]


def test_monitoring_status_and_bench_see_a_spanning_model_on_its_head_only(fleet):
    """Every reader of what a node serves asks with the host's name: a worker runs no vllm serve,
    so Prometheus must not scrape it (an engine-down alert for ever) nor status call it down."""
    from vllm_fleet import monitoring, router

    assert [m["name"] for m in router.served_models(fleet["nvidia-01"], "nvidia-01")] == ["big-moe"]
    assert router.served_models(fleet["nvidia-02"], "nvidia-02") == []
    assert [t["node"] for t in monitoring.model_targets(fleet)] == ["nvidia-01"]
