"""What a node serves is resolved in one place (issue 36, item 1).

vllm_fleet.models.node_models is the one resolution of a node's models: the only caller of
resolve_models; the Python readers that call it are listed here with their reason, and the
roles read it through one filter call, in roles/stages/fleet/vars (`_fleet_node_models`). A second
place that resolves models (a role's vars, a molecule check, a module of the package) fails
this test.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import example_hosts
from vllm_fleet import models, router

ROOT = Path(__file__).resolve().parents[2]
PYTHON = [p for d in ("vllm_fleet", "filter_plugins", "library", "module_utils", "scripts")
          for p in sorted((ROOT / d).rglob("*")) if p.is_file() and (p.suffix == ".py" or d == "scripts")]
YAML = [p for d in ("roles", "playbooks", "molecule", "tests/lab") for p in sorted((ROOT / d).rglob("*.yml"))]
#: Who calls node_models, and why.
NODE_MODELS_CALLERS = {
    "filter_plugins/fleet.py": "fleet_node_models, the roles' one call (roles/stages/fleet/vars)",
    "vllm_fleet/router.py": "served_models: the router, monitoring, status and bench read a node's served models",
    "vllm_fleet/validation/__init__.py": "validation judges every model, disabled ones too, with its problems",
    "vllm_fleet/live_status.py": "status's weights: what each node fetches (a span's workers and adapters too), "
                                 "distribution.fetch_items of its models",
    "filter_plugins/distribution.py": "fleet_distribution_waves: the plan's waves, every node's fetched models "
                                      "in one call on the controller",
}


def calls(path: Path, name: str) -> list[str]:
    """The functions of `path` that call `name` (a Python file; a script without .py is parsed too)."""
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError):
        return []
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    f = node.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if called == name:
                        found.append(fn.name)
    return found


def test_resolve_models_is_called_by_node_models_only():
    callers = {str(p.relative_to(ROOT)): calls(p, "resolve_models") for p in PYTHON}
    assert {k: v for k, v in callers.items() if v} == {"vllm_fleet/models.py": ["_node_models"]}


def test_node_models_is_called_by_the_listed_readers_only():
    callers = {str(p.relative_to(ROOT)) for p in PYTHON if calls(p, "node_models")}
    assert callers - {"vllm_fleet/models.py"} == set(NODE_MODELS_CALLERS)


def test_the_roles_resolve_a_node_s_models_once():
    uses = {str(p.relative_to(ROOT)): len(re.findall(r"\bfleet_node_models\b", p.read_text())) for p in YAML}
    assert {k: v for k, v in uses.items() if v} == {"roles/stages/fleet/vars/main.yml": 1}
    assert not [p for p in YAML if "fleet_resolve_models" in p.read_text()]


def test_the_readers_get_what_node_models_resolves():
    hosts = example_hosts()
    for host, host_vars in hosts.items():
        resolved, problems = models.node_models(host_vars, host)
        assert problems == [], (host, problems)
        served = [m for m in resolved if m["enabled"] and isinstance(m.get("port"), int)]
        assert router.served_models(host_vars, host) == served


def test_a_reader_that_changes_its_copy_changes_no_other_s():
    host_vars = example_hosts()["nvidia-01"]
    with models.resolved_once():
        first, _ = models.node_models(host_vars, "nvidia-01")
        first[0]["port"] = 1
        again, _ = models.node_models(host_vars, "nvidia-01")
        assert again[0]["port"] != 1


def test_no_role_vars_loop_over_models_in_jinja():
    """The roles' vars read fields of the resolved models (filters over vllm_fleet) instead of
    selecting and reshaping them in Jinja loops: a `{% for ... %}` over models in a role's
    vars/main.yml fails here. Rendering one file per model belongs to a template
    (templates/files.json.j2)."""
    loop = re.compile(r"\{%-?\s*for\s+(\w+)\s+in\s+([^%]*)%\}")
    found = [f"{p.relative_to(ROOT)}: for {m.group(1)} in {m.group(2).strip()}"
             for p in sorted((ROOT / "roles").glob("*/*/vars/main.yml"))
             for m in loop.finditer(p.read_text()) if "model" in m.group(1) + m.group(2)]
    assert found == []


def span(role: str, nodes=("a", "b")) -> dict:
    return {"role": role, "head": nodes[0], "nodes": list(nodes), "port": 6379, "unit": "ray-m"}


def test_engine_and_span_models_select_from_the_resolved_models():
    resolved = [{"name": "plain", "enabled": True, "span": None},
                {"name": "off", "enabled": False, "span": None},
                {"name": "headed", "enabled": True, "span": span("head")},
                {"name": "worked", "enabled": True, "span": span("worker")},
                {"name": "off-span", "enabled": False, "span": span("head")}]
    assert [m["name"] for m in models.engine_models(resolved)] == ["plain", "headed"]
    assert [m["name"] for m in models.span_models(resolved)] == ["headed", "worked"]


def test_readiness_checks_carry_the_key_the_engine_asks_for_and_smoke_only_where_asked():
    resolved = [{"name": "a", "unit": "vllm-a", "url": "http://127.0.0.1:8000", "smoke": "chat",
                 "served_model_name": ["a", "alias"], "path": "/m/a"},
                {"name": "b", "unit": "vllm-b", "url": "http://127.0.0.1:8001", "smoke": "embed",
                 "served_model_name": ["b"], "path": "/m/b"}]
    inventory = [{"name": "a", "secret_env": {"VLLM_API_KEY": "own-key-123"}}, {"name": "b"}]
    checks = models.readiness_checks(resolved, ["vllm-b"], "hi", inventory, "group-key-456")
    assert checks == [
        {"unit": "vllm-a", "name": "a", "url": "http://127.0.0.1:8000", "smoke": None, "model": "a",
         "prompt": "hi", "config": "/m/a/config.json", "key": "own-key-123"},
        {"unit": "vllm-b", "name": "b", "url": "http://127.0.0.1:8001", "smoke": "embed", "model": "b",
         "prompt": "hi", "config": "/m/b/config.json", "key": "group-key-456"}]


def test_a_unit_s_files_and_a_head_s_gates():
    from vllm_fleet import cluster, state  # noqa: PLC0415 - the two other homes of the serving roles' rules

    assert state.unit_files(["vllm-a"], "/etc/vllm-fleet", (".env", ".secret.env")) == [
        "/etc/systemd/system/vllm-a.service", "/etc/vllm-fleet/vllm-a.env", "/etc/vllm-fleet/vllm-a.secret.env"]
    head = {"name": "m", "devices": [0, 1], "span": span("head")}
    worker = {"name": "w", "devices": [0], "span": span("worker")}
    gates = cluster.gate_specs([head, worker], {"a": "10.0.0.1", "b": "10.0.0.2"}, None, 60)
    assert [g["model"] for g in gates] == ["m"]
    assert gates[0]["address"] == "10.0.0.1:6379" and gates[0]["per_node"] == 2
    assert gates[0]["members"] == [{"host": "a", "address": "10.0.0.1"}, {"host": "b", "address": "10.0.0.2"}]
