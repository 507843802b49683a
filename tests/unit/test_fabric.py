"""The fabric check of models that span nodes (library/fleet_fabric.py, vllm_fleet/cluster.py),
run in-process; the route a firewall blocks is tested in the Ray lab (tests/lab/ray)."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.conftest import load_module
from vllm_fleet import cluster, vendors

REPO = Path(__file__).resolve().parents[2]
fabric = load_module(REPO / "library" / "fleet_fabric.py")
HCCN_TOOL = REPO / "lab" / "fixtures" / "hardware" / "bin" / "hccn_tool"
ASCEND_PROFILE = REPO / "lab" / "fixtures" / "hardware" / "profiles" / "ascend.json"


def run_module(args: dict, capsys) -> tuple[int, dict]:
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            fabric.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def sys_net(tmp_path):
    """A /sys/class/net with eth0 up, eth1 down and ib0 up."""
    net = tmp_path / "net"
    for name, flags in (("eth0", "0x1003"), ("eth1", "0x1002"), ("ib0", "0x1043")):
        (net / name).mkdir(parents=True)
        (net / name / "flags").write_text(flags + "\n")
    return str(net)


@pytest.mark.parametrize(("value", "expected"), [
    ("eth0", (False, ["eth0"])),
    ("=eth0,ib0", (True, ["eth0", "ib0"])),
    ("eth,ib", (False, ["eth", "ib"])),
    ("^docker,lo", (False, [])),
    ("  ", (False, [])),
])
def test_ifname_values_are_read_in_nccls_syntax(value, expected):
    assert fabric.parse_ifname(value) == expected


def test_interfaces_named_must_exist_and_be_up(sys_net):
    assert fabric.interface_problems(["NCCL_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth", "X_SOCKET_IFNAME=^eth1"],
                                     sys_net) == []
    problems = fabric.interface_problems(
        ["HCCL_SOCKET_IFNAME=enp189s0f0", "GLOO_SOCKET_IFNAME==eth1", "TP_SOCKET_IFNAME==eth"], sys_net)
    assert problems == [
        "HCCL_SOCKET_IFNAME names interface enp189s0f0, which this node does not have (it has eth0, eth1, ib0)",
        "GLOO_SOCKET_IFNAME names interface eth1, which is down (eth1)",
        # An exact name matches no prefix: "=eth" is not eth0.
        "TP_SOCKET_IFNAME names interface eth, which this node does not have (it has eth0, eth1, ib0)",
    ]


def test_the_cluster_address_must_be_the_nodes_own():
    assert fabric.address_problem("127.0.0.1") is None
    assert fabric.address_problem("") is None
    # TEST-NET-1: never an address of this machine (binding sends nothing).
    problem = fabric.address_problem("192.0.2.77")
    assert problem.startswith("its cluster address 192.0.2.77 is not an address of this node (")


def test_a_listening_or_refusing_peer_is_reached():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert fabric.reach_problem({"name": "the head", "host": "127.0.0.1", "port": port}, "127.0.0.1", 2) is None
    # The same port, closed now: refused, which is an answer from the host.
    assert fabric.reach_problem({"name": "the head", "host": "127.0.0.1", "port": port}, "127.0.0.1", 2) is None


class _Socket:
    """A socket whose connect fails the way a blocked or missing route does."""

    error: BaseException = TimeoutError()

    def __init__(self, *args):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def settimeout(self, timeout):
        pass

    def bind(self, address):
        pass

    def connect(self, address):
        raise self.error


@pytest.mark.parametrize(("error", "why"), [
    (TimeoutError(), "no answer within 3 s"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "No route to host"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), "Network is unreachable"),
])
def test_a_route_that_is_blocked_or_missing_names_the_peer_and_why(monkeypatch, error, why):
    monkeypatch.setattr(_Socket, "error", error)
    monkeypatch.setattr(fabric.socket, "socket", _Socket)
    target = {"name": "the Ray head a-01 of model m", "host": "10.0.0.11", "port": 6379}
    assert fabric.reach_problem(target, "10.0.0.12", 3) == (
        f"cannot reach the Ray head a-01 of model m at 10.0.0.11:6379 from 10.0.0.12 ({why})")


@pytest.fixture
def npu_node(tmp_path):
    """A simulated Ascend node's root for hccn_tool: the lab profile, two NPUs, the second
    one's port down and unhealthy."""
    profile = json.loads(ASCEND_PROFILE.read_text())
    profile["fabric"] = {"1": {"link": "DOWN", "net_health": "Receive timeout"}}
    (tmp_path / "etc" / "vllm-fleet-lab").mkdir(parents=True)
    (tmp_path / "etc" / "vllm-fleet-lab" / "hardware.json").write_text(json.dumps(profile))
    (tmp_path / "dev").mkdir()
    for index in (0, 1):
        (tmp_path / "dev" / f"davinci{index}").write_text("")
    return tmp_path


def ascend_checks() -> list[dict]:
    """The Ascend contract's fabric checks, with the lab's simulator as hccn_tool."""
    checks = vendors.contract("ascend")["cluster"]["checks"]
    role_vars = yaml.safe_load((vendors.role_dir("ascend") / "vars" / "main.yml").read_text())
    assert [c["argv"][0] for c in checks] == ["{{ _ascend_hccn_tool }}"] * 2
    assert role_vars["_ascend_hccn_tool"].endswith("/driver/tools/hccn_tool")
    return [{**c, "argv": [str(HCCN_TOOL), *c["argv"][1:]]} for c in checks]


def test_the_ascend_contracts_link_checks_pass_on_healthy_npus_and_name_the_sick_one(npu_node):
    env = {**os.environ, "VLLM_FLEET_LAB_ROOT": str(npu_node), "LC_ALL": "C"}
    assert fabric.device_problems(ascend_checks(), [0], 5, env) == []
    problems = fabric.device_problems(ascend_checks(), [0, 1, 2], 5, env)
    assert problems[0] == (f"device 1: `{HCCN_TOOL} -i 1 -link -g` printed 'link status: DOWN', "
                           "expected 'link status: UP'")
    assert problems[1].startswith(f"device 2: `{HCCN_TOOL} -i 2 -link -g` printed ")
    assert "(exit 1)" in problems[1] and "no /dev/davinci2" in problems[1]
    assert problems[2] == (f"device 1: `{HCCN_TOOL} -i 1 -net_health -g` printed 'net health status: Receive timeout', "
                           "expected 'net health status: Success'")
    assert len(problems) == 4


def test_a_missing_tool_is_said_once(tmp_path):
    checks = [{"argv": [str(tmp_path / "hccn_tool"), "-i", "{device}", "-link", "-g"], "expect": "UP"}]
    assert fabric.device_problems(checks, [0, 1, 2], 3) == [
        f"{tmp_path / 'hccn_tool'} is not installed, so `{tmp_path / 'hccn_tool'} -i 0 -link -g` cannot run"]


def test_the_module_fails_naming_the_member_and_every_problem(capsys, tmp_path):
    args = {"member": "a-02", "address": "192.0.2.77", "interfaces": ["NCCL_SOCKET_IFNAME=vf-no-such-if"],
            "reach": [{"name": "the Ray head a-01 of model m", "host": "127.0.0.1", "port": 9}],
            "devices": [0], "device_checks": [{"argv": [str(tmp_path / "nope"), "{device}"], "expect": "x"}]}
    code, result = run_module(args, capsys)
    assert code == 1 and result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("a-02: its cluster address 192.0.2.77 is not an address of this node (")
    assert "NCCL_SOCKET_IFNAME names interface vf-no-such-if, which this node does not have" in result["msg"]
    # No route is tried from an address the node does not have.
    assert "cannot reach" not in result["msg"]
    assert f"{tmp_path / 'nope'} is not installed" in result["msg"]
    assert result["checked"] == {"address": 1, "interfaces": 1, "reach": 1, "device": 1}


def test_the_module_passes_on_loopback(capsys):
    args = {"member": "a-02", "address": "127.0.0.1", "interfaces": ["GLOO_SOCKET_IFNAME=lo"],
            "reach": [{"name": "the Ray head", "host": "127.0.0.1", "port": 9}]}
    code, result = run_module(args, capsys)
    assert code == 0, result
    assert result["problems"] == [] and result["changed"] is False


def _span_model(role: str) -> dict:
    return {"name": "big", "devices": [0, 1], "env": {"NCCL_SOCKET_IFNAME": "=ib0", "OTHER": "x"},
            "span": {"nodes": ["a-01", "a-02", "a-03"], "head": "a-01", "port": 6379, "role": role}}


def test_a_workers_spec_reaches_the_head_and_checks_every_interface_variable():
    env = cluster.member_env({"env": {"GLOO_SOCKET_IFNAME": "{interface}", "HCCL_SOCKET_IFNAME": "{interface}"}},
                             "10.0.0.12", "enp1", "ASCEND_RT_VISIBLE_DEVICES", [0, 1], "10.0.0.11", 6379)
    checks = [{"argv": ["hccn_tool", "-i", "{device}", "-link", "-g"], "expect": "UP"}]
    spec = cluster.fabric_spec(_span_model("worker"), "a-02", "10.0.0.12", "10.0.0.11", env, checks)
    assert spec == {
        "member": "a-02", "address": "10.0.0.12",
        "interfaces": ["GLOO_SOCKET_IFNAME=enp1", "HCCL_SOCKET_IFNAME=enp1", "NCCL_SOCKET_IFNAME==ib0"],
        "reach": [{"name": "the Ray head a-01 of model big", "host": "10.0.0.11", "port": 6379}],
        "devices": [0, 1], "device_checks": checks,
    }
    head = cluster.fabric_spec(_span_model("head"), "a-01", "10.0.0.11", "10.0.0.11", {}, None)
    assert head["reach"] == [] and head["device_checks"] == [] and head["interfaces"] == ["NCCL_SOCKET_IFNAME==ib0"]


def test_a_head_probes_each_other_member_from_its_own_address():
    addresses = {"a-01": "10.0.0.11", "a-02": "10.0.0.12", "a-03": "10.0.0.13"}
    probes = cluster.head_probes(_span_model("head"), addresses)
    assert [(p["member"], p["address"]) for p in probes] == [("a-02", "10.0.0.12"), ("a-03", "10.0.0.13")]
    assert {(t["host"], t["port"]) for p in probes for t in p["reach"]} == {("10.0.0.11", 6379)}
