"""The router (roles/services/router): its backends from the inventory, its validation, and its
HAProxy configuration rendered by the role's own template through Ansible."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_DIFFERENCES, GROUP_OF, ansible_playbook, example_hosts
from vllm_fleet import models, router, validation
from vllm_fleet.validation import router_problems

ROOT = Path(__file__).resolve().parents[2]


def router_host(models, **extra):
    if isinstance(models, list):  # a malformed value is passed on as it is
        models = [{"allow_differences": EXAMPLE_DIFFERENCES, **m} if isinstance(m, dict) else m for m in models]
    return {"group_names": ["router"], "ansible_host": "192.0.2.5", "router_models": models, **extra}


# One change per replica field: (in the model or its serve options, key, value).
REPLICA_CHANGES = {
    "served_model_name": ("serve", "served_model_name", ["gpt-oss-20b", "gpt"]),
    "kind": ("model", "kind", "embed"),
    "source": ("model", "source", {"type": "huggingface", "repo": "other/gpt-oss-20b"}),
    "revision": ("serve", "revision", "abc123"),
    "max_model_len": ("serve", "max_model_len", 4096),
    "tokenizer": ("serve", "tokenizer", "/home/models/tok"),
    "chat_template": ("serve", "chat_template", "/etc/t.jinja"),
    "dtype": ("serve", "dtype", "float16"),
    "quantization": ("serve", "quantization", "fp8"),
    "lora_adapters": ("model", "lora_adapters", []),
}


def test_replicas_that_differ_are_refused_naming_both_hosts():
    """Every replica behind one name agrees on what a request's answer depends on (router.REPLICA_FIELDS),
    unless the entry allows the difference; each field is checked, and the problem names both hosts."""
    fleet = listening(example_hosts())
    entry = {"name": "gpt-oss-20b", "port": 9000}
    problems = router_problems({"r": router_host([entry], router_models=[entry])}, fleet)
    assert [p.split(": ", 2)[1].split(" serve it")[0] for p in problems] == [
        "router_models[0].name = 'gpt-oss-20b'"] * 3, problems
    assert "metax-01 and nvidia-01 serve it with a different max_model_len (None and 32768)" in problems[1]
    assert problems[1].endswith("accepted: the same max_model_len on every replica, or 'max_model_len' in the "
                                "entry's allow_differences")
    # Allowed, a difference is no problem; the others still are.
    allowed = {**entry, "allow_differences": ["source", "lora_adapters"]}
    (left,) = router_problems({"r": router_host([allowed], router_models=[allowed])}, fleet)
    assert "different max_model_len" in left
    # Each field, changed on one replica only, is found (two identical replicas of the nvidia node).
    for field, read in router.REPLICA_FIELDS.items():
        twins = {"nvidia-01": fleet["nvidia-01"], "nvidia-02": copy.deepcopy(fleet["nvidia-01"])}
        model = next(m for m in twins["nvidia-02"]["fleet_models"] if m["name"] == "gpt-oss-20b")
        assert router_problems({"r": router_host([entry], router_models=[entry])}, twins) == [], field
        before = read(router.served_models(twins["nvidia-02"], "nvidia-02")[0])
        serve = model.setdefault("serve", {})
        where, key, value = REPLICA_CHANGES[field]
        (model if where == "model" else serve)[key] = value
        assert read(router.served_models(twins["nvidia-02"], "nvidia-02")[0]) != before, field
        problems = router_problems({"r": router_host([entry], router_models=[entry])}, twins)
        found = [p for p in problems if f"nvidia-01 and nvidia-02 serve it with a different {field} " in p]
        assert found, (field, problems)


def test_a_source_url_with_credentials_is_not_shown():
    fleet = listening(example_hosts())
    twins = {"nvidia-01": fleet["nvidia-01"], "nvidia-02": copy.deepcopy(fleet["nvidia-01"])}
    model = next(m for m in twins["nvidia-02"]["fleet_models"] if m["name"] == "gpt-oss-20b")
    model["source"] = {"type": "git", "url": "https://user:s3cret-token@git.example/gpt-oss-20b.git"}
    entry = {"name": "gpt-oss-20b", "port": 9000}
    hosts = {**twins, "r": router_host([entry], router_models=[entry])}
    problems = validation.validate_inventory(hosts, sorted(hosts))
    # The class rule of URL credentials refuses the source itself, and no problem shows the password
    # (validate_inventory masks every problem through vllm_fleet.secrets, the replica check's included).
    assert any("source.url = '(a URL with a credential, not shown)'" in p for p in problems), problems
    assert not any("s3cret-token" in p for p in problems), problems
    assert "user:********@git.example" in validation.mask_secrets(
        router_problems({"r": hosts["r"]}, twins), [])[0]


def test_the_spec_allows_exactly_the_router_s_policies():
    spec = yaml.safe_load((ROOT / "roles" / "services" / "router" / "meta" / "argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["router_models"]["options"]["policy"]
    assert sorted(option["choices"]) == sorted(router.POLICIES)


def test_the_spec_allows_exactly_the_replica_fields():
    spec = yaml.safe_load((ROOT / "roles" / "services" / "router" / "meta" / "argument_specs.yml").read_text())
    option = spec["argument_specs"]["main"]["options"]["router_models"]["options"]["allow_differences"]
    assert option["choices"] == list(router.REPLICA_FIELDS)


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


def test_each_server_asks_its_nodes_health_agent_whose_port_is_in_the_registry():
    fleet = listening(example_hosts())
    routers = {"router-01": router_host([{"name": "gpt-oss-20b", "port": 9000}])}
    (backend,) = router.backends(routers["router-01"]["router_models"], fleet)
    server = backend["servers"][0]
    assert (server["agent_address"], server["agent_port"]) == (server["address"], 9181)
    fleet[server["host"]]["health_agent_listen_address"] = "192.0.2.77"
    assert router.backends(routers["router-01"]["router_models"], fleet)[0]["servers"][0]["agent_address"] == \
        "192.0.2.77"
    del fleet[server["host"]]["health_agent_listen_address"]
    # The agent listens beside the models: a port a model has is refused, naming the agent.
    fleet[server["host"]]["health_agent_port"] = server["port"]
    fleet = {h: {**v, "group_names": ["fleet", GROUP_OF[h]]} for h, v in fleet.items()}
    everyone = {**fleet, **routers}
    problems = validation.validate_inventory(everyone, sorted(everyone))
    assert [p for p in problems if p.startswith(f"host {server['host']}: health_agent_port = {server['port']}")], \
        problems
    # Without routers nothing asks the agent, and it claims no port.
    assert not [p for p in validation.validate_inventory(fleet, sorted(fleet)) if "health_agent_port" in p]


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
    ([{"name": "bge-m3", "port": 9000, "policy": "random"}], "policy"),
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
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "router_listen_address": "127.0.0.1",
            "router_models": [{"name": "gpt-oss-20b", "port": 9000},
                              {"name": "qwen3-0.6b", "port": 9001, "policy": "round_robin"}]}}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _playbook(tmp_path: Path, inventory: Path, text: str) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(text)
    return ansible_playbook("-i", str(inventory), str(book), env={
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_FILTER_PLUGINS": str(ROOT / "filter_plugins"),
        "ANSIBLE_LIBRARY": str(ROOT / "library"), "ANSIBLE_MODULE_UTILS": str(ROOT / "module_utils")})


@pytest.mark.ansible
def test_config_rendered_by_the_role_template(tmp_path):
    text = _render(tmp_path, {})
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
    haproxy_check(text, tmp_path)


def haproxy_check(text: str, tmp_path: Path) -> None:
    """`haproxy -c` on a rendered configuration (scripts/setup puts Debian's HAProxy on the
    controller), with the role's Lua file and empty maps at their paths under tmp_path, and
    without the account and chroot of a router host."""
    if not shutil.which("haproxy"):
        pytest.skip("no haproxy on this controller (scripts/setup installs it)")
    text = text.replace("/etc/haproxy/", f"{tmp_path}/")
    lua = ROOT / "roles" / "services" / "router" / "files" / "vllm-fleet-teams.lua"
    (tmp_path / "vllm-fleet-teams.lua").write_text(lua.read_text())
    for name in ("vllm-fleet-keys.map", "vllm-fleet-limits.map"):
        (tmp_path / name).write_text("")
    cfg = tmp_path / "checked.cfg"
    host_only = ("chroot /var/lib/haproxy", "user haproxy", "group haproxy")
    cfg.write_text("\n".join(line for line in text.splitlines() if line.strip() not in host_only) + "\n")
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.ansible
def test_validate_play_checks_routers_against_the_whole_fleet(tmp_path):
    """The validate play covers router hosts (no accelerator) and refuses a model no node serves,
    even when the run is limited to the router."""
    inventory = _inventory(tmp_path)
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["children"]["router"]["hosts"]["router-01"]["router_models"][1]["name"] = "qwen3-6b"
    inventory.write_text(yaml.safe_dump(doc))
    proc = ansible_playbook("-i", str(inventory), "playbooks/validate.yml", "-l", "router")
    assert proc.returncode == 4
    assert "host router-01: router_models[1].name = 'qwen3-6b': no fleet node serves" in proc.stdout
    assert "did you mean 'qwen3-0.6b'?" in proc.stdout
    assert "fleet_accelerator" not in proc.stdout


@pytest.mark.ansible
def test_inventory_strings_reach_the_config_as_one_word_each(tmp_path):
    """A listen address or a timeout carrying a space, `#` or `$` ends up as one quoted word
    (HAProxy would refuse the address, not read a second one or a comment)."""
    out = tmp_path / "haproxy.cfg"
    defaults = yaml.safe_load((ROOT / "roles/services/router/defaults/main.yml").read_text())
    for name in ("router_models", "router_listen_address", "router_timeout_client"):
        defaults.pop(name)
    proc = _playbook(tmp_path, _inventory(tmp_path), f"""
- hosts: router
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROOT}/roles/services/router/vars/main.yml]
  tasks:
    - ansible.builtin.template:
        src: {ROOT}/roles/services/router/templates/etc/haproxy/haproxy.cfg.j2
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


def _render(tmp_path: Path, router_vars: dict, template: str = "etc/haproxy/haproxy.cfg.j2") -> str:
    """One of the role's templates, rendered for router-01 of _inventory with `router_vars` set."""
    inventory = _inventory(tmp_path)
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["children"]["router"]["hosts"]["router-01"].update(router_vars)
    inventory.write_text(yaml.safe_dump(doc))
    out = tmp_path / "rendered"
    defaults = yaml.safe_load((ROOT / "roles/services/router/defaults/main.yml").read_text())
    for name in ("router_listen_address", *router_vars):
        defaults.pop(name, None)
    defaults.pop("router_models", None)
    proc = _playbook(tmp_path, inventory, f"""
- hosts: router
  gather_facts: false
  vars: {json.dumps(defaults)}
  vars_files: [{ROOT}/roles/services/router/vars/main.yml]
  tasks:
    - ansible.builtin.template:
        src: {ROOT}/roles/services/router/templates/{template}
        dest: {out}
        mode: "0644"
""")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out.read_text()


TEAMS = [{"name": "search", "key": "s" * 20, "requests_per_minute": 60}, {"name": "chat", "key": "c" * 20}]
POLICIES = [{"name": "gpt-oss-20b", "port": 9000, "policy": "cache_aware", "pool_port": 9100, "metrics_port": 9200},
            {"name": "qwen3-0.6b", "port": 9001, "policy": "session"}]


@pytest.mark.ansible
def test_policies_and_team_keys_in_haproxy(tmp_path):
    """A vllm-router policy sends the endpoint to its pool on loopback; session hashes the session
    header, else the body's user; team keys: 401 unknown, 429 over the team's rate, the engines'
    own key in their stead; the metrics frontend serves the exporter and the teams' counters."""
    text = _render(tmp_path, {"router_models": POLICIES, "router_api_keys": TEAMS, "router_metrics_port": 9300})
    gpt = text[text.index("backend model_gpt-oss-20b"):text.index("# ---- qwen3-0.6b")]
    assert "server vllm-router 127.0.0.1:9100 check" in gpt and "balance" not in gpt
    qwen = text[text.index("backend model_qwen3-0.6b"):]
    assert "http-request set-var(txn.session) req.hdr(X-Session-Id)" in qwen
    assert "req.body,json_query('$.user')" in qwen and "balance hash var(txn.session)" in qwen
    assert "server cpu-01 192.0.2.51:8000" in qwen
    front = text[text.index("frontend model_qwen3-0.6b"):text.index("backend model_qwen3-0.6b")]
    assert "map(/etc/haproxy/vllm-fleet-keys.map)" in front and "return status 401" in front
    assert "return status 429" in front and "track-sc0 var(txn.team) table vllm_fleet_teams" in front
    assert "http-request set-header Authorization 'Bearer " + "k" * 24 + "'" in front
    assert "lua-load /etc/haproxy/vllm-fleet-teams.lua" in text
    assert "use-service lua.vllm_fleet_team_metrics if { path /metrics/teams }" in text
    assert "bind 127.0.0.1:9300" in text
    haproxy_check(text, tmp_path)


@pytest.mark.ansible
def test_without_team_keys_the_clients_key_passes(tmp_path):
    text = _render(tmp_path, {"router_models": POLICIES})
    assert "Authorization" not in text.split("# ---- gpt-oss-20b")[1]
    assert "lua-load" not in text and "vllm_fleet_teams" not in text


@pytest.mark.ansible
def test_team_maps_hold_each_key_and_limit(tmp_path):
    keys = _render(tmp_path, {"router_api_keys": TEAMS}, "vllm-fleet-keys.map.j2")
    assert [line for line in keys.splitlines() if not line.startswith("#")] == ["s" * 20 + " search",
                                                                              "c" * 20 + " chat"]
    limits = _render(tmp_path, {"router_api_keys": TEAMS}, "vllm-fleet-limits.map.j2")
    assert [line for line in limits.splitlines() if not line.startswith("#")] == ["search 60", "chat 0"]


def test_pool_command_line():
    (backend,) = router.backends([POLICIES[0]], listening(example_hosts()))
    assert backend["pool"] and backend["unit"] == "vllm-fleet-router-model_gpt-oss-20b"
    assert backend["workers"] == ["http://192.0.2.21:8000", "http://192.0.2.41:8000"]
    argv = router.pool_argv(backend, "/v/bin/vllm-router", "500ms", 2, 3, "0.0.0.0", "10m")
    assert argv[:7] == ["/v/bin/vllm-router", "--host", "127.0.0.1", "--port", "9100", "--policy", "cache_aware"]
    assert argv[argv.index("--health-check-interval-secs") + 1] == "1"
    assert argv[argv.index("--request-timeout-secs") + 1] == "600"
    assert argv[argv.index("--prometheus-port") + 1] == "9200" and "--api-key" not in argv
    assert "--worker-urls" not in argv  # from the unit's environment file
    assert argv[argv.index("--cb-failure-threshold") + 1] == "1"
    assert argv[argv.index("--cb-timeout-duration-secs") + 1] == "3"  # 1 s (500ms rounded) x rise 3
    with pytest.raises(ValueError):
        router.haproxy_seconds("2 s")


def _teams_router(**extra):
    return {"r": router_host([{"name": "bge-m3", "port": 9000}], **extra)}


@pytest.mark.parametrize("extra, expected", [
    ({"router_api_keys": [{"name": "a", "key": "k" * 24}]},
     "is the engines' own key (fleet_serve_api_key or a model's secret_env.VLLM_API_KEY)"),
    ({"router_api_keys": [{"name": "a", "key": "x" * 20}, {"name": "b", "key": "x" * 20}]},
     "router_api_keys[1].key = ******** (a string): is another team's key too"),
    ({"router_api_keys": [{"name": "a", "key": "x" * 20}, {"name": "a", "key": "y" * 20}]},
     "names a team that has a key already"),
    ({"router_api_keys": [{"name": "a", "key": "short"}]}, "router_api_keys[0].key"),
    ({"router_api_keys": [{"name": "a", "key": ""}]}, "router_api_keys[0].key"),
    ({"router_api_keys": [{"name": "a", "key": "x" * 20, "requests_per_minute": -1}]}, "requests_per_minute"),
    # A team's limit is no secret (masking shows it in plans): its message shows it too.
    ({"router_api_keys": [{"name": "a", "key": "x" * 20, "requests_per_minute": "8000x"}]},
     "router_api_keys[0].requests_per_minute = '8000x' (a string)"),
    ({"router_api_keys": [{"name": "a b", "key": "x" * 20}]}, "router_api_keys[0].name"),
    ({"router_session_header": "X Session"}, "router_session_header = 'X Session' (a string): is no HTTP header name"),
])
def test_bad_team_keys_are_refused(extra, expected):
    from vllm_fleet.validation import validate_inventory
    fleet = listening(example_hosts())
    hosts = {**fleet, **_teams_router(**extra)}
    problems = router_problems(_teams_router(**extra), fleet) + validate_inventory(hosts, list(hosts))
    assert any(expected in p and p.startswith("host r: ") for p in problems), problems
    assert not any("x" * 20 in p or "k" * 24 in p for p in problems)


def test_a_pool_names_its_ports_and_its_release():
    entry = {"name": "bge-m3", "port": 9000, "policy": "cache_aware"}
    problems = router_problems({"r": router_host([entry])}, listening(example_hosts()))
    assert any("router_models[0].pool_port is missing" in p for p in problems), problems
    assert any("router_models[0].metrics_port is missing" in p for p in problems), problems
    assert any("fleet_matrix.vllm_router.version is missing" in p for p in problems), problems
    ok = router_host([{**entry, "pool_port": 9100, "metrics_port": 9200}],
                     fleet_matrix={"vllm_router": {"version": "0.1.17"}})
    assert router_problems({"r": ok}, listening(example_hosts())) == []
    clash = router_host([{**entry, "pool_port": 9000, "metrics_port": 9200}],
                        fleet_matrix={"vllm_router": {"version": "0.1.17"}})
    assert any("router_models[0].pool_port = 9000" in p for p in router_problems({"r": clash},
                                                                               listening(example_hosts())))
    haproxy = router_host([{"name": "bge-m3", "port": 9000, "policy": "round_robin", "pool_port": 9100}])
    (problem,) = router_problems({"r": haproxy}, listening(example_hosts()))
    assert "router_models[0].pool_port = 9100 (an integer): is for a policy of the vLLM project's router" in problem


def test_team_keys_need_one_engine_key_per_model():
    fleet = listening(example_hosts())
    fleet["musa-01"]["fleet_serve_api_key"] = "m" * 24
    problems = router_problems(_teams_router(router_api_keys=[{"name": "a", "key": "x" * 20}]), fleet)
    assert any("serve it with different engine keys" in p for p in problems), problems


def test_a_models_own_key_is_the_engine_key_the_router_uses():
    """A model's own secret_env.VLLM_API_KEY is what its engine asks for (models.engine_api_key):
    the router puts that key on its requests where teams have keys, and validation compares
    those keys, not the hosts' fleet_serve_api_key."""
    fleet = listening(example_hosts())
    backend = next(b for b in router.backends([{"name": "gpt-oss-20b", "port": 9000}], fleet))
    host = backend["servers"][0]["host"]
    group_key = fleet[host].get("fleet_serve_api_key", "")
    assert router.engine_key(backend, fleet) == group_key
    model = next(m for m in fleet[host]["fleet_models"] if m["name"] == backend["servers"][0]["model"])
    model["secret_env"] = {**(model.get("secret_env") or {}), "VLLM_API_KEY": "own-key-of-the-model-0123"}
    assert router.engine_key(backend, fleet) == "own-key-of-the-model-0123"
    # Two servers of one model, one with its own key: refused where teams have keys.
    fleet["nvidia-02"] = copy.deepcopy(fleet[host]) | {"ansible_host": "192.0.2.42"}
    next(m for m in fleet["nvidia-02"]["fleet_models"] if m["name"] == model["name"])["secret_env"] = {}
    teams = {"r": router_host([{"name": "gpt-oss-20b", "port": 9000}],
                              router_api_keys=[{"name": "a", "key": "x" * 20}])}
    assert any("serve it with different engine keys" in p and "nvidia-02" in p for p in router_problems(teams, fleet))
    # A team key equal to a model's own engine key would open that engine directly: refused too.
    teams["r"]["router_api_keys"] = [{"name": "a", "key": "own-key-of-the-model-0123"}]
    assert any("is the engines' own key" in p for p in router_problems(teams, fleet))


def test_page_config_names_each_model_its_version_prices_and_replicas():
    fleet = listening(example_hosts())
    backends = router.backends([{"name": "gpt-oss-20b", "port": 9000, "price_input_per_1k": 0.002,
                                 "price_output_per_1k": 0.006}], fleet)
    config = router.page_config(backends, fleet, "vllm-fleet", "CNY", ["写一封辞职信"], {"nvidia-01": 9100})
    (model,) = config["models"]
    # The first replica's source (metax-01 fetches MetaX's BF16 checkpoint of the model).
    assert model["version"] == "unsloth/gpt-oss-20b-BF16" and model["path"] == "models/gpt-oss-20b"
    assert (model["price_input_per_1k"], model["price_output_per_1k"]) == (0.002, 0.006)
    assert [r["node"] for r in model["replicas"]] == ["metax-01", "nvidia-01"]
    assert model["replicas"][1] == {"node": "nvidia-01", "metrics": "fleet/nvidia-01/gpt-oss-20b/metrics",
                                    "node_metrics": "fleet/nvidia-01/node/metrics"}
    assert "node_metrics" not in model["replicas"][0]  # no exporter known for it
    assert config["presets"] == ["写一封辞职信"]
    upstreams = router.page_upstreams(backends, {"nvidia-01": 9100})
    assert {"path": "/fleet/nvidia-01/gpt-oss-20b/metrics", "url": "http://192.0.2.41:8000/metrics"} in upstreams
    assert {"path": "/fleet/nvidia-01/node/metrics", "url": "http://192.0.2.41:9100/metrics"} in upstreams
    assert not any(u["path"] == "/fleet/metax-01/node/metrics" for u in upstreams)


@pytest.mark.ansible
def test_page_site_proxies_each_endpoint_unbuffered(tmp_path):
    text = _render(tmp_path, {"router_models": POLICIES, "router_page_port": 9400},
                   "etc/nginx/sites-enabled/vllm-fleet-chat.conf.j2")
    assert "listen 127.0.0.1:9400;" in text
    block = text[text.index("location /models/gpt-oss-20b/"):]
    block = block[:block.index("}")]
    assert "proxy_pass http://127.0.0.1:9000/;" in block and "proxy_buffering off;" in block
    assert "proxy_read_timeout 600s;" in block
    assert "location = /fleet/nvidia-01/gpt-oss-20b/metrics" in text
    assert "frame-ancestors 'none'" in text
    if shutil.which("nginx"):
        conf = tmp_path / "nginx.conf"
        conf.write_text("events {}\nhttp { include %s; }\n" % (tmp_path / "rendered"))
        check = subprocess.run(["nginx", "-t", "-q", "-c", str(conf)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(("listen", "local", "url", "nginx"), [
    ("0.0.0.0", "127.0.0.1", "127.0.0.1", "9400"),
    ("*", "127.0.0.1", "127.0.0.1", "9400"),
    ("", "127.0.0.1", "127.0.0.1", "9400"),
    ("::", "::1", "[::1]", "[::]:9400"),
    ("[::]", "::1", "[::1]", "[::]:9400"),
    ("127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1:9400"),
    ("192.0.2.10", "192.0.2.10", "192.0.2.10", "192.0.2.10:9400"),
    ("2001:db8::10", "2001:db8::10", "[2001:db8::10]", "[2001:db8::10]:9400"),
    ("[2001:db8::10]", "2001:db8::10", "[2001:db8::10]", "[2001:db8::10]:9400"),
])
def test_a_listen_address_as_the_host_itself_reaches_it(listen, local, url, nginx):
    """One rule for every wildcard (vllm_fleet.models.local_address, filter fleet_local_address):
    the router's endpoints, nginx's upstreams and listen, Prometheus and the node exporter."""
    from vllm_fleet.models import local_address

    assert (local_address(listen), local_address(listen, url=True), router.nginx_listen(listen, 9400)) \
        == (local, url, nginx)


@pytest.mark.parametrize(("listen", "upstream", "bind"), [("0.0.0.0", "127.0.0.1:9000", "listen 9400;"),
                                                          ("::", "[::1]:9000", "listen [::]:9400;")])
@pytest.mark.ansible
def test_page_site_on_a_wildcard_reaches_the_endpoints_on_loopback(tmp_path, listen, upstream, bind):
    text = _render(tmp_path, {"router_models": POLICIES, "router_page_port": 9400, "router_listen_address": listen},
                   "etc/nginx/sites-enabled/vllm-fleet-chat.conf.j2")
    assert bind in text and f"proxy_pass http://{upstream}/;" in text


def test_the_role_spec_offers_exactly_the_routers_policies():
    """The argument spec's choices (YAML, so a literal list) are vllm_fleet.router's POLICIES."""
    spec = yaml.safe_load((ROOT / "roles/services/router/meta/argument_specs.yml").read_text())
    choices = spec["argument_specs"]["main"]["options"]["router_models"]["options"]["policy"]["choices"]
    assert sorted(choices) == sorted(router.POLICIES)


def test_the_memo_of_served_models_keys_on_every_variable_they_are_resolved_from():
    """models.resolved_once keys a node's models on the variables node_models reads (NODE_INPUTS):
    one read that is not among them would serve a stale answer for a changed variable."""
    class Recording(dict):
        read: set[str] = set()

        def get(self, key, default=None):
            Recording.read.add(key)
            return super().get(key, default)

        def __getitem__(self, key):
            Recording.read.add(key)
            return super().__getitem__(key)

    host_vars = example_hosts()["nvidia-01"]
    plain = router.served_models(host_vars, "nvidia-01")
    router.served_models(Recording(host_vars), "nvidia-01")
    assert plain and Recording.read <= set(models.NODE_INPUTS), Recording.read - set(models.NODE_INPUTS)
    with models.resolved_once():
        first = router.served_models(host_vars, "nvidia-01")
        assert router.served_models(dict(host_vars), "nvidia-01") == first == plain
        changed = {**host_vars, "fleet_serve_base_port": 9100}
        assert router.served_models(changed, "nvidia-01")[0]["port"] != first[0]["port"]
