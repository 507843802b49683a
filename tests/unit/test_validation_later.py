"""Values known only later (issue 33, item 2): a judged variable whose template reads facts, the
environment, a command's output, a download, the clock or an unseeded random, directly or
through the variables it names, is refused naming host and variable, whatever its class; and
the same inventories are refused by plain ansible-playbook and by vllm-fleet with the same sentences.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import fuzz_inventory as fz
from tests.conftest import ansible_playbook
from vllm_fleet import validation
from vllm_fleet.validation import later
from vllm_fleet.validation.roles import role_options

#: Templates that read something known only later, as a user would write them.
LATER = [
    "{{ ansible_facts['default_ipv4']['address'] }}",
    "{{ hostvars[inventory_hostname]['ansible_facts'].nodename }}",
    "{{ hostvars[groups['fleet'][0]].ansible_facts.processor_vcpus * 2 }}",
    "{{ ansible_memtotal_mb // 1024 }}",
    "{{ lookup('env', 'HOME') }}/models",
    "{{ lookup(\"ansible.builtin.env\", 'FLEET_PORT') | int }}",
    "{{ query('env', 'X') | first }}",
    "{{ q('ansible.builtin.env', 'X') | first }}",
    "{{ lookup('pipe', 'hostname -f') }}",
    "{{ lookup('lines', 'cat /etc/fleet-port') }}",
    "{{ lookup('url', 'https://config.internal/port') }}",
    "{{ now().year }}",
    "{{ 65535 | random }}",
    "{% if lookup('env', 'PROD') %}/srv/models{% else %}/home/models{% endif %}",
]
#: Templates that are judged as they render: values of this run's inventory, or a controller file.
NOW = [
    "{{ site_models }}",
    "{{ ansible_host }}",
    "{{ inventory_hostname }}-api",
    "{{ lookup('file', '/etc/vllm-fleet/api-key') }}",
    "{{ 60 | random(seed=inventory_hostname) }}",
    "/srv/ansible_facts_are_words_here",
]


def _judged() -> list[str]:
    return sorted(validation.validated_variables() | set(role_options()))


@pytest.mark.parametrize("template", LATER)
def test_every_judged_variable_reading_something_known_later_is_refused(template):
    """Whatever the variable's class: every name validation judges, each of the forms."""
    names = _judged()
    found = later.later_reads({name: template for name in names}, names)
    assert sorted(found) == names
    assert all(found[n].startswith(f"{n} = ") and "known only later" in found[n] and "; accepted: " in found[n]
               for n in names)


@pytest.mark.parametrize("template", NOW)
def test_values_of_this_run_are_not_refused(template):
    raw = {"fleet_models_dir": template, "site_models": "/home/models"}
    assert later.later_reads(raw, ["fleet_models_dir"]) == {}


def test_through_the_variables_it_names_and_inside_structures():
    raw = {"fleet_models": [{"name": "m", "path": "{{ models_root }}/m"}], "models_root": "{{ base_root }}",
           "base_root": "{{ lookup('env', 'MODELS') }}", "fleet_models_dir": "{{ models_root }}"}
    found = later.later_reads(raw, ["fleet_models", "fleet_models_dir"])
    assert found["fleet_models"].startswith("fleet_models[0].path = '{{ models_root }}/m' (a string): reads "
                                            "lookup('env') through models_root -> base_root")
    assert "through models_root -> base_root" in found["fleet_models_dir"]


def test_a_reference_loop_is_no_hang():
    raw = {"fleet_models_dir": "{{ a }}", "a": "{{ b }}", "b": "{{ a }}"}
    assert later.later_reads(raw, ["fleet_models_dir"]) == {}


def test_a_secret_is_named_never_shown():
    template = "sk-clear-part-{{ lookup('env', 'KEY_TAIL') }}"
    found = later.later_reads({"fleet_serve_api_key": template}, ["fleet_serve_api_key"])
    assert "sk-clear-part" not in found["fleet_serve_api_key"]
    assert found["fleet_serve_api_key"].startswith("fleet_serve_api_key = ")


def test_the_refusal_names_the_host_and_only_hosts_of_the_run(example_hosts):
    refused = {"nvidia-01": later.later_reads({"fleet_models_dir": "{{ lookup('pipe', 'pwd') }}"},
                                              ["fleet_models_dir"])}
    problems = validation.validate_inventory(example_hosts, sorted(example_hosts), later=refused)
    assert problems[0].startswith("host nvidia-01: fleet_models_dir = \"{{ lookup('pipe', 'pwd') }}\"")
    assert validation.validate_inventory(example_hosts, ["cpu-01"], later=refused) == []


@pytest.fixture(scope="module")
def example_hosts() -> dict[str, dict]:
    return fz.load_inventory(fz.EXAMPLE)


# ------------------------------------------------------------------ both entry points

HOST_VARS = """site_root: "{{ lookup('env', 'HOME') }}"
fleet_models_dir: "{{ site_root }}/models"
fleet_base_dir: !unsafe "/opt/{{ ansible_facts }}"
"""


@pytest.mark.ansible
def test_plain_ansible_playbook_and_vllm_fleet_refuse_it_with_the_same_sentences(tmp_path):
    from vllm_fleet import api

    inv = tmp_path / "inv"
    shutil.copytree(fz.EXAMPLE, inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "nvidia-01.yml").write_text(HOST_VARS)
    extra = tmp_path / "extra.yml"
    extra.write_text("fleet_pip_index_url: \"https://pypi.internal/{{ lookup('pipe', 'date +%s') }}/simple\"\n")
    proc = ansible_playbook("-i", str(inv), "playbooks/validate.yml", "-e", f"@{extra}")
    played = fz.refusal_lines(proc.stdout + proc.stderr)
    assert proc.returncode == 4, proc.stdout[-3000:]
    assert any(p.startswith("host nvidia-01: fleet_models_dir = ") and "lookup('env') through site_root" in p
               for p in played), played
    assert any(p.startswith("host nvidia-01: fleet_pip_index_url = ") and "lookup('pipe')" in p for p in played)
    # `!unsafe` is never rendered: judged as the literal it is (a path with braces), not as facts.
    assert not any("fleet_base_dir" in p and "known only later" in p for p in played), played

    import yaml

    result = api.run_playbook("playbooks/validate.yml", Path(inv), extravars=yaml.safe_load(extra.read_text()))
    assert result.exit_code == 4 and result.problems, (result.status, result.failures)
    assert set(result.problems) == set(played), set(result.problems) ^ set(played)
    assert "The inventory is invalid; nothing was changed on any host:" in str(result)
