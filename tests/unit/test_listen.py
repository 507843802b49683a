"""Listening and auth by default: loopback unless the inventory says otherwise, and beyond
loopback only with an API key (a secret) or the explicit opt-out."""

from __future__ import annotations

import pytest

from vllm_fleet import render
from vllm_fleet.models import resolve_models
from vllm_fleet.validation import validate_hosts

KEY = "s3cret-Key_0123456789"
MODEL = {"name": "qwen", "kind": "chat", "path": "/home/models/qwen"}


def resolve(model=None, **kwargs):
    models, problems = resolve_models([model or dict(MODEL)], {"vendor": "nvidia", "model": "H100", "count": 1},
                                      **kwargs)
    assert problems == []
    return models[0]


def problems_for(hosts, host="nvidia-01"):
    return [p for p in validate_hosts(hosts) if p.startswith(f"host {host}:")]


def test_models_listen_on_loopback_by_default():
    model = resolve()
    assert model["listen"] == "127.0.0.1" and model["url"] == "http://127.0.0.1:8000"
    argv = render.serve_argv(model)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert model["secret_env_names"] == [] and not model["api_key"]


def test_group_listen_and_the_models_own():
    assert resolve(listen="10.0.0.5")["listen"] == "10.0.0.5"
    assert resolve({**MODEL, "listen": "10.0.0.6"}, listen="10.0.0.5")["listen"] == "10.0.0.6"
    # A client on the node reaches a wildcard listener on loopback, a fixed address on that address.
    assert resolve(listen="0.0.0.0")["url"] == "http://127.0.0.1:8000"
    assert resolve(listen="::")["url"] == "http://[::1]:8000"
    assert resolve(listen="10.0.0.5")["url"] == "http://10.0.0.5:8000"


def test_the_groups_key_reaches_the_secret_environment_by_name_only():
    model = resolve(listen="0.0.0.0", api_key=True)
    assert model["secret_env_names"] == ["VLLM_API_KEY"] and model["api_key"]
    assert KEY not in repr(model)


def test_containers_publish_on_the_listen_address_only():
    settings = {"options": [], "models_dir": "/home/models", "models_mount": "/models", "executable": "vllm"}
    for listen, published in [("127.0.0.1", "127.0.0.1:8000:8000"), ("10.0.0.5", "10.0.0.5:8000:8000"),
                              ("::", "[::]:8000:8000")]:
        argv = render.container_argv(resolve(listen=listen), settings, runtime="docker", env_files=[], image="img")
        assert argv[argv.index("-p") + 1] == published
        inside = argv[argv.index("img") + 1:]
        # Inside its own network namespace the engine listens on the container's interfaces.
        assert inside[inside.index("--host") + 1] == "0.0.0.0"
        # On the node's own network (fleet_container_network host) nothing is published: the engine
        # listens on the model's address itself.
        argv = render.container_argv(resolve(listen=listen), {**settings, "network": "host"}, runtime="podman",
                                     env_files=[], image="img")
        inside = argv[argv.index("img") + 1:]
        assert "-p" not in argv and "--network=host" in argv[:argv.index("img")]
        assert inside[inside.index("--host") + 1] == listen


def test_host_in_serve_is_refused_where_it_is_written():
    _, problems = resolve_models([{**MODEL, "serve": {"host": "0.0.0.0"}}], {"vendor": "nvidia", "count": 1})
    assert any("serve.host: set it as the model's `listen` field instead" in p for p in problems)
    _, problems = resolve_models([dict(MODEL)], {"vendor": "nvidia", "count": 1}, serve_defaults={"host": "0.0.0.0"})
    assert problems == ["fleet_serve_defaults.host: set fleet_serve_listen (or a model's listen) instead"]


def test_the_example_listens_on_loopback_and_is_valid(example):
    assert all(h.get("fleet_serve_listen", "127.0.0.1") == "127.0.0.1" for h in example.values())
    assert validate_hosts(example) == []


def test_beyond_loopback_without_key_is_refused(example):
    example["nvidia-01"]["fleet_serve_listen"] = "0.0.0.0"
    problems = problems_for(example)
    assert problems and all("listen = '0.0.0.0'" in p and "has no API key" in p for p in problems)
    assert problems[0].startswith("host nvidia-01: model gpt-oss-20b: listen = '0.0.0.0'")
    assert "fleet_serve_api_key" in problems[0] and "fleet_serve_unauthenticated: true" in problems[0]
    assert problems_for(example, "ascend-01") == []


@pytest.mark.parametrize("fix", [
    {"fleet_serve_api_key": KEY},
    {"fleet_serve_unauthenticated": True},
    {"fleet_serve_listen": "127.0.0.2"},
])
def test_a_key_the_opt_out_or_loopback_is_accepted(example, fix):
    example["nvidia-01"]["fleet_serve_listen"] = "0.0.0.0"
    example["nvidia-01"].update(fix)
    assert problems_for(example) == []


def test_per_model_listen_key_and_opt_out(example):
    models = example["nvidia-01"]["fleet_models"]
    models[0]["listen"] = "10.0.0.5"
    (p,) = problems_for(example)
    assert f"model {models[0]['name']}: listen = '10.0.0.5'" in p
    models[0]["secret_env"] = {"VLLM_API_KEY": KEY}
    assert problems_for(example) == []
    del models[0]["secret_env"]
    models[0]["unauthenticated"] = True
    assert problems_for(example) == []
    # The model's own opt-out wins over its group's.
    example["nvidia-01"]["fleet_serve_unauthenticated"] = True
    models[0]["unauthenticated"] = False
    assert len(problems_for(example)) == 1


@pytest.mark.parametrize("listen", ["localhost", "10.0.0", "1.2.3.4 --api-key x"])
def test_listen_must_be_an_address(example, listen):
    example["nvidia-01"]["fleet_serve_listen"] = listen
    problems = problems_for(example)
    assert problems and "an IPv4 or IPv6 address" in problems[0]


@pytest.mark.parametrize("key", ["has spaceZQX-long-enough", 'ZQX"ZQX-long-enough', 98765432109876543210, ["ZQX"],
                                 "ZQX-short", " ", "ZQX-long-enough-ends-in-newline\n"])
def test_a_bad_key_is_refused_without_showing_it(example, key):
    example["nvidia-01"]["fleet_serve_api_key"] = key
    problems = problems_for(example)
    assert problems, problems
    assert all(p.startswith("host nvidia-01: fleet_serve_api_key = ******** (") for p in problems), problems
    assert "ZQX" not in str(problems) and "98765432109876543210" not in str(problems)


# ------------------------------------------------------------------ which key an engine asks for

OTHER = "own-Key_0123456789abcdef"


@pytest.mark.parametrize("secret_env, group, expected", [
    ({"VLLM_API_KEY": OTHER}, "", OTHER),          # the model's own key
    (None, KEY, KEY),                              # the group's
    ({"VLLM_API_KEY": OTHER}, KEY, OTHER),         # both: the model's own wins
    ({"VLLM_API_KEY": ""}, KEY, KEY),              # an empty own key is no key: the group's stands
    ({"VLLM_API_KEY": ""}, "", ""),
    ({"VLLM_API_KEY": "  "}, KEY, KEY),            # blank is empty too
    ({"VLLM_API_KEY": None}, KEY, KEY),
    ({"HF_TOKEN": OTHER}, KEY, KEY),               # another secret is no API key
    (None, "", ""),                                # none
    (None, None, ""),
    ("not a mapping", KEY, KEY),                   # a wrong shape (the schema's to report) is no key
    ({"VLLM_API_KEY": 123456789012345678}, "", "123456789012345678"),  # as written, a string
])
def test_engine_api_key(secret_env, group, expected):
    from vllm_fleet.models import access, engine_api_key

    model = {**MODEL, **({"secret_env": secret_env} if secret_env is not None else {})}
    assert engine_api_key(model, group) == expected
    # access() (whether a model has a key, from the group's boolean) agrees with it.
    assert access(model, api_key=bool(group))["api_key"] is bool(expected)


def test_engine_api_key_of_no_model_is_the_groups():
    from vllm_fleet.models import engine_api_key, inventory_model

    assert engine_api_key(None, KEY) == engine_api_key({}, KEY) == KEY
    assert engine_api_key(inventory_model([dict(MODEL)], "other"), "") == ""
    # The first entry of a name, as the role picks it (selectattr(...) | first).
    models = [{**MODEL, "secret_env": {"VLLM_API_KEY": OTHER}}, {**MODEL, "secret_env": {"VLLM_API_KEY": KEY}}]
    assert inventory_model(models, "qwen") is models[0]
    assert inventory_model("not a list", "qwen") == {}


def test_every_reader_of_the_engines_key_asks_engine_api_key(tmp_path):
    """Monitoring's bearer keys, live status, bench and the readiness helper (filter
    fleet_engine_api_key) send the key roles/blocks/vllm_service gives the engine: one rule."""
    from filter_plugins.fleet import FilterModule
    from vllm_fleet import bench, monitoring

    models = [{**MODEL, "name": "own", "secret_env": {"VLLM_API_KEY": OTHER}}, {**MODEL, "name": "group"},
              {**MODEL, "name": "empty", "secret_env": {"VLLM_API_KEY": ""}}]
    host_vars = {"fleet_accelerator": {"vendor": "nvidia", "model": "H100", "count": 3}, "fleet_models": models,
                 "fleet_serve_api_key": KEY, "fleet_serve_listen": "0.0.0.0", "group_names": ["fleet"]}
    expected = {"own": OTHER, "group": KEY, "empty": KEY}
    scraped = monitoring.api_keys({"node1": host_vars})
    assert scraped == {f"node1__{name}.key": key for name, key in expected.items()}
    targets = bench.targets_from_hostvars({"node1": host_vars})
    assert {t.name: t.api_key for t in targets} == expected
    engine_key = FilterModule().filters()["fleet_engine_api_key"]
    assert {name: engine_key(models, name, KEY) for name in expected} == expected
    assert engine_key(models, "group", "") == "" and engine_key(None, "group", KEY) == KEY


def test_the_key_rule_has_one_home():
    """No module but vllm_fleet.models reads secret_env.VLLM_API_KEY, and no template of the
    roles picks the engine's key apart from the filter (the secret environment's writer aside)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readers = [p.relative_to(root).as_posix() for p in sorted((root / "vllm_fleet").rglob("*.py"))
               if '.get("VLLM_API_KEY")' in p.read_text()]
    assert readers == ["vllm_fleet/models.py"]
    picks = [f"{p.relative_to(root).as_posix()}: {line.strip()}" for p in sorted((root / "roles").rglob("*"))
             if p.is_file() and p.suffix in (".yml", ".j2") and "meta" not in p.parts
             for line in p.read_text().splitlines() if ".VLLM_API_KEY" in line and not line.lstrip().startswith("#")]
    assert picks == []
