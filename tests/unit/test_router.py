"""The router (roles/router): its backends from the inventory, its validation, and its
HAProxy configuration rendered by the role's own template through Ansible."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook, example_hosts
from vllm_fleet import router
from vllm_fleet.validation import router_problems

ROOT = Path(__file__).resolve().parents[2]


def router_host(models, **extra):
    return {"group_names": ["router"], "ansible_host": "192.0.2.5", "router_models": models, **extra}


def test_backends_are_every_node_serving_the_model():
    fleet = example_hosts()
    (gpt, bge) = router.backends([{"name": "gpt-oss-20b", "port": 9000}, {"name": "bge-m3", "port": 9001}], fleet)
    assert gpt["backend"] == "model_gpt-oss-20b"
    assert [(s["host"], s["address"], s["port"]) for s in gpt["servers"]] == [
        ("metax-01", "192.0.2.21", 8000), ("nvidia-01", "192.0.2.41", 8000)]
    assert [(s["host"], s["address"], s["port"]) for s in bge["servers"]] == [
        ("cpu-01", "192.0.2.51", 8001), ("musa-01", "192.0.2.31", 8006)]


@pytest.mark.parametrize("listen, expected", [("10.0.0.41", "10.0.0.41"), ("0.0.0.0", "192.0.2.41"),
                                              ("::", "192.0.2.41"), (None, "192.0.2.41")])
def test_a_model_listening_on_its_own_address_is_reached_there(listen, expected):
    # The model's `listen` (a resolved model's key once models.py carries it), else the node's address.
    assert router.node_address("nvidia-01", {"ansible_host": "192.0.2.41"}, {"listen": listen}) == expected
    assert router.node_address("nvidia-01", {}, {"listen": None}) == "nvidia-01"


def listening(fleet: dict) -> dict:
    """The fleet with every node's models listening on all interfaces, behind an API key."""
    for host_vars in fleet.values():
        host_vars.update(fleet_serve_listen="0.0.0.0", fleet_serve_api_key="k" * 24)
    return fleet


def test_valid_router_has_no_problems():
    routers = {"router-01": router_host([{"name": "gpt-oss-20b", "port": 9000}, {"name": "bge-m3", "port": 9001}])}
    assert router_problems(routers, listening(example_hosts())) == []


def test_a_model_listening_on_loopback_of_another_machine_is_refused():
    # The example's nodes keep the default listen (127.0.0.1): a router elsewhere cannot reach them.
    routers = {"router-01": router_host([{"name": "gpt-oss-20b", "port": 9000}])}
    problems = router_problems(routers, example_hosts())
    assert len(problems) == 2, problems
    assert problems[0].startswith("host router-01: router_models[0].name = 'gpt-oss-20b': metax-01 serves it on "
                                  "127.0.0.1 only (loopback), which the router at 192.0.2.5 cannot reach")
    # In the lab, nodes and router share the host's loopback: reachable.
    fleet = {h: {**v, "ansible_host": "127.0.0.1"} for h, v in example_hosts().items()}
    assert router_problems({"r": router_host([{"name": "gpt-oss-20b", "port": 9000}], ansible_host="127.0.0.1")},
                           fleet) == []


def test_a_model_no_node_serves_is_refused_with_the_served_names():
    routers = {"router-01": router_host([{"name": "gpt-oss-21b", "port": 9000}])}
    (problem,) = router_problems(routers, listening(example_hosts()))
    assert problem.startswith("host router-01: router_models[0].name = 'gpt-oss-21b': no fleet node serves")
    assert "did you mean 'gpt-oss-20b'?" in problem and "bge-m3" in problem


def test_a_disabled_model_is_not_served():
    fleet = listening(example_hosts())
    for host in ("metax-01", "nvidia-01"):
        for model in fleet[host]["fleet_models"]:
            if model["name"] == "gpt-oss-20b":
                model["enabled"] = False
    (problem,) = router_problems({"r": router_host([{"name": "gpt-oss-20b", "port": 9000}])}, fleet)
    assert "no fleet node serves" in problem


def test_router_ports_that_clash_are_refused():
    fleet = listening(example_hosts())
    fleet["cpu-01"]["ansible_port"] = 2222
    routers = {
        "router-01": router_host([{"name": "gpt-oss-20b", "port": 9000}, {"name": "bge-m3", "port": 9000}],
                                 ansible_port=2200),
        # Same address as cpu-01 (a router beside a node): the node's SSH and model ports are taken.
        "router-02": router_host([{"name": "gpt-oss-20b", "port": 2222}, {"name": "bge-m3", "port": 8001}],
                                 ansible_host="192.0.2.51"),
        "router-03": router_host([{"name": "gpt-oss-20b", "port": 2200}]),
    }
    problems = router_problems(routers, fleet)
    assert len(problems) == 4, problems
    assert "host router-01: router_models[1].port = 9000: port 9000 on address 192.0.2.5 is already the router " \
           "port of 'gpt-oss-20b' on router-01" in problems[0]
    assert "router_models[0].port = 2222" in problems[1] and "the SSH port of cpu-01" in problems[1]
    assert "router_models[1].port = 8001" in problems[2] and "model bge-m3 of cpu-01" in problems[2]
    assert problems[3].startswith("host router-03: router_models[0].port = 2200")
    assert "SSH port of router-01" in problems[3]


def test_the_same_model_twice_is_refused():
    routers = {"r": router_host([{"name": "bge-m3", "port": 9000}, {"name": "bge-m3", "port": 9001}])}
    (problem,) = router_problems(routers, listening(example_hosts()))
    assert "model 'bge-m3' has a router entry already" in problem


@pytest.mark.parametrize("entries, expected", [
    ([{"name": "bge-m3"}], "port"),
    ([{"name": "bge-m3", "port": "many"}], "port"),
    ([{"name": "bge-m3", "port": 9000, "balance": "random"}], "balance"),
    ("bge-m3", "router_models"),
])
def test_malformed_entries_are_refused_by_the_role_spec(entries, expected):
    problems = router_problems({"r": router_host(entries)}, listening(example_hosts()))
    assert problems and all(p.startswith("host r: ") for p in problems)
    assert any(expected in p for p in problems), problems


def test_a_typo_of_a_router_variable_is_named():
    problems = router_problems({"r": router_host([], router_listen_adress="127.0.0.1")}, listening(example_hosts()))
    assert problems == [p for p in problems if "did you mean 'router_listen_address'?" in p] and problems


def _inventory(tmp_path: Path) -> Path:
    """The example fleet with a second NVIDIA node and a router, as one YAML inventory."""
    fleet = listening(example_hosts())
    fleet["nvidia-02"] = copy.deepcopy(fleet["nvidia-01"]) | {"ansible_host": "192.0.2.42"}
    groups = {"nvidia-nodes": ["nvidia-01", "nvidia-02"], "metax-nodes": ["metax-01"], "cpu-nodes": ["cpu-01"]}
    doc = {"all": {"children": {
        "fleet": {"children": {g: {"hosts": {h: fleet[h] for h in hosts}} for g, hosts in groups.items()}},
        "router": {"hosts": {"router-01": {
            "ansible_connection": "local", "ansible_python_interpreter": str(ROOT / ".venv/bin/python"),
            "router_listen_address": "127.0.0.1",
            "router_models": [{"name": "gpt-oss-20b", "port": 9000},
                              {"name": "qwen3-0.6b", "port": 9001, "balance": "roundrobin"}]}}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _playbook(tmp_path: Path, inventory: Path, text: str) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(text)
    return ansible_playbook("-i", str(inventory), str(book), env={
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_FILTER_PLUGINS": str(ROOT / "filter_plugins"),
        "ANSIBLE_LIBRARY": str(ROOT / "library"), "ANSIBLE_MODULE_UTILS": str(ROOT / "module_utils")})


def test_config_rendered_by_the_role_template(tmp_path):
    out = tmp_path / "haproxy.cfg"
    # The role's defaults as play vars, but not those the inventory sets (play vars would win).
    defaults = yaml.safe_load((ROOT / "roles/router/defaults/main.yml").read_text())
    for name in ("router_models", "router_listen_address"):
        defaults.pop(name)
    proc = _playbook(tmp_path, _inventory(tmp_path), f"""
- hosts: router
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROOT}/roles/router/vars/main.yml]
  tasks:
    - ansible.builtin.template:
        src: {ROOT}/roles/router/templates/etc/haproxy/haproxy.cfg.j2
        dest: {out}
        mode: "0644"
""")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    text = out.read_text()
    gpt = text[text.index("backend model_gpt-oss-20b"):text.index("# ---- qwen3-0.6b")]
    assert "bind 127.0.0.1:9000" in text and "bind 127.0.0.1:9001" in text
    assert "balance leastconn" in gpt and "option httpchk GET /health" in gpt
    servers = [line.split()[1:3] for line in gpt.splitlines() if line.strip().startswith("server ")]
    assert servers == [["metax-01", "192.0.2.21:8000"], ["nvidia-01", "192.0.2.41:8000"],
                       ["nvidia-02", "192.0.2.42:8000"]]
    qwen = text[text.index("backend model_qwen3-0.6b"):]
    assert "balance roundrobin" in qwen and "server cpu-01 192.0.2.51:8000" in qwen
    assert "stats socket /run/haproxy/admin.sock mode 0660 level admin" in text
    assert "timeout server 10m" in text
    if shutil.which("haproxy"):
        check = subprocess.run(["haproxy", "-c", "-f", str(out)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_validate_play_checks_routers_against_the_whole_fleet(tmp_path):
    """The validate play covers router hosts (no accelerator) and refuses a model no node serves,
    even when the run is limited to the router."""
    inventory = _inventory(tmp_path)
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["children"]["router"]["hosts"]["router-01"]["router_models"][1]["name"] = "qwen3-6b"
    inventory.write_text(yaml.safe_dump(doc))
    proc = ansible_playbook("-i", str(inventory), "playbooks/validate.yml", "-l", "router")
    assert proc.returncode != 0
    assert "host router-01: router_models[1].name = 'qwen3-6b': no fleet node serves" in proc.stdout
    assert "did you mean 'qwen3-0.6b'?" in proc.stdout
    assert "fleet_accelerator" not in proc.stdout


def test_inventory_strings_reach_the_config_as_one_word_each(tmp_path):
    """A listen address or a timeout carrying a space, `#` or `$` ends up as one quoted word
    (HAProxy would refuse the address, not read a second one or a comment)."""
    out = tmp_path / "haproxy.cfg"
    defaults = yaml.safe_load((ROOT / "roles/router/defaults/main.yml").read_text())
    for name in ("router_models", "router_listen_address", "router_timeout_client"):
        defaults.pop(name)
    proc = _playbook(tmp_path, _inventory(tmp_path), f"""
- hosts: router
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROOT}/roles/router/vars/main.yml]
  tasks:
    - ansible.builtin.template:
        src: {ROOT}/roles/router/templates/etc/haproxy/haproxy.cfg.j2
        dest: {out}
        mode: "0644"
      vars:
        router_listen_address: "127.0.0.1:1 # ${{HOME}}"
        router_timeout_client: "10m' 5s"
""")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    from tests.unit.test_escapers import haproxy_read

    lines = [haproxy_read(line) for line in out.read_text().splitlines()]
    assert ["bind", "127.0.0.1:1 # ${HOME}:9000"] in lines and ["bind", "127.0.0.1:1 # ${HOME}:9001"] in lines
    assert ["timeout", "client", "10m' 5s"] in lines
