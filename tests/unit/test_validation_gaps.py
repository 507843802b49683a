"""Gaps of issue 11 closed in validation: each broken inventory is refused with exit 4 and a
message naming host, variable, value and what is accepted.

Unit tests call vllm_fleet.validation directly; `test_broken_copy_of_the_example_*` copy
inventories/example to a temporary directory, break it and run playbooks/validate.yml
through the API, as `vllm-fleet provision` would (validation runs on the controller only,
so no node is needed: ~2 s).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE
from vllm_fleet import api, cli
from vllm_fleet.models import resolve_models
from vllm_fleet.validation import validate_hosts


def problems_for(hosts, host):
    return [p for p in validate_hosts(hosts) if p.startswith(f"host {host}:")]


# ------------------------------------------------------------------ vendor groups

def test_host_in_two_vendor_groups_is_refused(example):
    example["nvidia-01"]["group_names"] = ["fleet", "nvidia-nodes", "metax-nodes"]
    (p,) = problems_for(example, "nvidia-01")
    assert "metax-nodes and nvidia-nodes" in p and "one <vendor>-nodes group" in p


def test_host_in_one_vendor_group_is_fine(example):
    example["nvidia-01"]["group_names"] = ["fleet", "nvidia-nodes", "gpu-rack-3"]
    assert problems_for(example, "nvidia-01") == []


# ------------------------------------------------------------------ ports

def test_model_on_the_nodes_own_ssh_port_is_refused(example):
    example["nvidia-01"]["ansible_port"] = 2222
    example["nvidia-01"]["fleet_models"][0]["port"] = 2222
    (p,) = problems_for(example, "nvidia-01")
    assert "model gpt-oss-20b: port 2222 is the node's own SSH port (ansible_port = 2222)" in p, p


def test_model_on_a_privileged_port_is_refused(example):
    example["nvidia-01"]["fleet_models"][0]["port"] = 80
    (p,) = problems_for(example, "nvidia-01")
    assert "model gpt-oss-20b: port 80 is a privileged port (below 1024)" in p and "1024-65535" in p


def test_base_port_below_1024_is_refused_through_the_models_it_gives(example):
    example["cpu-01"]["fleet_serve_base_port"] = 443
    problems = problems_for(example, "cpu-01")
    # The base port itself (a port of its class), and each model it gives a port.
    assert "host cpu-01: fleet_serve_base_port = 443 (an integer): is out of range; accepted: a TCP port" in problems[0]
    assert problems[1:] and all("privileged port" in p for p in problems[1:]), problems


# ------------------------------------------------------------------ paths

@pytest.mark.parametrize("path", ["/home/models/../../etc", "/home/models/x/.."])
def test_dotdot_in_a_model_path_is_refused(example, path):
    example["nvidia-01"]["fleet_models"][0]["path"] = path
    (p,) = problems_for(example, "nvidia-01")
    assert f"fleet_models[0].path = {path!r} (a string): has '..'" in p


def test_dotdot_in_a_fleet_dir_is_refused(example):
    example["cpu-01"]["fleet_base_dir"] = "/opt/vllm-fleet/../../usr"
    (p,) = problems_for(example, "cpu-01")
    assert "fleet_base_dir = '/opt/vllm-fleet/../../usr' (a string): has '..'" in p


@pytest.mark.parametrize("var", ["fleet_models_dir", "fleet_base_dir"])
@pytest.mark.parametrize("value", ["/", "/tmp", "/etc", "/usr", "/var", "/home", "/root", "/opt", "/bin", "/usr/local"])
def test_fleet_dir_set_to_a_system_directory_is_refused(example, var, value):
    example["cpu-01"][var] = value
    problems = problems_for(example, "cpu-01")
    assert f"host cpu-01: {var} = {value!r} (a string): is a system directory" in problems[0]
    # A model below a system directory taken as the models' or the fleet's is refused with it.
    assert all("system directory" in p or "overlaps" in p for p in problems), problems


@pytest.mark.parametrize("value", ["/etc/", "/srv//models", "/srv/./models", "srv/models"])
def test_a_path_not_in_normal_form_is_refused(example, value):
    example["cpu-01"]["fleet_models_dir"] = value
    problems = problems_for(example, "cpu-01")
    assert any(f"fleet_models_dir = {value!r} (a string): is not" in p for p in problems), problems


@pytest.mark.parametrize("value", ["/etc/vllm", "/usr/lib/models", "/proc/1", "/boot/x", "/root/.ssh/k"])
def test_a_path_inside_a_system_tree_is_refused(example, value):
    example["nvidia-01"]["fleet_models"][0]["path"] = value
    (p,) = problems_for(example, "nvidia-01")
    assert f"fleet_models[0].path = {value!r} (a string): lies inside" in p


def test_the_seeds_models_dir_stays_valid(example):
    for hv in example.values():
        assert hv["fleet_models_dir"] == "/home/models"
    assert validate_hosts(example) == []


# ------------------------------------------------------------------ service user

@pytest.mark.parametrize("user", ["root", "daemon", "nobody", "www-data", "systemd-network"])
def test_service_user_root_or_system_account_is_refused(example, user):
    example["cpu-01"]["fleet_service_user"] = user
    (p,) = problems_for(example, "cpu-01")
    assert f"fleet_service_user = {user!r} (a string): is" in p and "e.g. 'vllm'" in p


def test_preflight_refuses_an_existing_login_user():
    """roles/stages/preflight reads the account before roles/stages/node_base makes it a nologin one."""
    main = yaml.safe_load((Path("roles/stages/preflight/tasks/main.yml")).read_text())
    files = [t["ansible.builtin.import_tasks"] for t in main]
    assert files.index("user.yml") < files.index("checks.yml")
    tasks = yaml.safe_load(Path("roles/stages/preflight/tasks/user.yml").read_text())
    assert tasks[0]["ansible.builtin.getent"]["key"] == "{{ fleet_service_user }}"
    assert "nologin" in tasks[1]["ansible.builtin.assert"]["that"]
    user = yaml.safe_load(Path("roles/stages/node_base/tasks/user.yml").read_text())[1]["ansible.builtin.user"]
    assert user["shell"] == "/usr/sbin/nologin"  # what preflight protects a login account from


# ------------------------------------------------------------------ blame and secrets

def test_fleet_serve_env_problem_is_blamed_on_fleet_serve_env():
    models = [{"name": "a", "kind": "chat", "path": "/m/a"}, {"name": "b", "kind": "chat", "path": "/m/b"}]
    _, problems = resolve_models(models, {"vendor": "nvidia", "model": "x", "count": 2},
                                 serve_env={"BAD": "two words "})
    assert len(problems) == 1
    assert problems[0].startswith("fleet_serve_env: environment variable BAD")
    assert "fleet_models" not in problems[0]


def test_model_env_problem_is_still_blamed_on_the_model():
    models = [{"name": "a", "kind": "chat", "path": "/m/a", "env": {"BAD": 'q"uote'}}]
    _, problems = resolve_models(models, {"vendor": "nvidia", "model": "x", "count": 1}, serve_env={"OK": "1"})
    assert problems == [p for p in problems if p.startswith("fleet_models[0] (a).env: environment variable BAD")]
    assert len(problems) == 1


SECRET = "hf_SuperSecretToken123"


def test_secret_of_the_wrong_type_is_masked(example):
    example["cpu-01"]["model_fetch_tokens"] = SECRET
    (p,) = problems_for(example, "cpu-01")
    assert "model_fetch_tokens" in p and SECRET not in p and "********" in p


@pytest.mark.parametrize("name", ["fleet_hub_token", "model_fetch_api_key", "fleet_db_password", "fleet_secret"])
def test_any_variable_named_like_a_secret_is_masked(example, name):
    example["cpu-01"][name] = SECRET
    problems = problems_for(example, "cpu-01")
    assert problems and all(SECRET not in p for p in problems)


def test_secret_in_a_model_env_is_masked(example):
    example["cpu-01"]["fleet_models"][0]["env"] = {"HF_TOKEN": SECRET + " "}
    problems = problems_for(example, "cpu-01")
    assert problems and all(SECRET not in p for p in problems)


# ------------------------------------------------------------------ YAML syntax

@pytest.fixture
def inventory(tmp_path):
    dest = tmp_path / "inv"
    shutil.copytree(EXAMPLE, dest)
    return dest


def test_yaml_syntax_error_names_file_line_and_column(inventory, capsys):
    (inventory / "group_vars" / "cpu-nodes" / "serve.yml").write_text("---\nfleet_serve_env:\n  A: [1, 2\nB: 3\n")
    result = api.provision(str(inventory))
    assert result.exit_code == api.EXIT_INVALID_INVENTORY
    (p,) = result.problems
    assert p.startswith("inventory file group_vars/cpu-nodes/serve.yml, line 4, column 2: YAML syntax error")
    assert cli.main(["provision", "-i", str(inventory), "--quiet"]) == 4
    out = capsys.readouterr().out
    assert "group_vars/cpu-nodes/serve.yml, line 4, column 2" in out and "artifacts" not in out


def test_vault_files_and_tags_are_not_syntax_errors(inventory):
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "cpu-01.yml").write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465666768\n")
    (inventory / "group_vars" / "all" / "vault.yml").write_text(
        "---\nmodel_fetch_tokens:\n  huggingface: !vault |\n    $ANSIBLE_VAULT;1.1;AES256\n    616263\n")
    assert api.inventory_syntax_problems(inventory) == []


def test_a_rollout_setting_in_an_inventory_file_is_refused(inventory):
    """Play keywords (serial, max_fail_percentage) never see inventory variables: set there,
    they would be ignored, so the run stops before it starts."""
    (inventory / "group_vars" / "nvidia-nodes" / "rollout.yml").write_text("---\nfleet_rollout_serial: 1\n")
    hosts = inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace(
        "    nvidia-01:\n", "    nvidia-01:\n              fleet_rollout_max_fail_percentage: 5\n", 1))
    problems = api.inventory_syntax_problems(inventory)
    assert [p.split(":")[0] for p in problems] == [
        "inventory file hosts.yml sets fleet_rollout_max_fail_percentage",
        "inventory file group_vars/nvidia-nodes/rollout.yml sets fleet_rollout_serial"], problems
    assert "vllm-fleet rollout --serial" in problems[1]
    result = api.rollout(str(inventory))
    assert result.exit_code == api.EXIT_INVALID_INVENTORY and result.problems == problems


# ------------------------------------------------------------------ through the playbook

def _edit(path: Path, fn):
    doc = yaml.safe_load(path.read_text())
    fn(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.ansible
def test_broken_copy_of_the_example_is_refused_with_every_problem(inventory):
    gv = inventory / "group_vars"
    # A host in two vendor groups (hosts.yml), with the vendor-group settings of both.
    _edit(inventory / "hosts.yml",
          lambda d: d["all"]["children"]["fleet"]["children"]["metax-nodes"]["hosts"].update({"nvidia-01": None}))
    # Ports: the node's SSH port, and a privileged one.
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "musa-01.yml").write_text(yaml.safe_dump({
        "ansible_port": 2201, "fleet_serve_base_port": 2201, "fleet_service_user": "root",
        "model_fetch_tokens": "{{ planted }}"}))
    _edit(gv / "ascend-nodes" / "models.yml",
          lambda d: d["fleet_models"][0].update({"port": 443, "path": "/home/models/../etc"}))
    _edit(gv / "ascend-nodes" / "serve.yml", lambda d: d["fleet_serve_env"].update({"SPACED": "a b "}))
    (gv / "metax-nodes" / "dirs.yml").write_text("---\nfleet_models_dir: /tmp\nfleet_base_dir: /\n")
    # A secret of the wrong shape, given as secrets are (in clear in a file it would be refused
    # before validation: test_inventory_files.py).
    result = api.run_playbook("playbooks/validate.yml", str(inventory), secrets={"planted": SECRET})
    assert result.exit_code == api.EXIT_INVALID_INVENTORY
    text = "\n".join(result.problems)
    assert "host nvidia-01: is in the vendor groups metax-nodes and nvidia-nodes" in text
    assert "host musa-01: model " in text and "is the node's own SSH port (ansible_port = 2201)" in text
    assert "host musa-01: fleet_service_user = 'root' (a string): is root" in text
    assert "host musa-01: model_fetch_tokens = ******** (a string)" in text
    assert "host ascend-01: model gpt-oss-120b: port 443 is a privileged port" in text
    assert "host ascend-01: fleet_models[0].path = '/home/models/../etc' (a string): has '..'" in text
    assert "host ascend-01: fleet_serve_env: environment variable SPACED" in text
    assert "host metax-01: fleet_models_dir = '/tmp' (a string): is a system directory" in text
    assert "host metax-01: fleet_base_dir = '/' (a string): is a system directory" in text
    assert SECRET not in str(result) and SECRET not in str(result.to_dict())
    # The summary marks the hosts with problems, not the first host as failed.
    status = {h: r.status for h, r in result.hosts.items()}
    assert status == {"ascend-01": "invalid", "metax-01": "invalid", "musa-01": "invalid",
                      "nvidia-01": "invalid", "cpu-01": "valid"}
    assert result.to_dict()["invalid_hosts"] == ["ascend-01", "metax-01", "musa-01", "nvidia-01"]
    assert "cpu-01     valid" in str(result)


# ------------------------------------------------------------------ one option, one spelling

def test_an_option_spelled_with_hyphens_once_is_legal(example):
    serve = example["nvidia-01"]["fleet_models"][0]["serve"]
    serve["max-model-len"] = serve.pop("max_model_len", 8192)
    assert problems_for(example, "nvidia-01") == []


@pytest.mark.parametrize("first, second", [("max_model_len", "max-model-len"), ("tensor_parallel_size", "tp"),
                                           ("max_model_len", "--max-model-len")])
def test_one_option_under_two_spellings_is_refused(example, first, second):
    serve = example["nvidia-01"]["fleet_models"][0]["serve"]
    serve[first], serve[second] = serve.get(first, 2), serve.get(first, 2)
    problems = problems_for(example, "nvidia-01")
    assert any(f"fleet_models[0].serve.{second} = " in p and "again (as " + repr(first) in p
               for p in problems), problems


# ------------------------------------------------------------------ formats that HAProxy, Prometheus and systemd parse

@pytest.mark.parametrize("name, value, says", [
    ("monitoring_prometheus_listen_address", "0.0.0.0 x", "is not an IP address"),
    ("router_listen_address", "localhost", "is not an IP address"),
    ("router_timeout_client", "10 minutes", "is not a duration"),
    ("monitoring_scrape_interval", "15s; x", "is not a duration"),
    ("monitoring_retention", "forever", "is not a duration"),
    ("router_stats_socket_mode", "rw-rw----", "is not a file mode"),
    ("download_mode", "0999", "is not a file mode"),
])
def test_a_value_of_the_wrong_format_is_refused(name, value, says):
    from vllm_fleet.validation.formats import format_problems

    (p,) = format_problems({name: value})
    assert p.startswith(f"{name} = {value!r} (a string): {says}; accepted: "), p


@pytest.mark.parametrize("name, value", [
    ("router_listen_address", "::"), ("router_timeout_client", "1h30m"), ("monitoring_retention", "15d"),
    ("router_check_interval", "500ms"), ("router_stats_socket_mode", "0660"), ("download_mode", "644"),
])
def test_a_value_of_the_right_format_is_legal(name, value):
    from vllm_fleet.validation.formats import format_problems

    assert format_problems({name: value}) == []


def test_a_launch_profile_no_model_uses_is_judged_like_a_model_of_its_kind(example):
    example["nvidia-01"].setdefault("fleet_launch_profiles", {})["draft"] = {"serve": {"max_modle_len": 10}}
    (p,) = problems_for(example, "nvidia-01")
    assert "model (launch profile draft): serve.max_modle_len = 10" in p and "did you mean 'max_model_len'?" in p


def test_a_model_at_the_models_directory_itself_is_refused(example):
    example["cpu-01"]["fleet_models"][0]["path"] = example["cpu-01"]["fleet_models_dir"]
    problems = problems_for(example, "cpu-01")
    assert any("path = '/home/models' is fleet_models_dir = '/home/models'" in p for p in problems), problems


def test_tokens_by_hub_are_a_mapping_of_keys(example):
    example["cpu-01"]["model_fetch_tokens"] = {"modelscope": "ms-token-0123456789abcdef"}
    assert problems_for(example, "cpu-01") == []
    example["cpu-01"]["model_fetch_tokens"] = {"modelscope": "short"}
    (p,) = problems_for(example, "cpu-01")
    assert p.startswith("host cpu-01: model_fetch_tokens.modelscope = ******** (a string): is 5 characters long"), p
