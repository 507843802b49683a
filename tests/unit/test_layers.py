"""The package's import contract (STYLE.md, habit 14): vllm_fleet is layered, and an import
never goes up a layer or round in a circle, counting every import statement: at module level,
inside functions, under TYPE_CHECKING. There is no exception.

The layers are the ones the package's docstring names (vllm_fleet/__init__.py), read from it:
one home, so the documented layers and the enforced ones cannot drift apart.

Importing `a.b.c` from outside the package `a.b` runs `a/b/__init__.py` first, so such an
import also counts as one of the package `a.b` (not of the root `vllm_fleet`, which every
module is inside of).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = "vllm_fleet"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
#: A layer of the docstring's list: "N. title: ``module``, ``module`` (an aside), ...;"
_LAYER_LINE = re.compile(r"^(\d+)\. ")
_ASIDE = re.compile(r"\([^()]*\)")
_NAME = re.compile(r"``(\w+(?:\.\w+)*)``")


def declared_layers(doc: str | None = None) -> dict[str, int]:
    """module -> layer, from the package's docstring: each numbered line, with the indented lines
    that continue it, is a layer, bottom up; the ``names`` on it outside parentheses are its modules
    (``validation``: vllm_fleet.validation and everything in it; ``vllm_fleet``: the root package
    alone, which re-exports the API, never a prefix)."""
    if doc is None:
        doc = ast.get_docstring(ast.parse((PACKAGE_DIR / "__init__.py").read_text()))
    items: list[list] = []
    current = None
    for line in doc.splitlines():
        match = _LAYER_LINE.match(line)
        if match:
            current = [int(match[1]), line[match.end():]]
            items.append(current)
        elif current is not None and line.startswith(" ") and line.strip():
            current[1] += " " + line.strip()
        else:
            current = None
    assert [number for number, _ in items] == list(range(len(items))), \
        f"the docstring's layers are not numbered 0, 1, 2, ...: {[number for number, _ in items]}"
    layers: dict[str, int] = {}
    for number, text in items:
        while _ASIDE.search(text):
            text = _ASIDE.sub("", text)
        for name in _NAME.findall(text):
            module = name if name == PACKAGE else f"{PACKAGE}.{name}"
            assert module not in layers, f"{module} is named on layers {layers[module]} and {number}"
            layers[module] = number
    return layers


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


def violations(graph: dict[str, dict[str, int]], layers: dict[str, int]) -> list[str]:
    """Every cycle, every module without a layer and every import from a lower layer to a higher one."""
    problems = [f"import cycle: {' -> '.join(cycle)}" + (f" (the circle holds {', '.join(members)})"
                                                         if len(members) > len(cycle) - 1 else "")
                for cycle, members in _cycles(graph)]
    for module in sorted(graph):
        if layer_of(module, layers) is None:
            problems.append(f"{module} has no layer (name it in a layer of vllm_fleet/__init__.py's docstring)")
    for importer, edges in sorted(graph.items()):
        for imported, line in sorted(edges.items()):
            low, high = layer_of(importer, layers), layer_of(imported, layers)
            if low is not None and high is not None and high > low:
                problems.append(f"{importer} (layer {low}) imports {imported} (layer {high}), line {line}")
    return problems


def test_package_is_layered_without_cycles():
    problems = violations(import_graph(), declared_layers())
    assert not problems, "\n".join(problems)


def test_every_layer_the_docstring_names_is_a_module():
    """A name the docstring lists that is no module (renamed, moved out) is a stale layer."""
    modules = package_modules()
    layers = declared_layers()
    assert set(layers) - set(modules) == set()
    assert layers[PACKAGE] == layers[f"{PACKAGE}.api"]  # the root re-exports the API: the same layer


def test_the_docstring_is_read_line_by_line():
    doc = """Intro naming ``nothing``.

    0. helpers: ``a``, ``b`` (an aside with ``not_a_module``);
    1. domain: ``c``, which ``vllm_fleet`` re-exports, and
       ``d.e`` (a continuation line);

    Prose naming ``f``.
    """
    layers = declared_layers(ast.get_docstring(ast.parse(f'"""{doc}"""')))
    assert layers == {"vllm_fleet.a": 0, "vllm_fleet.b": 0, "vllm_fleet.c": 1, "vllm_fleet": 1,
                      "vllm_fleet.d.e": 1}


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "vllm_fleet.secrets" in graph["vllm_fleet.live_status"]  # module level
    assert "vllm_fleet.api" in graph["vllm_fleet"]  # inside a function (PEP 562's __getattr__)
    assert "vllm_fleet" in graph["vllm_fleet.cli"]  # a name of the root package (__version__)
    assert "vllm_fleet.validation" in graph["vllm_fleet.bench"]  # the package a submodule import runs
    assert "vllm_fleet.validation.problem" in graph["vllm_fleet.validation.names"]  # relative or absolute
    assert all(module not in graph for module in ("vllm_fleet.mirror.__init__", "vllm_fleet.validation.__init__"))


def test_the_checker_reports_cycles_and_upward_imports():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "low": {"high": 4}, "high": {}, "loose": {}}
    layers = {"a": 0, "b": 0, "c": 0, "low": 0, "high": 1}
    problems = violations(graph, layers)
    assert "import cycle: a -> b -> c -> a" in problems
    assert "low (layer 0) imports high (layer 1), line 4" in problems
    assert "loose has no layer (name it in a layer of vllm_fleet/__init__.py's docstring)" in problems


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
