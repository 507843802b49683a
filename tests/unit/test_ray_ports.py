"""What Ray opens on a span's members is in the port registry, and no pass-through option list
undoes a rule (issue 33, item 6)."""

from __future__ import annotations

import copy

import pytest

from tests import fuzz_inventory as fz
from vllm_fleet import cluster, validation
from vllm_fleet.validation import paths


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


# Every spelling a runtime's or Ray's parser takes for an option (issue 33, item 6): glued, grouped,
# `=`, the value as the next item, or (refused for itself) option and value in one item.
def _spellings(option: str, value: str) -> list[list[str]]:
    forms = [[f"{option}={value}"], [option, value]]
    if not option.startswith("--"):
        forms += [[f"{option}{value}"], [f"-d{option[1:]}", value]]
    return forms


def _container_problems(hosts, options):
    return validation.validate_inventory(_with(hosts, "nvidia-01", vllm_service_container={"options": options}),
                                         ["nvidia-01"])


@pytest.mark.parametrize("options", [f for option in ("-p", "--publish", "--network", "--net", "--pid", "--cgroupns")
                                     for f in _spellings(option, "8000:8000" if "p" in option[:3] else "host")]
                         + [["-dP"], ["-itp", "80:80"], ["--privileged=true"], ["--cap-add", "ALL"]])
def test_every_spelling_of_a_governed_run_option_is_refused(spanning, options):
    problems = _container_problems(spanning, ["--ipc=host", *options])
    assert any(p.startswith("host nvidia-01: vllm_service_container.options = ") for p in problems), problems


@pytest.mark.parametrize("source", sorted(paths.SYSTEM_DIRS) + ["/var/run/docker.sock", "/run/podman/podman.sock",
                                                                 "/run/containerd/containerd.sock", "/etc/"])
@pytest.mark.parametrize("form", ["-v {s}:/host", "-v{s}:/host", "--volume={s}:/host:ro", "--volume {s}:/host",
                                  "--mount type=bind,src={s},dst=/host", "--mount=type=bind,source={s},target=/host"])
def test_no_mount_brings_the_hosts_system_or_a_runtime_socket_into_the_container(spanning, source, form):
    text = form.format(s=source)
    option, _, value = text.partition(" ")
    problems = _container_problems(spanning, [option, value] if value else [option])
    assert any("of the host into the container" in p for p in problems), (text, problems)


@pytest.mark.parametrize("options", [["--security-opt", "seccomp=unconfined"], ["--security-opt=apparmor=unconfined"],
                                     ["--security-opt", "label=disable"], ["--security-opt=no-new-privileges=false"]])
def test_unconfined_security_options_are_refused(spanning, options):
    assert any("takes back a confinement" in p for p in _container_problems(spanning, options))


@pytest.mark.parametrize("options", [["-e", "VLLM_API_KEY=sk-clear-0123456789"], ["--env=HF_TOKEN=hf_clear0123456789"],
                                     ["-eHF_TOKEN=hf_clear0123456789"]])
def test_a_secret_in_a_run_option_is_refused_and_never_shown(spanning, options):
    problems = _container_problems(spanning, options)
    assert any("in clear on its command line" in p for p in problems), problems
    assert not any("clear0123456789" in p for p in problems), problems


@pytest.mark.parametrize("where", ["container", "ray"])
def test_an_option_and_its_value_in_one_item_is_refused(spanning, where):
    item = "--shm-size 16g" if where == "container" else "--object-spilling-directory /srv/spill"
    hosts = _with(spanning, "nvidia-01", **({"vllm_service_container": {"options": [item]}} if where == "container"
                                            else {"ray_cluster_start_options": [item]}))
    problems = validation.validate_inventory(hosts, ["nvidia-01"])
    assert any("holds an option and its value in one item" in p for p in problems), problems


def test_the_run_options_a_vendor_needs_pass(spanning):
    options = ["--ipc=host", "--shm-size=16g", "--ulimit", "memlock=-1", "-it", "--group-add", "video",
               "-v", "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro",
               "-v/etc/ascend_install.info:/etc/a.info", "--mount", "type=volume,src=cache,dst=/cache",
               "--security-opt=no-new-privileges", "-e", "HF_HUB_OFFLINE=1"]
    hosts = _with(spanning, "nvidia-01", vllm_service_container={"options": options})
    assert validation.validate_inventory(hosts, sorted(hosts)) == []
