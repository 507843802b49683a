"""Classes keyed by declared type, not by name (issue 33, item 3): every role option declares its
class in roles/<layer>/<role>/meta/classes.yml, and the class's rule follows the declaration."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests import fuzz_inventory as fz
from vllm_fleet import role_specs, validation
from vllm_fleet.validation import classes

ROLES = Path(__file__).resolve().parents[2] / "roles"

#: The argument-spec types each class may have.
TYPES = {**{c: {"int", "float"} for c in classes.NUMBER_RANGES}, "number": {"int", "float"}, "switch": {"bool"},
         "path": {"path", "str"}, "executable": {"path", "str"}, "secret": {"str", "raw"}, "secrets": {"dict", "list"},
         "address": {"str"}, "duration": {"str"}, "mode": {"str"}, "url": {"str"}, "urls": {"list"},
         "account": {"str"}, "accounts": {"list"}, "name": {"str"}, "choice": {"str"}, "env": {"dict"},
         "serial": {"raw"}, "fingerprint": {"str"}, "armored": {"str"}, "text": {"str", "raw"}, "list": {"list"},
         "mapping": {"dict"}}


def test_every_role_option_declares_a_known_class_of_its_type():
    options, declared = role_specs.role_options(), role_specs.role_classes()
    assert set(declared) == set(options), (sorted(set(options) - set(declared)), sorted(set(declared) - set(options)))
    assert set(TYPES) == set(classes.CLASSES)
    for name, (role, spec) in options.items():
        cls = declared[name]
        assert cls in classes.CLASSES, (role, name, cls)
        kind = spec.get("type", "str")
        # percent may be raw: a play keyword's percent, which Ansible takes as a number, "50" or "50%".
        assert kind in TYPES[cls] or (cls == "percent" and kind == "raw"), (role, name, cls, kind)
        assert cls != "choice" or "choices" in spec, (name, cls)


def test_each_roles_classes_are_its_own_options():
    for path in sorted(ROLES.glob("*/*/meta/argument_specs.yml")):
        role = path.parent.parent.name
        spec = yaml.safe_load(path.read_text())["argument_specs"]["main"].get("options") or {}
        file = path.parent / "classes.yml"
        declared = (yaml.safe_load(file.read_text()) or {}) if file.exists() else {}
        # A suboption's own class (`option.key: armored`) names one of the role's options too.
        assert {k.split(".", 1)[0] for k in declared} == set(spec), role  # no options: no classes.yml


@pytest.fixture(scope="module")
def example():
    return fz.load_inventory(fz.EXAMPLE)


def _judge(example, host, **variables):
    hosts = copy.deepcopy(example)
    hosts[host].update(variables)
    return validation.validate_inventory(hosts, [host])


def test_a_duration_is_judged_by_its_declaration_not_its_name(example):
    # monitoring_alert_*_for: no name pattern said "duration"; the declaration does.
    hosts = copy.deepcopy(example)
    hosts["mon-01"] = {"group_names": ["monitoring"], "ansible_host": "192.0.2.6",
                       "monitoring_alert_waiting_for": "five minutes"}
    problems = validation.validate_inventory(hosts, ["mon-01"])
    assert any(p.startswith("host mon-01: monitoring_alert_waiting_for = 'five minutes'") and "not a duration" in p
               for p in problems), problems


def test_the_rule_follows_the_declaration(example, monkeypatch):
    """Declare router_page_title an address: the address rule judges it, by nothing but the declaration."""
    declared = {**role_specs.role_classes(), "vllm_service_smoke_prompt": "address"}
    monkeypatch.setattr(classes, "role_classes", lambda: declared)
    problems = _judge(example, "nvidia-01", vllm_service_smoke_prompt="who are you")
    assert any("vllm_service_smoke_prompt" in p and "not an IP address" in p for p in problems), problems
    monkeypatch.setattr(classes, "role_classes", lambda: {**declared, "vllm_service_smoke_prompt": "text"})
    assert _judge(example, "nvidia-01", vllm_service_smoke_prompt="who are you") == []


@pytest.mark.parametrize("cls", sorted(classes.NUMBER_RANGES))
def test_every_number_class_has_its_range_on_every_option_declared_of_it(example, cls):
    low, high, inclusive, _what = classes.NUMBER_RANGES[cls]
    for name in classes.declared(cls):
        if role_specs.role_options()[name][1].get("type") not in ("int", "float"):
            continue
        bad = high + 1 if isinstance(high, int) else high * 2
        problems = _judge(example, "nvidia-01", **{name: bad})
        assert any(p.startswith(f"host nvidia-01: {name} = ") for p in problems), (name, bad, problems)


def test_an_environment_takes_identifiers_only(example):
    problems = _judge(example, "nvidia-01", vllm_service_extra_env={"HF-HOME": "/x", "OK_NAME": {"a": 1}})
    assert any("vllm_service_extra_env = 'HF-HOME'" in p for p in problems), problems
    assert any("vllm_service_extra_env.OK_NAME" in p for p in problems), problems
    assert _judge(example, "nvidia-01", vllm_service_extra_env={"HF_HUB_OFFLINE": "1"}) == []


def test_a_url_list_is_a_list_of_urls(example):
    problems = _judge(example, "nvidia-01", fleet_pip_extra_index_urls=["https://pypi.internal/simple", "not a url"])
    assert any(p.startswith("host nvidia-01: fleet_pip_extra_index_urls") for p in problems), problems


# ------------------------------------------------------------------ the one value on several lines

@pytest.fixture(scope="module")
def armored_key(tmp_path_factory):
    """A real ASCII-armored OpenPGP public key, as `gpg --armor --export` writes it."""
    import shutil
    import subprocess

    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed (scripts/setup installs gnupg)")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    subprocess.run(["gpg", "--batch", "--homedir", str(home), "--passphrase", "", "--quick-gen-key",
                    "apt-test", "ed25519", "sign", "never"], **run)
    return subprocess.run(["gpg", "--homedir", str(home), "--armor", "--export", "apt-test"], **run).stdout


def test_an_armored_key_on_several_lines_is_legal_where_declared(example, armored_key):
    repo = {"name": "r", "uris": ["https://apt.internal/ubuntu"], "suites": ["jammy"], "components": ["main"],
            "key": armored_key}
    assert "\n" in armored_key.strip()
    for var in ("nvidia_driver_apt_repositories", "nvidia_container_toolkit_apt_repositories"):
        assert _judge(example, "nvidia-01", **{var: [repo]}) == [], var


@pytest.mark.parametrize("key", ["-----BEGIN PGP PUBLIC KEY BLOCK-----\nabc\n-----END PGP PUBLIC KEY BLOCK-----\x00",
                                 "not a key\nExecStartPre=/bin/sh", "-----BEGIN PGP PUBLIC KEY BLOCK-----\nno end"])
def test_a_declared_armored_value_must_be_an_armored_block(example, key):
    repo = {"name": "r", "uris": ["https://apt.internal/ubuntu"], "suites": ["jammy"], "key": key}
    problems = _judge(example, "nvidia-01", nvidia_driver_apt_repositories=[repo])
    assert any(p.startswith("host nvidia-01: nvidia_driver_apt_repositories[0].key = ") and "armored" in p
               for p in problems), problems


def test_an_armored_block_anywhere_else_is_refused_for_its_newlines(example, armored_key):
    problems = _judge(example, "nvidia-01", fleet_serve_env={"KEY": armored_key})
    assert any("fleet_serve_env.KEY" in p and "U+000A" in p for p in problems), problems
    # ... and so is a repository's other field.
    repo = {"name": "r", "uris": ["https://apt.internal/ubuntu"], "suites": ["jammy\nevil"], "key": armored_key}
    problems = _judge(example, "nvidia-01", nvidia_driver_apt_repositories=[repo])
    assert any("suites[0]" in p and "U+000A" in p for p in problems), problems


def test_every_declared_suboption_class_is_a_suboption_of_its_option():
    options = role_specs.role_options()
    for (name, sub), cls in role_specs.suboption_classes().items():
        assert cls in classes.CLASSES, (name, sub, cls)
        assert sub in (options[name][1].get("options") or {}), (name, sub)
