"""The package's import contract (STYLE.md, habit 14): vllm_fleet is layered, and an import
never goes up a layer or round in a circle, counting every import statement: at module level,
inside functions, under TYPE_CHECKING.

Importing `a.b.c` from outside the package `a.b` runs `a/b/__init__.py` first, so such an
import also counts as one of the package `a.b` (not of the root `vllm_fleet`, which every
module is inside of).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "vllm_fleet"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

#: The layers, bottom up; a module (or package, and everything in it) imports only from its
#: own layer or those below. The root package `vllm_fleet` is matched alone (it re-exports the
#: API), never as a prefix.
LAYERS = {
    # 0 pure helpers: no project data, no other layer.
    "vllm_fleet.project": 0,
    "vllm_fleet.exit_codes": 0,
    "vllm_fleet.render": 0,
    "vllm_fleet.state": 0,
    "vllm_fleet.release": 0,
    "vllm_fleet.secrets": 0,
    # 1 project data: the vendors' contracts, models and profiles, clusters, the roles' specs.
    "vllm_fleet.vendors": 1,
    "vllm_fleet.models": 1,
    "vllm_fleet.cluster": 1,
    "vllm_fleet.role_specs": 1,
    # 2 domain: validation, the router, monitoring, reading inventory files (validation.files) and
    # inventories (inventory).
    "vllm_fleet.validation": 2,
    "vllm_fleet.inventory": 2,
    "vllm_fleet.router": 2,
    "vllm_fleet.monitoring": 2,
    # the fleet's mirror: its layout, the bill of an inventory and the check against a manifest are
    # the domain validation and the filters read; its sync is the connected machine's.
    "vllm_fleet.mirror": 2,
    # the plan's directory and files (playbooks/plan.yml's filters, the API's plan).
    "vllm_fleet.plans": 2,
    # 3 features: live status, bench, the vLLM parser checks.
    "vllm_fleet.live_status": 3,
    "vllm_fleet.bench": 3,
    "vllm_fleet.canary": 3,
    "vllm_fleet.argcheck": 3,
    # 4 surfaces: the API (re-exported by the root package) and the command line.
    "vllm_fleet": 4,
    "vllm_fleet.api": 4,
    "vllm_fleet.cli": 4,
    # 5 the lab simulator: its own top layer, nothing in the product imports it.
    "vllm_fleet.lab": 5,
}

#: Upward imports allowed, each with its reason.
ALLOWED_UPWARD = {
    ("vllm_fleet.cli", "vllm_fleet.lab"): "`vllm-fleet lab up|down|...` is the lab's command line",
}


def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package -> its file (a package's module is its __init__.py)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(importer: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules) -> set[str]:
    """The package's modules an import statement names (the closest enclosing module of each name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = importer.split(".") if is_package else importer.split(".")[:-1]
            here = here[:len(here) - (node.level - 1)]
            base = ".".join(here + ([node.module] if node.module else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for name in names:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            continue
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        found.add(name)
    return found


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, dict[str, int]]:
    """importer -> {imported module: line of its first import}, for every import statement."""
    modules = package_modules() if modules is None else modules
    graph: dict[str, dict[str, int]] = {}
    for importer, path in modules.items():
        edges = graph.setdefault(importer, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _resolve(importer, path.name == "__init__.py", node, modules):
                # The packages that importing `target` initialises first: all but the root, and
                # but those the importer is inside of (already initialised, or initialising it).
                parts = target.split(".")
                packages = [".".join(parts[:i]) for i in range(2, len(parts))]
                for imported in [target] + [p for p in packages if not importer.startswith(p + ".")]:
                    if imported != importer:
                        edges[imported] = min(edges.get(imported, node.lineno), node.lineno)
    return graph


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    if module in layers:
        return layers[module]
    prefixes = [p for p in layers if p != PACKAGE and module.startswith(p + ".")]
    return layers[max(prefixes, key=len)] if prefixes else None


def _cycles(graph: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected component of more than one module: one cycle through it (a → ... → a),
    and all its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, {}):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        inside = set(component)
        start = component[0]
        path, seen = [start], {start}
        while True:  # walk inside the component until a module repeats
            nxt = min(w for w in graph[path[-1]] if w in inside)
            if nxt in seen:
                cycles.append((path[path.index(nxt):] + [nxt], component))
                break
            path.append(nxt)
            seen.add(nxt)
    return cycles


def violations(graph: dict[str, dict[str, int]], layers: dict[str, int],
               allowed: dict[tuple[str, str], str] | None = None) -> list[str]:
    """Every cycle, every module without a layer and every import from a lower layer to a higher one."""
    allowed = allowed or {}
    problems = [f"import cycle: {' -> '.join(cycle)}" + (f" (the circle holds {', '.join(members)})"
                                                         if len(members) > len(cycle) - 1 else "")
                for cycle, members in _cycles(graph)]
    for module in sorted(graph):
        if layer_of(module, layers) is None:
            problems.append(f"{module} has no layer (add it to LAYERS)")
    for importer, edges in sorted(graph.items()):
        for imported, line in sorted(edges.items()):
            low, high = layer_of(importer, layers), layer_of(imported, layers)
            if low is not None and high is not None and high > low and (importer, imported) not in allowed:
                problems.append(f"{importer} (layer {low}) imports {imported} (layer {high}), line {line}")
    return problems


def test_package_is_layered_without_cycles():
    problems = violations(import_graph(), LAYERS, ALLOWED_UPWARD)
    assert not problems, "\n".join(problems)


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "vllm_fleet.secrets" in graph["vllm_fleet.live_status"]  # module level
    assert "vllm_fleet.api" in graph["vllm_fleet"]  # inside a function (PEP 562's __getattr__)
    assert "vllm_fleet" in graph["vllm_fleet.cli"]  # a name of the root package (__version__)
    assert "vllm_fleet.validation" in graph["vllm_fleet.bench"]  # the package a submodule import runs
    assert "vllm_fleet.validation.problem" in graph["vllm_fleet.validation.names"]  # relative or absolute
    assert all(module not in graph for module in ("vllm_fleet.lab.__init__", "vllm_fleet.validation.__init__"))


def test_the_checker_reports_cycles_and_upward_imports():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "low": {"high": 4}, "high": {}, "loose": {}}
    layers = {"a": 0, "b": 0, "c": 0, "low": 0, "high": 1}
    problems = violations(graph, layers)
    assert "import cycle: a -> b -> c -> a" in problems
    assert "low (layer 0) imports high (layer 1), line 4" in problems
    assert "loose has no layer (add it to LAYERS)" in problems
    assert "low (layer 0) imports high (layer 1), line 4" not in violations(graph, layers, {("low", "high"): "why"})


def test_relative_and_function_level_imports_are_edges(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from vllm_fleet.sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from . import thing\n")
    (pkg / "sub" / "thing.py").write_text("from typing import TYPE_CHECKING\n"
                                          "if TYPE_CHECKING:\n    from .. import low\n")
    graph = import_graph(package_modules(pkg))
    assert graph["vllm_fleet.low"] == {"vllm_fleet.sub.thing": 2, "vllm_fleet.sub": 2}
    assert graph["vllm_fleet.sub"] == {"vllm_fleet.sub.thing": 1}
    assert graph["vllm_fleet.sub.thing"] == {"vllm_fleet.low": 3}
    cycles = [p for p in violations(graph, {"vllm_fleet": 0, "vllm_fleet.low": 0, "vllm_fleet.sub": 0})
              if p.startswith("import cycle")]
    assert cycles == ["import cycle: vllm_fleet.low -> vllm_fleet.sub -> vllm_fleet.sub.thing -> vllm_fleet.low"]


def test_no_module_of_the_package_is_named_like_the_api():
    """The root package re-exports the API (vllm_fleet.plan, vllm_fleet.status, ...) on first use;
    a submodule of the same name, once imported, would shadow it (vllm_fleet.plan(...) then
    fails with "'module' object is not callable")."""
    import vllm_fleet  # noqa: PLC0415 - its _API only

    names = {p.stem for p in PACKAGE_DIR.glob("*.py")} | {p.name for p in PACKAGE_DIR.iterdir()
                                                          if (p / "__init__.py").is_file()}
    assert names & set(vllm_fleet._API) == set()
