"""One validation on every route (issue 33): a bad value is refused whichever file, flag or
template brings it, and whether the run is started with plain `ansible-playbook` or through
vllm-fleet's API (ansible-runner), with the same message.

The defects are not hand-picked: one stopped mutation of each class of the fuzzer's catalogue
(tests/fuzz_inventory.py) on a top-level variable of a fleet node, each of another variable;
all of them are delivered together through each route (a group_vars file, host_vars, the
inventory file's host entry, extra vars, a template naming a variable that holds the value,
a `!vault` value), and each route's inventory goes through both entry points. The rules of
the classes themselves (exact numbers, play keywords, render failures, secrets by reference)
are tested below without Ansible.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests import fuzz_inventory as fz
from tests.conftest import GROUP_OF, ansible_playbook
from vllm_fleet import validation
from vllm_fleet.validation import files, play_keywords, types
from vllm_fleet.validation.schema import property_problems

VAULT_PASSWORD = "routes-vault-password"
#: For the runs of site.yml: should validation ever let one through, its first connection goes to
#: a closed port on loopback, never to the example's addresses.
NOWHERE = ["-e", '{"ansible_host": "127.0.0.1", "ansible_port": 9}']
ROUTES = ("group_vars", "host_vars", "inventory_vars", "extra_vars", "template", "vault")
#: The classes whose mutations are delivered through every route.
CLASSES = ("wrong_type", "control_chars", "numbers", "ports", "paths", "secrets", "accounts", "names")


# ------------------------------------------------------------------ the rules, without Ansible

@pytest.mark.parametrize("value", [9001.0, 8000.5, float("nan"), float("inf"), True, "9001"])
def test_a_port_is_an_exact_integer(value):
    doc = {"fleet_serve_base_port": value}
    problems = property_problems(doc)
    assert problems and all("fleet_serve_base_port" in p for p in problems), problems


def test_a_whole_float_says_what_to_write():
    (problem,) = property_problems({"fleet_serve_base_port": 9000.0})
    assert "write 9000" in problem


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_no_nan_or_infinity_anywhere(value):
    # Wherever it sits, whatever its name: a serve flag, an env value, a role variable.
    host_vars = {"fleet_models": [{"name": "m", "serve": {"gpu_memory_utilization": value}}],
                 "health_agent_interval_whatever": value}
    problems = types.non_finite_problems(host_vars)
    assert {p.split(" = ")[0] for p in problems} == {"fleet_models[0].serve.gpu_memory_utilization",
                                                    "health_agent_interval_whatever"}


@pytest.mark.parametrize("value", [0, -1, "0", "-1", "0%", "150%", "abc", 2.5, True, [], [1, 0], ["25%", "0"]])
def test_a_serial_that_is_no_rollout_is_refused(value):
    problems = play_keywords.serial_problems(value)
    assert problems and all(p.startswith("fleet_rollout_serial") for p in problems), problems


@pytest.mark.parametrize("value", [1, "1", 3, "25%", "100%", [1, "25%", "100%"]])
def test_every_form_of_a_rollout_serial_is_accepted(value):
    assert play_keywords.serial_problems(value) == []


@pytest.mark.parametrize("value,ok", [(0, True), ("50", True), ("50%", True), (12.5, True), (101, False),
                                      ("-1", False), ("half", False), (float("nan"), False), (True, False)])
def test_max_fail_percentage_in_every_form_ansible_takes(value, ok):
    assert (play_keywords.max_fail_percentage_problems(value) == []) is ok


def test_the_cli_and_validation_share_the_serial_rule():
    from vllm_fleet import api

    for bad in ("0", "-1", "0%", "101%"):
        with pytest.raises(ValueError, match="every node at once"):
            api.rollout("inventories/example", serial=bad)


def test_extra_vars_of_play_keywords_are_judged_once(example_hosts):
    hosts = {h: {**v, "fleet_rollout_serial": "0"} for h, v in example_hosts.items()}
    problems = validation.validate_inventory(hosts, sorted(hosts))
    assert [p for p in problems if "fleet_rollout_serial" in p] == [problems[0]]
    assert problems[0].startswith("extra var fleet_rollout_serial = '0'")


def test_a_variable_that_cannot_be_rendered_is_a_refusal_naming_host_and_variable(example_hosts):
    unrendered = {"nvidia-01": {"fleet_models_dir": "'models_root' is undefined (did you mean 'model_root'?)"}}
    hosts = {h: v for h, v in example_hosts.items()}
    problems = validation.validate_inventory(hosts, sorted(hosts), unrendered=unrendered)
    assert problems[0].startswith("host nvidia-01: fleet_models_dir cannot be rendered: 'models_root' is undefined")
    # A host outside the run is not this run's refusal.
    assert validation.validate_inventory(hosts, ["cpu-01"], unrendered=unrendered) == []


@pytest.mark.ansible
def test_a_template_reading_hostvars_is_refused_saying_what_to_write(tmp_path):
    """Ansible renders a host's variables without `hostvars` when they are read through it (a span's
    members read each other's fleet_cluster_address so): the refusal says to write `{{ ansible_host }}`."""
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "group_vars" / "all" / "x.yml").write_text(
        "fleet_cluster_address: \"{{ hostvars[inventory_hostname]['ansible_host'] }}\"\n")
    proc = ansible_playbook("-i", str(inv), "playbooks/validate.yml")
    played = _problems_of(proc.stdout + proc.stderr)
    assert proc.returncode == 4 and any(
        p.startswith("host nvidia-01: fleet_cluster_address cannot be rendered: 'hostvars' is undefined")
        and "`{{ ansible_host }}`" in p for p in played), played
    # What it says to write is accepted.
    (inv / "group_vars" / "all" / "x.yml").write_text("fleet_cluster_address: \"{{ ansible_host }}\"\n")
    assert ansible_playbook("-i", str(inv), "playbooks/validate.yml").returncode == 0


def _inventory_with(tmp_path: Path, text: str, where: str = "group_vars/nvidia-nodes/serve.yml") -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / where).parent.mkdir(parents=True, exist_ok=True)
    with (inv / where).open("a") as fh:
        fh.write(text)
    return inv


def test_a_secret_naming_a_clear_variable_is_judged_by_it(tmp_path):
    inv = _inventory_with(tmp_path, 'nv_serving: sk-clear-0123456789abcdef\nfleet_serve_api_key: "{{ nv_ref }}"\n'
                                    'nv_ref: "{{ nv_serving | trim }}"\n')
    (problem,) = files.file_problems(inv)
    assert "fleet_serve_api_key is a secret that names nv_serving, which is written in clear" in problem
    assert "sk-clear" not in problem


def test_a_secret_naming_a_variable_given_at_run_time_or_vaulted_is_accepted(tmp_path):
    inv = _inventory_with(tmp_path, 'fleet_serve_api_key: "{{ nv_serving }}"\nother_key: !vault |\n'
                                    '  $ANSIBLE_VAULT;1.1;AES256\n  6162\nfleet_other_token: "{{ other_key }}"\n')
    assert files.file_problems(inv) == []


# ------------------------------------------------------------------ every route, both entry points

@pytest.fixture(scope="module")
def example_hosts(tmp_path_factory) -> dict[str, dict]:
    return fz.load_inventory(fz.EXAMPLE)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    path = fz.write_base_inventory(tmp_path_factory.mktemp("routes") / "base")
    return path, fz.load_inventory(path)


def _defects(base_vars: dict[str, dict]) -> list[fz.Mutation]:
    """One stopped mutation per class, each a top-level scalar of a fleet node, no two of the same
    variable, spread over the nodes, in the catalogue's order (deterministic)."""
    chosen: list[fz.Mutation] = []
    used: set[str] = set()
    # A variable the inventory file sets on the host itself would win over a group_vars file:
    # that is a precedence surprise, not a route (the host's address, its SSH port).
    hosts_yml = yaml.safe_load((fz.EXAMPLE / "hosts.yml").read_text())["all"]["children"]["fleet"]["children"]
    host_entries = {h: v or {} for body in hosts_yml.values() for h, v in (body.get("hosts") or {}).items()}
    for cls in CLASSES:
        for m in fz.generate(base_vars):
            if (m.cls != cls or len(m.path) != 1 or m.extra or m.host not in GROUP_OF or m.path[0] in used
                    or m.path[0] in host_entries.get(m.host, {})
                    or isinstance(m.value, (list, dict)) or m.value is None
                    or (isinstance(m.value, float) and not math.isfinite(m.value))):
                continue
            if fz.judge(base_vars, m).verdict != "stopped":
                continue
            chosen.append(m)
            used.add(m.path[0])
            break
    return chosen


@pytest.fixture(scope="module")
def defects(base) -> list[fz.Mutation]:
    found = _defects(base[1])
    assert {m.cls for m in found} == set(CLASSES), found
    return found


def _vault(value: str, password_file: Path) -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    cipher = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))]).encrypt(value)
    return cipher.decode()


class VaultValue(str):
    """A string written as `!vault |` by _dump."""


def _dump(doc: dict) -> str:
    dumper = yaml.SafeDumper
    dumper.add_representer(VaultValue, lambda d, v: d.represent_scalar("!vault", str(v), style="|"))
    return yaml.dump(doc, Dumper=dumper, sort_keys=False, allow_unicode=False)


def write_route(base_dir: Path, defects: list[fz.Mutation], route: str, dest: Path) -> list[str]:
    """The base inventory at `dest` with every defect delivered by `route`; returns the
    ansible-playbook arguments the route needs (extra vars)."""
    shutil.copytree(base_dir, dest)
    password_file = dest.parent / "vault-password"
    password_file.write_text(VAULT_PASSWORD + "\n")
    # The base's own API key by reference, its value given at run time (as --secrets does).
    secrets: dict = {}
    clear = dest / "group_vars" / "fleet" / "fuzz.yml"
    clear.write_text(yaml.safe_dump(fz._by_reference(yaml.safe_load(clear.read_text()), secrets)))
    (dest.parent / "secrets.yml").write_text(yaml.safe_dump(secrets))
    args: list[str] = ["-e", f"@{dest.parent / 'secrets.yml'}"]
    per_host: dict[str, dict] = {}
    extra: dict = {}
    for i, m in enumerate(defects):
        name, value = m.path[0], m.value
        if route == "extra_vars":
            extra[name] = value
        elif route == "template":
            per_host.setdefault(m.host, {})[f"routes_value_{i}"] = value
            per_host[m.host][name] = f"{{{{ routes_value_{i} }}}}"
        elif route == "vault" and isinstance(value, str):
            per_host.setdefault(m.host, {})[name] = VaultValue(_vault(value, password_file))
        else:
            per_host.setdefault(m.host, {})[name] = value
    for host, variables in per_host.items():
        if route == "group_vars":
            (dest / "group_vars" / GROUP_OF[host] / "zz-routes.yml").write_text(_dump(variables))
        elif route == "inventory_vars":
            doc = yaml.safe_load((dest / "hosts.yml").read_text())
            doc["all"]["children"]["fleet"]["children"][GROUP_OF[host]]["hosts"][host].update(variables)
            (dest / "hosts.yml").write_text(_dump(doc))
        else:
            (dest / "host_vars").mkdir(exist_ok=True)
            (dest / "host_vars" / f"{host}.yml").write_text(_dump(variables))
    if extra:
        (dest.parent / "extra.yml").write_text(_dump(extra))
        args += ["-e", f"@{dest.parent / 'extra.yml'}"]
    return args


def _problems_of(output: str) -> list[str]:
    """The problems of a refusal (the verdict play's error, the last listing), in ansible-playbook's output."""
    block = output.rsplit("The inventory is invalid", 1)[1].split("Origin:", 1)[0] if "The inventory is invalid" \
        in output else ""
    return [line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")]


def _delivered(defects: list[fz.Mutation], route: str) -> list[fz.Mutation]:
    return [m for m in defects if route != "vault" or isinstance(m.value, str)]


@pytest.mark.ansible
@pytest.mark.parametrize("route", ROUTES)
def test_every_class_is_refused_on_every_route_by_both_entry_points(base, defects, route, tmp_path):
    from vllm_fleet import api

    base_dir, base_vars = base
    inventory = tmp_path / "inv"
    args = write_route(base_dir, defects, route, inventory)
    env = {"ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "vault-password")}
    delivered = _delivered(defects, route)
    assert len(delivered) >= (3 if route == "vault" else len(CLASSES))
    secrets = fz.secrets_of(base_vars) | {str(m.value) for m in delivered
                                          if m.cls == "secrets" and len(str(m.value)) > 3}

    proc = ansible_playbook("-i", str(inventory), "playbooks/validate.yml", *args, env=env)
    output = proc.stdout + proc.stderr
    played = _problems_of(output)
    # A refused value stops the run at the verdict play's `hosts:`, exit 4 as vllm-fleet's (docs/usage.md).
    assert proc.returncode == 4 and played, output[-3000:]
    assert not re.search(r"^(fatal|failed): ", output, re.M), output[-3000:]
    for m in delivered:
        assert any(fz.names_variable(p, m.accepted_names()) for p in played), (route, m.label, played)
    assert not fz.leaks(played, secrets), (route, fz.leaks(played, secrets))
    assert "fleet_inventory_problems" not in output  # a refusal, never the filter's crash

    extra_file = tmp_path / "extra.yml"
    extravars = yaml.safe_load(extra_file.read_text()) if extra_file.exists() else None
    given = yaml.safe_load((tmp_path / "secrets.yml").read_text())
    previous = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    os.environ.update(env)
    try:
        result = api.run_playbook("playbooks/validate.yml", inventory, extravars=extravars, secrets=given)
    finally:
        os.environ.pop("ANSIBLE_VAULT_PASSWORD_FILE")
        if previous is not None:
            os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = previous
    # Refused, before the run or by its validation play: vllm-fleet exits 4 (RunResult.exit_code).
    assert result.invalid_inventory and result.exit_code == 4, (result.status, result.rc, result.failures)
    assert not fz.leaks(result.problems, secrets)
    # One validation: the CLI's sentences are the playbook's (where the CLI refuses before the run,
    # on the inventory's files, the playbook says the same and what its hosts' values add).
    assert result.problems and set(result.problems) <= set(played), set(result.problems) - set(played)
    if set(result.problems) == set(played):
        for m in delivered:
            assert any(fz.names_variable(p, m.accepted_names()) for p in result.problems), (route, m.label)


@pytest.mark.ansible
def test_file_checks_refuse_the_same_inventories_on_both_entry_points(tmp_path):
    from vllm_fleet import api

    inv = _inventory_with(tmp_path, "\nfleet_models: []\n", "group_vars/nvidia-nodes/models.yml")
    proc = ansible_playbook("-i", str(inv), "site.yml", "--tags", "report", "-l", "nvidia-01", "--check", *NOWHERE)
    played = _problems_of(proc.stdout + proc.stderr)
    assert any(re.search(r"key 'fleet_models' is given twice", p) for p in played), proc.stdout[-2000:]
    assert not re.search(r"^TASK \[(preflight|base|report)", proc.stdout, re.M)
    # The CLI refuses it before ansible-runner starts, with the sentence the playbook says.
    result = api.run_playbook("site.yml", inv, limit="nvidia-01", check=True)
    assert result.rc == 4 and result.problems and set(result.problems) <= set(played)


@pytest.mark.ansible
@pytest.mark.parametrize("selection", [["--skip-tags", "always"], ["--skip-tags", "validate,report"],
                                       ["--start-at-task", "Gather the facts preflight needs"]])
def test_no_selection_of_tasks_skips_validation(selection):
    proc = ansible_playbook("-i", str(fz.EXAMPLE), "site.yml", "--check", *selection, *NOWHERE)
    assert proc.returncode == 4  # the play's `hosts:` fails: Ansible's parser error (docs/usage.md)
    assert "would skip the validation of the inventory" in proc.stdout + proc.stderr
    assert "TASK [" not in proc.stdout


@pytest.mark.ansible
def test_legal_values_stay_legal_on_every_route(tmp_path):
    """The example through a template, its base port as an extra var, a rollout's documented -e."""
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "nvidia-01.yml").write_text(
        'site_models: /home/models\nfleet_models_dir: "{{ site_models }}"\n')
    proc = ansible_playbook("-i", str(inv), "playbooks/validate.yml", "-e", "fleet_rollout_serial=1",
                            "-e", "fleet_rollout_max_fail_percentage=50", "-e", '{"fleet_serve_base_port": 8100}')
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize("url", ["https://ghp_abcdefghij1234567890@github.internal/vllm.git",
                                 "https://hf_shortertoken@hf.internal/", "https://user:s3cr3tPw9@mirror.internal/simple",
                                 "https://mirror.internal/simple/?token=s3cr3tQuery9",
                                 "https://artifacts.internal/cann.run?X-Amz-Credential=AKIA1&X-Amz-Signature=s3cr3tSig9",
                                 "https://store.internal/m?sv=2024&sig=s3cr3tSas9", "https://hub.internal/#access_token=s3cr3tFrag9"])
def test_a_credential_anywhere_in_a_clear_url_is_refused_and_never_shown(example_hosts, url):
    hosts = {h: dict(v) for h, v in example_hosts.items()}
    hosts["nvidia-01"]["fleet_pip_index_url"] = url
    problems = validation.validate_inventory(hosts, ["nvidia-01"])
    assert any(p.startswith("host nvidia-01: fleet_pip_index_url = '(a URL with a credential") for p in problems)
    secret = re.search(r"s3cr3t\w+", url).group(0) if "s3cr3t" in url else \
        url.split("://", 1)[1].split("@", 1)[0].split(":")[-1]
    assert not any(secret in p for p in problems), problems


def test_a_plain_user_in_a_url_is_no_credential():
    from vllm_fleet.secrets import url_has_credentials

    assert not url_has_credentials("ssh://git@git.internal/vllm.git")
    # Nor is a query of no credential, whatever its words contain.
    assert not url_has_credentials("https://mirror.internal/simple/?author=me&monkey=1&tokenizer=o200k")


INI_HOSTS = """# The example's hosts.yml, as an INI inventory
[ascend-nodes]
ascend-01 ansible_host=192.0.2.11
[metax-nodes]
metax-01 ansible_host=192.0.2.21
[musa-nodes]
musa-01 ansible_host=192.0.2.31
[nvidia-nodes]
nvidia-01 ansible_host=192.0.2.41
[cpu-nodes]
cpu-01 ansible_host=192.0.2.51
[fleet:children]
ascend-nodes
metax-nodes
musa-nodes
nvidia-nodes
cpu-nodes
"""


def test_an_ini_form_of_the_example_is_no_yaml_to_judge(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "hosts.yml").unlink()
    (inv / "hosts").write_text(INI_HOSTS)
    assert files.file_problems(inv) == []
    (inv / "hosts").write_text("all:\n  hosts: [a, b\n")  # no INI: a YAML file that is broken
    assert any("YAML syntax error" in p for p in files.file_problems(inv))


@pytest.mark.ansible
def test_an_ini_form_of_the_example_is_valid(tmp_path):
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "hosts.yml").unlink()
    (inv / "hosts").write_text(INI_HOSTS)
    proc = ansible_playbook("-i", str(inv), "playbooks/validate.yml", "-l", "nvidia-01")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_run_surely_without_a_host_is_said_like_the_clis():
    groups = {"all": {"x1", "nvidia-01"}, "other": {"x1"}, "fleet": {"nvidia-01"}, "nvidia-nodes": {"nvidia-01"}}
    pattern = "fleet:router:monitoring"
    assert files.surely_no_hosts(groups, pattern, None, "inv") is None
    assert files.surely_no_hosts(groups, pattern, "nvidia-nodes", "inv") is None
    assert files.surely_no_hosts(groups, pattern, "nvidia*", "inv") is None  # only Ansible reads a wildcard
    assert files.surely_no_hosts(groups, pattern, "x1", "inv") == files.no_hosts_problem("inv", pattern, "x1", 1, 2)
    alone = {"all": {"x1"}, "other": {"x1"}}
    assert files.surely_no_hosts(alone, pattern, None, "inv") == files.no_hosts_problem("inv", pattern, None, 0, 1)


@pytest.mark.ansible
def test_plain_ansible_playbook_refuses_a_run_without_a_host(tmp_path):
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  children:\n    other:\n      hosts:\n        x1:\n"
                                   "          ansible_host: 127.0.0.1\n")
    proc = ansible_playbook("-i", str(inv), "site.yml", *NOWHERE)
    assert proc.returncode == 4 and "TASK [" not in proc.stdout
    assert "it has no host in the group(s) fleet, router, monitoring or mirror" in proc.stdout + proc.stderr


@pytest.mark.ansible
def test_a_syntax_check_without_hosts_still_passes(tmp_path):
    """ansible-lint runs --syntax-check on a fresh clone, where the default inventory (the lab's) does
    not exist: the hosts guard judges runs, not syntax checks."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "hosts.yml").write_text("all: {}\n")
    proc = ansible_playbook("-i", str(empty), "--syntax-check", "site.yml")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


# ------------------------------------------------------------------ the verdict: exit 4 on both entry points

@pytest.fixture
def verdict_filters(tmp_path, monkeypatch):
    """The filters that hand the validation play's verdict to the play after it, with this test's own
    directory as the run's temporary one (Ansible's DEFAULT_LOCAL_TMP)."""
    from ansible import constants as C  # noqa: N812
    from ansible import context

    from filter_plugins import fleet

    monkeypatch.setattr(C, "DEFAULT_LOCAL_TMP", str(tmp_path), raising=False)
    monkeypatch.setattr(context, "CLIARGS", {})
    return fleet, tmp_path


def test_a_verdict_with_problems_stops_the_run_with_them(verdict_filters):
    from ansible.errors import AnsibleFilterError

    fleet, tmp = verdict_filters
    assert fleet.fleet_validation_verdict_write(["host a: x = 1 (an integer): is out of range"]) == 1
    assert oct((tmp / "vllm-fleet-validation.json").stat().st_mode & 0o777) == "0o600"
    with pytest.raises(AnsibleFilterError) as refused:
        fleet.fleet_validation_verdict("fleet")
    assert str(refused.value).startswith("The inventory is invalid; nothing was changed on any host:\n"
                                         "  - host a: x = 1 (an integer): is out of range")
    # Read once: a second import of validate.yml in the same run must judge again.
    assert not (tmp / "vllm-fleet-validation.json").exists()


def test_a_valid_verdict_lets_the_run_on_and_no_verdict_stops_it(verdict_filters):
    from ansible.errors import AnsibleFilterError

    fleet, tmp = verdict_filters
    assert fleet.fleet_validation_verdict_write([]) == 0
    assert fleet.fleet_validation_verdict("fleet:router") == "fleet:router"
    # Fail closed: the validation play wrote nothing (or its verdict was read already).
    with pytest.raises(AnsibleFilterError, match="The inventory was not validated"):
        fleet.fleet_validation_verdict("fleet:router")
    (tmp / "vllm-fleet-validation.json").write_text('{"problems": []}')
    with pytest.raises(AnsibleFilterError, match="no list"):
        fleet.fleet_validation_verdict("fleet:router")


@pytest.mark.ansible
@pytest.mark.parametrize("selection", [[], ["--check"], ["--tags", "report"], ["-l", "nvidia-01"]])
def test_plain_ansible_playbook_exits_4_on_a_refused_inventory_and_touches_no_host(tmp_path, selection):
    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "nvidia-01.yml").write_text("fleet_serve_base_port: 80\n")
    proc = ansible_playbook("-i", str(inv), "site.yml", *selection, *NOWHERE)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output[-3000:]
    assert any(p.startswith("host nvidia-01: fleet_serve_base_port = 80") for p in _problems_of(output)), output
    # Nothing after the validation play ran: no task of another play, no failed or unreachable host.
    assert proc.stdout.count("PLAY [") == 1 and "UNREACHABLE" not in output, output[-3000:]
    assert not re.search(r"^(fatal|failed): ", output, re.M), output[-3000:]


@pytest.mark.ansible
@pytest.mark.parametrize("inline", ['{"fleet_serve_api_key": "sk-inline-0123456789abcdef"}',
                                    "fleet_serve_api_key=sk-inline-0123456789abcdef",
                                    '{"router_api_keys": [{"name": "a", "key": "sk-inline-0123456789abcdef"}]}'])
def test_a_secret_inline_on_the_command_line_is_refused_and_a_file_is_not(tmp_path, inline):
    secret = "sk-inline-0123456789abcdef"
    proc = ansible_playbook("-i", str(fz.EXAMPLE), "playbooks/validate.yml", "-e", inline)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4 and any(p.startswith("extra var ") and "given inline on the command line" in p
                                        for p in _problems_of(output)), output[-3000:]
    assert secret not in output
    given = tmp_path / "secrets.yml"
    given.write_text(f"fleet_serve_api_key: {secret}\n")
    assert ansible_playbook("-i", str(fz.EXAMPLE), "playbooks/validate.yml", "-e", f"@{given}").returncode == 0
    # A reference on the line, the secret in the file: nothing secret on the command line.
    given.write_text(f"site_key: {secret}\n")
    assert ansible_playbook("-i", str(fz.EXAMPLE), "playbooks/validate.yml", "-e", f"@{given}", "-e",
                            '{"fleet_serve_api_key": "{{ site_key }}"}').returncode == 0
