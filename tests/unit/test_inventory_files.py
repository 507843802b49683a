"""Issue 19: every broken inventory *file* stops the run with exit 4 and a message naming the
file (and line) and what is accepted, before ansible-runner starts; never exit 0 or an empty
result. Each case is a tiny inventory in tmp_path; its one host is on a closed port
(127.0.0.1:1), so even a run that got through would contact no real node.

vllm_fleet.validation.files is pure (stdlib + yaml); api.inventory_run_problems adds what
needs Ansible (the run's hosts after -l, decrypting vaults).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE, ROOT
from vllm_fleet import api, cli
from vllm_fleet.validation import files as inv

HOSTS = """\
all:
  children:
    fleet:
      children:
        cpu-nodes:
          hosts:
            cpu-01:
              ansible_host: 127.0.0.1
              ansible_port: 1
"""


@pytest.fixture
def tiny(tmp_path):
    """An inventory directory with one fleet host (cpu-01) and an empty group_vars/all/."""
    root = tmp_path / "inv"
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(HOSTS)
    return root


@pytest.fixture(autouse=True)
def no_vault_password(monkeypatch):
    for name in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST"):
        monkeypatch.delenv(name, raising=False)


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def provision_json(inventory: Path, *args: str, capsys) -> tuple[int, dict]:
    code = cli.main(["provision", "-i", str(inventory), "--json", "-q", *args])
    return code, json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ legal inventories stay legal

def test_the_example_inventory_has_no_problems():
    assert inv.file_problems(EXAMPLE) == []
    assert api.inventory_syntax_problems(EXAMPLE) == []
    assert api.inventory_run_problems(EXAMPLE) == []
    assert api.inventory_run_problems(EXAMPLE, "nvidia-nodes", "playbooks/doctor.yml") == []


def test_yaml_merge_keys_and_overrides_after_a_merge_are_legal(tiny):
    write(tiny, "group_vars/all/merge.yml", """\
base: &base
  a: 1
  b: 2
derived:
  <<: *base
  a: 3
layered: &layered
  <<: *base
  a: 5
both:
  <<: [*layered, *base]
  b: 9
""")
    write(tiny, "hosts.yml", HOSTS + "              <<: {ansible_user: fleet}\n              ansible_user: root\n")
    assert inv.file_problems(tiny) == []


def test_an_empty_vars_file_is_no_variables(tiny):
    write(tiny, "group_vars/all/empty.yml", "")
    write(tiny, "group_vars/cpu-nodes.yml", "---\n# nothing yet\n")
    assert inv.file_problems(tiny) == []
    assert api.inventory_run_problems(tiny) == []


# ------------------------------------------------------------------ case 1: no host in the run

@pytest.mark.parametrize("hosts_yml", ["", ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n"
                                           "          hosts: {}\n")])
def test_an_inventory_without_hosts_is_refused(tiny, hosts_yml, capsys):
    write(tiny, "hosts.yml", hosts_yml)
    assert inv.file_problems(tiny) == []
    (p,) = api.inventory_run_problems(tiny)
    assert p.startswith(f"no host of the inventory {tiny} is in this run") and "no host at all" in p
    assert "accepted: hosts under all.children.fleet" in p
    code, out = provision_json(tiny, capsys=capsys)
    assert code == 4 and out["status"] == "invalid" and out["problems"] == [p] and out["artifacts_dir"] == ""


def test_hosts_outside_the_fleet_groups_are_no_run(tiny):
    write(tiny, "hosts.yml", "all:\n  hosts:\n    cpu-01: {ansible_host: 127.0.0.1, ansible_port: 1}\n")
    (p,) = api.inventory_run_problems(tiny)
    assert "no host in the group(s) fleet, router, monitoring or mirror (its 1 host(s) are in other groups)" in p


def test_a_limit_that_matches_no_host_is_refused_and_named(tiny, capsys):
    (p,) = api.inventory_run_problems(tiny, "nvidia-nodes")
    assert p.startswith(f"no host of the inventory {tiny} is in this run (-l/--limit 'nvidia-nodes')")
    assert "the limit matches none of its 1 host(s) in the group(s) fleet, router, monitoring or mirror" in p
    assert api.inventory_run_problems(tiny, "cpu-nodes") == []
    assert api.inventory_run_problems(tiny, "cpu-01") == []
    code, out = provision_json(tiny, "-l", "nvidia-nodes", capsys=capsys)
    assert code == 4 and out["problems"] == [p] and out["limit"] == "nvidia-nodes"


def test_a_playbook_of_fleet_nodes_only_has_no_run_on_a_router(tiny):
    """doctor, verify, rollback and plan run on the fleet group only: -l router-01 is no run."""
    write(tiny, "hosts.yml", HOSTS + "    router:\n      hosts:\n        router-01: {ansible_host: 127.0.0.1}\n")
    assert api.inventory_run_problems(tiny, "router-01") == []  # site.yml configures the router
    (p,) = api.inventory_run_problems(tiny, "router-01", "playbooks/doctor.yml")
    assert "in the group(s) fleet;" in p


# ------------------------------------------------------------------ case 2: a vars file that is no mapping

@pytest.mark.parametrize("rel", ["group_vars/all/list.yml", "group_vars/cpu-nodes.yml", "host_vars/cpu-01.yml",
                                 "host_vars/cpu-01/serve.yml"])
@pytest.mark.parametrize("text,kind,line", [("- a\n- b\n", "a list", ", line 1"), ("42\n", "a number", ""),
                                            ("fleet_serve_port 8000\n", "a string", "")])
def test_a_vars_file_that_is_no_mapping_is_refused(tiny, rel, text, kind, line):
    write(tiny, rel, text)
    assert inv.file_problems(tiny) == [
        (f"inventory file {rel}{line}: holds {kind}; a vars file (group_vars/, host_vars/) must be a mapping of "
        "variable names to values (name: value, one per line), or empty")]


def test_a_vars_file_of_two_documents_is_refused(tiny):
    write(tiny, "group_vars/all/two.yml", "---\na: 1\n---\nb: 2\n")
    (p,) = inv.file_problems(tiny)
    assert p.startswith("inventory file group_vars/all/two.yml: holds 2 YAML documents")


# ------------------------------------------------------------------ case 3: a key given twice

def test_a_key_given_twice_names_file_key_and_both_lines(tiny, capsys):
    write(tiny, "hosts.yml", HOSTS + "              ansible_port: 22\n")
    write(tiny, "group_vars/all/serve.yml", "fleet_serve_env:\n  A: 1\n  B: 2\n  A: 3\nother: 1\n")
    problems = inv.file_problems(tiny)
    assert problems == [
        ("inventory file hosts.yml, line 10: key 'ansible_port' is given twice in one mapping (lines 9 and 10); "
        "Ansible keeps the last and drops the other (a mere warning); accepted: each key once per mapping (a key "
        "brought by a YAML merge `<<: *anchor` may be given again beside it)"),
        ("inventory file group_vars/all/serve.yml, line 4: key 'A' is given twice in one mapping (lines 2 and 4); "
        "Ansible keeps the last and drops the other (a mere warning); accepted: each key once per mapping (a key "
        "brought by a YAML merge `<<: *anchor` may be given again beside it)")]
    code, out = provision_json(tiny, capsys=capsys)
    assert code == 4 and out["problems"] == problems


def test_a_key_given_twice_inside_an_anchored_mapping_is_still_found(tiny):
    write(tiny, "group_vars/all/merge.yml", "base: &base\n  a: 1\n  a: 2\nderived:\n  <<: *base\n  b: 1\n")
    (p,) = inv.file_problems(tiny)
    assert "group_vars/all/merge.yml, line 3: key 'a' is given twice in one mapping (lines 2 and 3)" in p


# ------------------------------------------------------------------ case 4: a vault that cannot be opened

def _encrypt(text: str, password: bytes = b"right") -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(password))]).encrypt(text).decode()


@pytest.fixture
def vaulted(tiny):
    write(tiny, "group_vars/all/vault.yml", _encrypt("fleet_serve_api_key: s3cret\n"))
    cipher = _encrypt("hf_token").replace("\n", "\n    ")
    write(tiny, "group_vars/all/tokens.yml", f"---\nmodel_fetch_tokens:\n  huggingface: !vault |\n    {cipher}\n")
    (tiny.parent / "right").write_text("right\n")
    (tiny.parent / "wrong").write_text("wrong\n")
    return tiny


def test_a_vault_without_its_password_is_refused(vaulted, capsys):
    assert inv.file_problems(vaulted) == []  # a syntax check does not open vaults
    problems = api.inventory_run_problems(vaulted)
    assert [p.split(" but ")[0] for p in problems] == [
        "inventory file group_vars/all/tokens.yml, line 3: has a !vault value",
        "inventory file group_vars/all/vault.yml: is vault-encrypted"]
    assert all("but no vault password was given" in p and "ANSIBLE_VAULT_PASSWORD_FILE=<file holding it>" in p
               for p in problems)
    code, out = provision_json(vaulted, capsys=capsys)
    assert code == 4 and out["problems"] == problems and out["artifacts_dir"] == ""


def test_a_vault_with_a_wrong_password_is_refused(vaulted, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(vaulted.parent / "wrong"))
    problems = api.inventory_run_problems(vaulted)
    assert len(problems) == 2 and all("but the vault password(s) given do not open it (Decryption failed" in p
                                      for p in problems)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(vaulted.parent / "missing"))
    assert all("was not found" in p for p in api.inventory_run_problems(vaulted))


@pytest.mark.parametrize("variable,value", [("ANSIBLE_VAULT_PASSWORD_FILE", "{d}/right"),
                                            ("ANSIBLE_VAULT_IDENTITY_LIST", "old@{d}/wrong,new@{d}/right")])
def test_a_vault_with_its_password_is_fine_and_its_text_is_checked(vaulted, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value.format(d=vaulted.parent))
    assert api.inventory_run_problems(vaulted) == []
    write(vaulted, "group_vars/all/vault.yml", _encrypt("- fleet_serve_api_key\n"))
    (p,) = api.inventory_run_problems(vaulted)
    assert p.startswith("inventory file group_vars/all/vault.yml (decrypted), line 1: holds a list")


def test_an_encrypted_hosts_file_is_read_with_the_password(tiny, monkeypatch):
    write(tiny, "hosts.yml", _encrypt(HOSTS))
    (tiny.parent / "right").write_text("right\n")
    assert "is vault-encrypted but no vault password was given" in api.inventory_run_problems(tiny)[0]
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tiny.parent / "right"))
    assert api.inventory_run_problems(tiny) == []


def test_vault_problems_take_any_decrypt_function(vaulted):
    """The pure module decides nothing about passwords: `decrypt` says."""
    def refuse(cipher):
        raise inv.VaultError("", no_password=True)

    assert len(inv.vault_problems(vaulted, refuse)) == 2
    assert inv.vault_problems(vaulted, lambda cipher: "a: 1\n") == []


def test_the_command_line_refuses_a_vault_without_its_password(vaulted):
    """The real entry point, as a user runs it (the environment without a vault password)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_VAULT")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "provision", "-i", str(vaulted), "--json", "-q"],
                          check=False, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 4, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "invalid" and len(out["problems"]) == 2
    assert "s3cret" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------ case 5: shapes Ansible skips

@pytest.mark.parametrize("hosts_yml,expected", [
    ("- cpu-01\n",
     "inventory file hosts.yml, line 1: holds a list; an inventory file must be a mapping of group names"),
    ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n          hosts: [cpu-01]\n",
     ("inventory file hosts.yml, line 6: group cpu-nodes: hosts: is a list; Ansible would drop this file's groups and "
     "hosts; accepted: a mapping of host names to their variables")),
    ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n          host:\n            cpu-01: {}\n",
     "inventory file hosts.yml, line 6: group cpu-nodes has the key 'host', which Ansible ignores"),
    ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes: cpu-01\n",
     "inventory file hosts.yml, line 5: group cpu-nodes is a string; Ansible would skip the group and its hosts"),
    ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n          hosts:\n            cpu-01: [1]\n",
     "inventory file hosts.yml, line 7: group cpu-nodes: host cpu-01's variables are a list; accepted: a mapping"),
    ("all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n          hosts:\n            10: {}\n",
     "inventory file hosts.yml, line 7: group cpu-nodes: host 10 is a number; accepted: a host name (quote a number"),
    ("all:\n  vars: [a]\n", "inventory file hosts.yml, line 2: group all: vars: is a list"),
])
def test_an_inventory_file_of_a_shape_ansible_skips_is_refused(tiny, hosts_yml, expected, capsys):
    write(tiny, "hosts.yml", hosts_yml)
    (p,) = inv.file_problems(tiny)
    assert p.startswith(expected), p
    code, out = provision_json(tiny, capsys=capsys)
    assert code == 4 and out["problems"] == [p]


def test_legal_shorthands_of_the_yaml_inventory_stay_legal(tiny):
    """`hosts: name` is one host, an empty group or host is fine, a plugin configuration is no YAML inventory."""
    write(tiny, "hosts.yml", "all:\n  children:\n    fleet:\n      children:\n        cpu-nodes:\n"
                             "          hosts: cpu-01\n        nvidia-nodes:\n    router:\n      hosts: {}\n")
    write(tiny, "cloud.yml", "plugin: constructed\nstrict: false\n")
    assert inv.file_problems(tiny) == []


# ------------------------------------------------------------------ the shortcut past Ansible

@pytest.mark.parametrize("limit", [None, "nvidia-nodes", "cpu-01,ascend-01", "fleet:router", "nope", "router",
                                   "nvidia-*", "fleet:!cpu-nodes", "all", "monitoring,cpu-01"])
@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/doctor.yml"])
def test_the_shortcut_agrees_with_ansible(monkeypatch, limit, playbook):
    """Without a vault and with a limit of plain names, the YAML files alone answer "this run has
    a host" (no Ansible import, ~0.4 s of CPU saved); whatever it answers, Ansible agrees."""
    shortcut = api.inventory_run_problems(EXAMPLE, limit, playbook)
    monkeypatch.setattr(inv, "surely_has_hosts", lambda *a: False)
    assert api.inventory_run_problems(EXAMPLE, limit, playbook) == shortcut


def test_the_shortcut_answers_only_what_it_knows():
    groups = inv.yaml_groups(EXAMPLE)
    assert groups["fleet"] == {"ascend-01", "metax-01", "musa-01", "nvidia-01", "cpu-01"} and groups["router"] == set()
    assert inv.surely_has_hosts(groups, "fleet:router:monitoring", None)
    assert inv.surely_has_hosts(groups, "fleet", "cpu-01,router")
    assert not inv.surely_has_hosts(groups, "fleet", "router")  # Ansible decides: no host
    assert not inv.surely_has_hosts(groups, "fleet", "cpu-*")  # Ansible decides: a pattern
    assert not inv.surely_has_hosts(groups, "fleet", "gpu-01")  # Ansible decides: unknown here


# ------------------------------------------------------------------ a vault met by Ansible itself

STOPPED = """\
PLAY [Validate the inventory] **************************************************
[ERROR]: Attempting to decrypt but no vault secrets found.
"""


def test_a_run_stopped_by_a_vault_is_an_invalid_inventory():
    (p,) = inv.startup_vault_problems(STOPPED)
    assert p.startswith("the run stopped before its first task: Ansible could not open a vault of the inventory "
                        "(Attempting to decrypt but no vault secrets found.); give the vault password with")
    assert inv.startup_vault_problems("ERROR! the playbook: x.yml could not be found\n") == []
    assert inv.startup_errors("ERROR! the playbook: x.yml  could not be found\n") == [
        "the playbook: x.yml could not be found"]


@pytest.mark.ansible
def test_a_vault_the_checks_missed_still_ends_in_exit_4(vaulted, monkeypatch):
    """Behind the checks: should a vault get past them, Ansible's own refusal (it stops before its
    first task, no recap) becomes the invalid inventory it is, not an empty failed run."""
    monkeypatch.setattr(api, "inventory_run_problems", lambda *a, **k: [])
    result = api.provision(str(vaulted))
    assert result.status == "invalid" and result.exit_code == 4 and result.hosts == {}
    (p,) = result.problems
    assert "Ansible could not open a vault" in p and "ANSIBLE_VAULT_PASSWORD_FILE" in p


# ------------------------------------------------------------------ a secret written in clear

CLEAR_KEY = "clear-key-0123456789abcdef"


@pytest.mark.parametrize("text, where", [
    (f"fleet_serve_api_key: {CLEAR_KEY}\n", "line 1: fleet_serve_api_key"),
    (f"model_fetch_tokens:\n  modelscope: {CLEAR_KEY}\n", "line 1: model_fetch_tokens"),
    (f"fleet_models:\n  - name: m\n    secret_env:\n      VLLM_API_KEY: {CLEAR_KEY}\n",
     "line 3: fleet_models[0].secret_env"),
])
def test_a_secret_written_in_clear_in_an_inventory_file_is_refused_without_its_value(tiny, capsys, text, where):
    write(tiny, "group_vars/all/keys.yml", text)
    (p,) = inv.file_problems(tiny)
    assert p.startswith(f"inventory file group_vars/all/keys.yml, {where} is a secret written in clear"), p
    assert CLEAR_KEY not in p
    code, out = provision_json(tiny, capsys=capsys)
    assert code == 4 and CLEAR_KEY not in json.dumps(out)


@pytest.mark.parametrize("text", [
    "fleet_serve_api_key: \"{{ vault_fleet_key }}\"\n",
    "fleet_serve_api_key: \"\"\nmodel_fetch_tokens: {}\n",
    "fleet_serve_api_key: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3132\n",
    "fleet_serve_unauthenticated: true\nmax_num_batched_tokens: 8192\ntokenizer_cache: o200k_base\n",
])
def test_secrets_by_reference_vault_or_empty_are_no_clear_secret(tiny, text):
    write(tiny, "group_vars/all/keys.yml", text)
    assert [p for p in inv.file_problems(tiny) if "in clear" in p] == []
