"""Monitoring (roles/services/monitoring): targets from the inventory, validation of monitoring hosts,
the role's configuration and rules rendered by Ansible and checked (and unit-tested) with
promtool, and the device health collector run against recorded SMI outputs."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook, example_hosts, starts_ansible
from tests.simulated_node import Node
from vllm_fleet import monitoring
from vllm_fleet.validation import monitoring_problems

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "services" / "monitoring"
SMI = ROOT / "tests" / "unit" / "fixtures" / "smi"
KEY = "k" * 24
OWN_KEY = "m" * 24


def promtool() -> str:
    # Installed by scripts/setup (from Debian's prometheus package): missing is a failure, not a skip.
    path = shutil.which("promtool")
    assert path, "promtool is not installed: run scripts/setup"
    return path


def fleet() -> dict:
    """The example fleet, every node listening on all interfaces behind the group's key, and
    one model (nvidia-01's first) with a key of its own."""
    hosts = example_hosts()
    for host_vars in hosts.values():
        host_vars.update(fleet_serve_listen="0.0.0.0", fleet_serve_api_key=KEY, group_names=["fleet"])
    first = hosts["nvidia-01"]["fleet_models"][0]
    first["secret_env"] = {**(first.get("secret_env") or {}), "VLLM_API_KEY": OWN_KEY}
    return hosts


def monitor(**extra) -> dict:
    return {"group_names": ["monitoring"], "ansible_host": "192.0.2.6", **extra}


def test_every_model_of_every_node_is_a_target_where_the_router_would_reach_it():
    hosts = fleet()
    targets = monitoring.model_targets(hosts)
    from vllm_fleet.router import served_models

    expected = [(h, m["name"], m["port"]) for h in sorted(hosts) for m in served_models(hosts[h], h)]
    assert [(t["node"], t["model"], int(t["address"].rsplit(":", 1)[1])) for t in targets] == expected
    nvidia = [t for t in targets if t["node"] == "nvidia-01"]
    assert nvidia[0]["address"].startswith("192.0.2.41:") and nvidia[0]["vendor"] == "nvidia"
    assert nvidia[0]["unit"] == "vllm-" + nvidia[0]["model"]
    # Every model has a key here: each its own credentials file.
    assert len({t["credentials"] for t in targets}) == len(targets) and all(targets)


def test_keys_are_the_models_own_else_the_groups_and_none_without_one():
    hosts = fleet()
    keys = monitoring.api_keys(hosts)
    targets = {(t["node"], t["model"]): t for t in monitoring.model_targets(hosts)}
    first = hosts["nvidia-01"]["fleet_models"][0]["name"]
    assert keys[targets[("nvidia-01", first)]["credentials"]] == OWN_KEY
    assert {k for f, k in keys.items() if f != targets[("nvidia-01", first)]["credentials"]} == {KEY}
    # Loopback models without any key: no credentials at all.
    plain = example_hosts()
    assert monitoring.api_keys(plain) == {}
    assert all(t["credentials"] == "" for t in monitoring.model_targets(plain))


def test_node_exporters_at_the_hosts_port_else_the_roles_default():
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert monitoring.exporter_port({}) == defaults["monitoring_node_exporter_port"]
    hosts = fleet()
    hosts["cpu-01"]["monitoring_node_exporter_port"] = 9200
    nodes = {n["node"]: n["address"] for n in monitoring.node_targets(hosts)}
    assert nodes["cpu-01"] == "192.0.2.51:9200" and nodes["nvidia-01"] == "192.0.2.41:9100"


def test_a_valid_monitoring_host_has_no_problems():
    assert monitoring_problems({"mon-01": monitor()}, fleet()) == []


def test_a_model_on_another_machines_loopback_cannot_be_scraped():
    problems = monitoring_problems({"mon-01": monitor()}, example_hosts())
    assert problems and all("monitoring cannot scrape model" in p and "loopback" in p for p in problems)


def test_an_exporter_port_taken_by_a_model_is_refused():
    hosts = fleet()
    port = [t for t in monitoring.model_targets(hosts) if t["node"] == "cpu-01"][0]["address"].rsplit(":", 1)[1]
    hosts["cpu-01"]["monitoring_node_exporter_port"] = int(port)
    problems = monitoring_problems({"mon-01": monitor()}, hosts)
    assert [p for p in problems if p.startswith(f"host cpu-01: monitoring_node_exporter_port = {port}")], problems


def test_a_typo_and_a_wrong_type_of_a_monitoring_variable_are_named():
    problems = monitoring_problems({"mon-01": monitor(monitoring_scrape_intervall="5s",
                                                      monitoring_prometheus_port="ninety")}, fleet())
    assert any("did you mean 'monitoring_scrape_interval'?" in p for p in problems), problems
    assert any(p.startswith("host mon-01: monitoring_prometheus_port") for p in problems), problems


# ---------------------------------------------------------------- the role's templates, through Ansible

def _inventory(tmp_path: Path) -> Path:
    hosts = fleet()
    for host_vars in hosts.values():
        host_vars.pop("group_names")
    groups = {"nvidia-nodes": ["nvidia-01"], "metax-nodes": ["metax-01"], "cpu-nodes": ["cpu-01"]}
    doc = {"all": {"children": {
        "fleet": {"children": {g: {"hosts": {h: hosts[h] for h in hs}} for g, hs in groups.items()}},
        "monitoring": {"hosts": {"mon-01": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "ansible_host": "192.0.2.6"}}},
        # A router with HAProxy's exporter, team keys and a vllm-router pool: three more jobs.
        "router": {"hosts": {"router-01": {
            "ansible_host": "192.0.2.5", "router_metrics_port": 8404,
            "router_api_keys": [{"name": "search", "key": "s" * 24}],
            "router_models": [{"name": "gpt-oss-20b", "port": 9000, "policy": "cache_aware", "pool_port": 9100,
                               "metrics_port": 9200}]}}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
@starts_ansible
def rendered(tmp_path_factory):
    """The role's rules and configuration rendered by Ansible (its template module, the role's
    defaults and vars, the inventory's filters), and the keys written by the role's own loop."""
    tmp_path = tmp_path_factory.mktemp("monitoring")
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    book = tmp_path / "play.yml"
    book.write_text(f"""
- hosts: monitoring
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROLE}/vars/main.yml]
  tasks:
    - ansible.builtin.file: {{path: "{tmp_path}/keys", state: directory, mode: "0750"}}
    - ansible.builtin.copy:
        content: "{{{{ item.value }}}}"
        dest: "{tmp_path}/keys/{{{{ item.key }}}}"
        mode: "0640"
      loop: "{{{{ hostvars | fleet_monitoring_api_keys | dict2items }}}}"
      loop_control: {{label: "{{{{ item.key }}}}"}}
      no_log: true
    - ansible.builtin.template:
        src: {ROLE}/templates/etc/prometheus/rules/vllm-fleet.rules.yml.j2
        dest: {tmp_path}/vllm-fleet.rules.yml
        mode: "0644"
    - ansible.builtin.template:
        src: {ROLE}/templates/etc/prometheus/prometheus.yml.j2
        dest: {tmp_path}/prometheus.yml
        mode: "0644"
""")
    proc = ansible_playbook("-i", str(_inventory(tmp_path)), str(book),
                            "-e", json.dumps({"_monitoring_credentials_dir": f"{tmp_path}/keys",
                                              "_monitoring_rules": f"{tmp_path}/vllm-fleet.rules.yml"}))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert KEY not in proc.stdout + proc.stderr and OWN_KEY not in proc.stdout + proc.stderr
    return tmp_path


@pytest.mark.ansible
def test_the_rules_pass_promtool(rendered):
    check = subprocess.run([promtool(), "check", "rules", str(rendered / "vllm-fleet.rules.yml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 11 rules found" in check.stdout


def test_the_configuration_passes_promtool_with_its_keys_and_rules(rendered):
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    check = subprocess.run([promtool(), "check", "config", str(rendered / "prometheus.yml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    targets = monitoring.model_targets({h: v for h, v in fleet().items() if h in ("nvidia-01", "metax-01", "cpu-01")})
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert len(jobs) == 2 + 2 * len(targets) + 3
    # The router's own metrics: HAProxy's exporter, the teams' counters, the pool's vllm-router.
    assert jobs["haproxy__router_01"]["static_configs"][0]["targets"] == ["192.0.2.5:8404"]
    assert jobs["router_teams__router_01"]["metrics_path"] == "/metrics/teams"
    pool = jobs["vllm_router__router_01__gpt_oss_20b"]["static_configs"][0]
    assert pool["targets"] == ["192.0.2.5:9200"] and pool["labels"]["model"] == "gpt-oss-20b"
    assert [s["targets"][0] for s in jobs["node"]["static_configs"]] == ["192.0.2.51:9100", "192.0.2.21:9100",
                                                                          "192.0.2.6:9100", "192.0.2.41:9100"]
    for target in targets:
        for job, path in (("vllm", "/metrics"), ("vllm_health", "/health")):
            scrape = jobs[f"{job}__{target['job']}"]
            assert scrape["metrics_path"] == path
            (static,) = scrape["static_configs"]
            assert static["targets"] == [target["address"]]
            assert static["labels"]["job"] == job and static["labels"]["model"] == target["model"]
            key_file = Path(scrape["authorization"]["credentials_file"])
            assert key_file.read_text() == monitoring.api_keys(fleet())[target["credentials"]]
    # The keys are in their files only.
    assert KEY not in (rendered / "prometheus.yml").read_text()


RULE_TESTS = """
rule_files: [{rules}]
evaluation_interval: 15s
tests:
  - interval: 15s
    input_series:
      - series: 'up{{job="vllm", node="n1", model="m1", unit="vllm-m1"}}'
        values: '1 1 0 0 0 0 0 0 0 0'
      - series: 'up{{job="vllm_health", node="n1", model="m1", unit="vllm-m1"}}'
        values: '1 1 0 0 0 0 0 0 0 0'
      - series: 'up{{job="vllm", node="n2", model="m2", unit="vllm-m2"}}'
        values: '1 1 1 1 1 1 1 1 1 1'
      - series: 'up{{job="vllm_health", node="n2", model="m2", unit="vllm-m2"}}'
        values: '1 0 0 0 0 0 0 0 0 0'
      - series: 'vllm:kv_cache_usage_perc{{node="n2", model="m2", unit="vllm-m2"}}'
        values: '0.95x40'
      - series: 'vllm:num_requests_waiting{{node="n2", model="m2", unit="vllm-m2"}}'
        values: '0 3x40'
      - series: 'vllm:num_requests_waiting{{node="n1", model="m1", unit="vllm-m1"}}'
        values: '0x40'
      - series: 'vllm_fleet_device_healthy{{instance="n3:9100", node="n3", vendor="ascend", device="4", name="910B3", health="Critical"}}'
        values: '0x20'
      - series: 'vllm_fleet_devices{{instance="n3:9100", node="n3", vendor="ascend"}}'
        values: '7x20'
      - series: 'vllm_fleet_devices_expected{{instance="n3:9100", node="n3", vendor="ascend"}}'
        values: '8x20'
      - series: 'vllm_fleet_smi_up{{instance="n3:9100", node="n3", vendor="ascend", tool="npu-smi"}}'
        values: '1x20'
      - series: 'haproxy_server_weight{{job="haproxy", router="r1", proxy="model_m1", server="n1"}}'
        values: '1 0x20'
      - series: 'haproxy_server_weight{{job="haproxy", router="r1", proxy="model_m1", server="n2"}}'
        values: '1x4 0x20'
      - series: 'haproxy_server_weight{{job="haproxy", router="r1", proxy="model_m2", server="n3"}}'
        values: '1x20'
      - series: 'haproxy_server_weight{{job="haproxy", router="r1", proxy="stats", server="n3"}}'
        values: '0x20'
    alert_rule_test:
      # Down since 30s: pending, then firing once `for` (1m) has passed.
      - {{alertname: VllmEngineDown, eval_time: 1m}}
      - alertname: VllmEngineDown
        eval_time: 2m
        exp_alerts:
          - exp_labels: {{severity: critical, job: vllm, node: n1, model: m1, unit: vllm-m1}}
            exp_annotations: {{summary: "m1 on n1 does not answer (unit vllm-m1)"}}
      # n1 is down altogether (engine down covers it); n2 answers /metrics but fails /health.
      - alertname: VllmHealthCheckFailing
        eval_time: 2m
        exp_alerts:
          - exp_labels: {{severity: critical, job: vllm_health, node: n2, model: m2, unit: vllm-m2}}
            exp_annotations: {{summary: "m2 on n2 fails its health check"}}
      - {{alertname: VllmKvCacheFull, eval_time: 4m}}
      - alertname: VllmKvCacheFull
        eval_time: 6m
        exp_alerts:
          - exp_labels: {{severity: warning, node: n2, model: m2, unit: vllm-m2}}
            exp_annotations: {{summary: "KV cache of m2 on n2 is 95% full"}}
      - alertname: VllmRequestsWaiting
        eval_time: 6m
        exp_alerts:
          - exp_labels: {{severity: warning, node: n2, model: m2, unit: vllm-m2}}
            exp_annotations: {{summary: "3 request(s) waiting on m2 on n2"}}
      - alertname: AcceleratorUnhealthy
        eval_time: 3m
        exp_alerts:
          - exp_labels: {{severity: critical, instance: "n3:9100", node: n3, vendor: ascend, device: "4", name: 910B3,
                          health: Critical}}
            exp_annotations: {{summary: "device 4 of n3 reports health Critical"}}
      - alertname: AcceleratorMissing
        eval_time: 3m
        exp_alerts:
          - exp_labels: {{severity: critical, instance: "n3:9100", node: n3, vendor: ascend}}
            exp_annotations: {{summary: "n3 lists 7 device(s), fewer than its inventory says"}}
      - {{alertname: AcceleratorSmiFailing, eval_time: 3m}}
      # n1 quarantined from 15s, n2 from 1m15s: one replica after 45s; none left 30s after n2's turn.
      - alertname: ReplicaQuarantined
        eval_time: 1m
        exp_alerts:
          - exp_labels: {{severity: warning, job: haproxy, router: r1, proxy: model_m1, server: n1}}
            exp_annotations: {{summary: "n1 is quarantined out of model_m1 on r1: its health agent reports an unhealthy device"}}
      - {{alertname: ModelWithoutReplica, eval_time: 1m}}
      - alertname: ModelWithoutReplica
        eval_time: 2m
        exp_alerts:
          - exp_labels: {{severity: critical, job: haproxy, router: r1, proxy: model_m1}}
            exp_annotations: {{summary: "every replica of model_m1 on r1 is quarantined: its requests fail"}}
"""  # noqa: E501 - promtool's rule tests, one series a line


def test_the_alerts_fire_when_they_should_and_only_then(rendered):
    """promtool's rule unit tests on the rendered rules (the role's default `for:` durations)."""
    tests = rendered / "rules.test.yml"
    tests.write_text(RULE_TESTS.format(rules=rendered / "vllm-fleet.rules.yml"))
    check = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


# ---------------------------------------------------------------- the device health collector

def _collector(tmp_path: Path, vendor: str, fixture: str | None, rc: int = 0, healthy: str = "OK", expected: int = 8,
               tool: Path | None = None, env: dict | None = None):
    """Run the role's collector with a stand-in SMI tool that prints a recorded output (or with `tool`)."""
    lib = tmp_path / "bin"
    lib.mkdir(exist_ok=True)
    shutil.copy(ROLE / "files" / "vllm-fleet-device-health", lib / "vllm-fleet-device-health")
    shutil.copy(ROOT / "module_utils" / "vllm_fleet_accel.py", lib / "vllm_fleet_accel.py")
    if tool is None:
        tool = tmp_path / "smi"
        tool.write_text(f"#!/bin/sh\ncat {SMI / fixture}\nexit {rc}\n")
        tool.chmod(0o755)
    out = tmp_path / "health.prom"
    proc = subprocess.run([sys.executable, str(lib / "vllm-fleet-device-health"), "--vendor", vendor,
                           "--healthy", healthy, "--expected", str(expected), "--smi-path", str(tool),
                           "--output", str(out)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return out, proc


def _samples(path: Path) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in path.read_text().splitlines() if line and not line.startswith("#")}


def test_the_collector_publishes_each_device_against_the_vendors_healthy_states(tmp_path):
    from module_utils.vllm_fleet_accel import parse_npu_smi_info

    devices = parse_npu_smi_info((SMI / "npu-smi-info-910a-warning.txt").read_text())["devices"]
    assert "Warning" in {d["health"] for d in devices}  # the fixture has a device in Warning
    out, _ = _collector(tmp_path, "ascend", "npu-smi-info-910a-warning.txt", healthy="OK")
    samples = _samples(out)
    assert samples['vllm_fleet_smi_up{vendor="ascend",tool="npu-smi"}'] == 1
    assert samples['vllm_fleet_devices{vendor="ascend"}'] == len(devices)
    healthy = {k: v for k, v in samples.items() if k.startswith("vllm_fleet_device_healthy")}
    assert len(healthy) == len(devices)
    for device in devices:
        (value,) = [v for k, v in healthy.items() if f'device="{device["index"]}"' in k]
        assert value == (1 if device["health"] == "OK" else 0)
    # Ascend's contract counts Warning as healthy: the same listing then has no unhealthy device.
    out, _ = _collector(tmp_path, "ascend", "npu-smi-info-910a-warning.txt", healthy="OK,Warning")
    assert all(v == 1 for k, v in _samples(out).items() if k.startswith("vllm_fleet_device_healthy"))
    check = subprocess.run([promtool(), "check", "metrics"], input=out.read_text(), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_failing_smi_tool_is_published_as_down_with_its_words(tmp_path):
    out, proc = _collector(tmp_path, "nvidia", "nvidia-smi-no-driver.txt", rc=9)
    samples = _samples(out)
    assert samples['vllm_fleet_smi_up{vendor="nvidia",tool="nvidia-smi"}'] == 0
    assert samples['vllm_fleet_devices{vendor="nvidia"}'] == 0
    assert "couldn't communicate with the NVIDIA driver" in proc.stderr


def test_the_collector_reads_nvidia_with_the_facts_modules_parser(tmp_path):
    out, _ = _collector(tmp_path, "nvidia", "nvidia-smi-query-unknown-error.csv", healthy="OK,unknown,Warning",
                        expected=2)
    samples = _samples(out)
    assert samples['vllm_fleet_devices{vendor="nvidia"}'] == 2
    assert samples['vllm_fleet_devices_expected{vendor="nvidia"}'] == 2
    assert len([k for k in samples if k.startswith("vllm_fleet_device_healthy")]) == 2


ACCELERATOR_SERIES = ("vllm_fleet_accelerator_utilization_percent", "vllm_fleet_accelerator_memory_used_bytes",
                      "vllm_fleet_accelerator_memory_total_bytes")
MIB = 1048576


def _accelerators(path: Path) -> dict[str, dict[str, float]]:
    """series -> {index: value} of the collector's vllm_fleet_accelerator_* samples."""
    got: dict[str, dict[str, float]] = {name: {} for name in ACCELERATOR_SERIES}
    for key, value in _samples(path).items():
        match = re.fullmatch(r'(vllm_fleet_accelerator_\w+)\{vendor="(\w+)",index="(\d+)"\}', key)
        if key.startswith("vllm_fleet_accelerator_"):
            assert match and match.group(1) in got, key
            got[match.group(1)][match.group(3)] = value
    return got


def test_the_collector_publishes_each_accelerators_load_and_memory(tmp_path):
    # A recorded mx-smi listing whose GPUs 3 and 5 read 1% and GPU 0 holds more memory than the rest.
    out, _ = _collector(tmp_path, "metax", "mx-smi-c500-x8.txt", expected=8)
    text = out.read_text()
    for name in ACCELERATOR_SERIES:
        assert f"# TYPE {name} gauge\n" in text and f"# HELP {name} " in text
    got = _accelerators(out)
    indices = [str(i) for i in range(8)]
    util = [0, 0, 0, 1, 0, 1, 0, 0]
    used = [5680 * MIB] + [4986 * MIB] * 7
    assert got["vllm_fleet_accelerator_utilization_percent"] == dict(zip(indices, util, strict=True))
    assert got["vllm_fleet_accelerator_memory_used_bytes"] == dict(zip(indices, used, strict=True))
    assert got["vllm_fleet_accelerator_memory_total_bytes"] == dict.fromkeys(indices, 65536 * MIB)
    # Whole bytes, as integers: 65536 MiB is 68719476736 bytes.
    assert 'vllm_fleet_accelerator_memory_total_bytes{vendor="metax",index="0"} 68719476736\n' in text
    check = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_unknown_reading_is_left_out_not_published_as_zero(tmp_path):
    # GPU 1 shows [Unknown Error] for its memory in use and its utilisation; its total is still known.
    out, _ = _collector(tmp_path, "nvidia", "nvidia-smi-query-unknown-error.csv", expected=2)
    got = _accelerators(out)
    assert got["vllm_fleet_accelerator_utilization_percent"] == {"0": 0}
    assert got["vllm_fleet_accelerator_memory_used_bytes"] == {"0": 4 * MIB}
    assert got["vllm_fleet_accelerator_memory_total_bytes"] == {"0": 81920 * MIB, "1": 81920 * MIB}
    # GPUs in MIG mode report no utilisation at all: the series has its HELP and TYPE and no sample.
    out, _ = _collector(tmp_path, "nvidia", "nvidia-smi-query-a100-x2-header-units.csv", expected=2)
    got = _accelerators(out)
    assert got["vllm_fleet_accelerator_utilization_percent"] == {}
    assert got["vllm_fleet_accelerator_memory_used_bytes"] == {"0": 87 * MIB, "1": 87 * MIB}
    assert "# TYPE vllm_fleet_accelerator_utilization_percent gauge" in out.read_text()
    check = subprocess.run([promtool(), "check", "metrics"], input=out.read_text(), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_failing_smi_tool_publishes_no_accelerator_readings(tmp_path):
    out, _ = _collector(tmp_path, "nvidia", "nvidia-smi-no-driver.txt", rc=9)
    assert _accelerators(out) == {name: {} for name in ACCELERATOR_SERIES}


@pytest.mark.parametrize("vendor", ["ascend", "metax", "musa", "nvidia"])
def test_the_collector_reads_the_labs_simulated_tools(tmp_path, vendor):
    """The lab's stand-in SMI tool (lab/fixtures/hardware/bin) on a simulated node, run as the timer runs it."""
    node = Node(tmp_path, vendor, count=3, utilization_percent=42, memory_used_mb=20480)
    root, profile = node.root, node.profile
    out, _ = _collector(tmp_path, vendor, None, expected=3, tool=node.smi,
                        env={"VLLM_FLEET_LAB_ROOT": str(root)})
    assert _samples(out)[f'vllm_fleet_devices{{vendor="{vendor}"}}'] == 3
    got = _accelerators(out)
    assert got["vllm_fleet_accelerator_utilization_percent"] == {"0": 42, "1": 42, "2": 42}
    assert got["vllm_fleet_accelerator_memory_used_bytes"] == dict.fromkeys("012", 20480 * MIB)
    assert got["vllm_fleet_accelerator_memory_total_bytes"] == dict.fromkeys("012", profile["memory_mb"] * MIB)


def test_the_series_are_the_ones_the_chat_page_reads():
    """chat.js's fleet panel takes vllm_fleet_accelerator_* by name and keys them by the `index` label."""
    chat = (ROOT / "roles" / "services" / "router" / "files" / "chat" / "chat.js").read_text()
    assert set(re.findall(r"take\('(vllm_fleet_accelerator_\w+)'", chat)) == set(ACCELERATOR_SERIES)
    assert "s.labels.index" in chat  # the only label it reads: `vendor` beside it is ignored
    collector = (ROLE / "files" / "vllm-fleet-device-health").read_text()
    for name in ACCELERATOR_SERIES:
        assert f"'{name}'" in collector


def test_cpu_nodes_publish_nothing(tmp_path):
    out = tmp_path / "health.prom"
    out.write_text("stale\n")
    lib = ROLE / "files" / "vllm-fleet-device-health"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "module_utils")}
    proc = subprocess.run([sys.executable, str(lib), "--vendor", "cpu", "--healthy", "OK", "--output", str(out)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()


def test_argument_specs_match_defaults():
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]
    assert {k: v["default"] for k, v in specs["main"]["options"].items()} == defaults
    for name, spec in specs["node_exporter"]["options"].items():
        assert spec == specs["main"]["options"][name]


def test_copy_of_fleet_is_not_mutated_by_targets():
    hosts = fleet()
    before = copy.deepcopy(hosts)
    monitoring.model_targets(hosts)
    monitoring.api_keys(hosts)
    assert hosts == before


@pytest.mark.ansible
def test_inventory_strings_reach_the_yaml_as_strings_and_args_as_one_word(tmp_path):
    """A duration with a quote, `#` and a newline reads back from prometheus.yml and the rules
    as the same string (promtool then refuses it, the document stays whole); a listen address
    with a space, which would add a flag to Debian's $ARGS, is refused."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    hostile = '15s" # x\n  evil: 1'
    book = tmp_path / "play.yml"
    book.write_text(f"""
- hosts: monitoring
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROLE}/vars/main.yml]
  tasks:
    - ansible.builtin.template:
        src: {ROLE}/templates/etc/prometheus/{{{{ item }}}}.j2
        dest: {tmp_path}/{{{{ item | basename }}}}
        mode: "0644"
      loop: [prometheus.yml, rules/vllm-fleet.rules.yml]
      vars:
        monitoring_scrape_interval: {json.dumps(hostile)}
        monitoring_alert_engine_down_for: {json.dumps(hostile)}
    - ansible.builtin.template:
        src: {ROLE}/templates/etc/default/prometheus.j2
        dest: {tmp_path}/default-prometheus
        mode: "0644"
      vars:
        monitoring_prometheus_listen_address: "0.0.0.0 --web.enable-admin-api"
""")
    proc = ansible_playbook("-i", str(_inventory(tmp_path)), str(book))
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == hostile and "evil" not in config["global"]
    rules = yaml.safe_load((tmp_path / "vllm-fleet.rules.yml").read_text())
    assert rules["groups"][0]["rules"][0]["for"] == hostile
    assert proc.returncode != 0 and not (tmp_path / "default-prometheus").exists()
    assert "plain_word: '0.0.0.0 --web.enable-admin-api' is not one plain word" in proc.stdout, proc.stdout[-3000:]
