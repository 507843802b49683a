"""The product's wheel ships the product (issue 36, item 2).

The repository holds three distributions, each a folder with its pyproject.toml: the product
(vllm-fleet, the root), the lab simulator (vllm-fleet-lab, lab/) and the developer tools
(vllm-fleet-dev, dev/). scripts/setup installs all three, editable, into the checkout's venv.
The product's wheel holds the product's modules only, the product imports nothing of the other
two, and `vllm-fleet lab` reaches the command line through an entry point: installed, it is the
lab's command line; missing, it says how to get it (exit 64); broken, the product's commands
still work.

What a wheel holds is what setuptools' own pyproject.toml reader finds with the file's
[tool.setuptools.packages.find] table (`setuptools.config.expand.find_packages`): offline, with
no build of a wheel and no build dependency fetched.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from setuptools.config.expand import find_packages

from vllm_fleet import cli
from vllm_fleet.exit_codes import EXIT_ERROR, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "pyproject.toml"
#: The repository's other distributions: one folder down, each with its pyproject.toml.
OTHERS = sorted(ROOT.glob("*/pyproject.toml"))


def project(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())


def packages(pyproject: Path) -> list[str]:
    """The packages of the distribution's wheel, as setuptools finds them from pyproject.toml
    (namespace packages included, as pyproject.toml's `find` does by default)."""
    find = project(pyproject)["tool"]["setuptools"]["packages"]["find"]
    return sorted(find_packages(root_dir=str(pyproject.parent), **find))


def modules(pyproject: Path) -> list[str]:
    """The wheel's Python modules: every .py file of its packages."""
    found = []
    for package in packages(pyproject):
        folder = pyproject.parent.joinpath(*package.split("."))
        found += [package if p.stem == "__init__" else f"{package}.{p.stem}" for p in folder.glob("*.py")]
    return sorted(found)


def package_data(pyproject: Path) -> list[str]:
    """The wheel's data files, by the globs of [tool.setuptools.package-data] in each package's folder."""
    table = project(pyproject)["tool"]["setuptools"].get("package-data", {})
    found = set()
    for package in packages(pyproject):
        folder = pyproject.parent.joinpath(*package.split("."))
        for pattern in table.get(package, []):
            found |= {str(p.relative_to(pyproject.parent)) for p in folder.glob(pattern) if p.is_file()}
    return sorted(found)


def top_level(pyproject: Path) -> set[str]:
    return {name.split(".")[0] for name in packages(pyproject)}


def test_the_repository_has_the_product_the_lab_and_the_developer_tools():
    assert {project(p)["project"]["name"]: p.parent.name for p in OTHERS} == {"vllm-fleet-lab": "lab",
                                                                               "vllm-fleet-dev": "dev"}
    assert project(PRODUCT)["project"]["name"] == "vllm-fleet"


def test_the_product_wheel_holds_the_product_and_all_of_it():
    shipped = modules(PRODUCT)
    assert {name.split(".")[0] for name in shipped} == {"vllm_fleet"}
    assert not [m for m in shipped if m.startswith("vllm_fleet.lab") or m == "vllm_fleet.argcheck"]
    # Every module of the package's folder is in the wheel (nothing left behind by the find table).
    on_disk = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for p in (ROOT / "vllm_fleet").rglob("*.py"))
    assert shipped == on_disk
    # And every data file of it (the schema, the serve options, bench's seeds).
    assert package_data(PRODUCT) == sorted(str(p.relative_to(ROOT)) for p in (ROOT / "vllm_fleet").rglob("*")
                                           if p.is_file() and p.suffix not in (".py", ".pyc"))


@pytest.mark.parametrize("pyproject", OTHERS, ids=lambda p: p.parent.name)
def test_each_other_distribution_ships_its_one_package_installed_from_this_checkout(pyproject):
    (package,) = top_level(pyproject)
    assert package == "vllm_fleet_" + pyproject.parent.name
    assert not set(packages(pyproject)) & set(packages(PRODUCT))
    # scripts/setup installed it (editable) into the venv the tests run in, from this folder.
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is not installed: run scripts/setup"
    assert Path(spec.origin).is_relative_to(pyproject.parent), spec.origin


def test_the_product_imports_nothing_of_the_other_distributions():
    """Every import statement of every product module, in functions and under TYPE_CHECKING too."""
    others = set().union(*(top_level(p) for p in OTHERS))
    found = []
    for path in sorted((ROOT / "vllm_fleet").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in others]
    assert not found


def test_importing_the_command_line_loads_no_other_distribution():
    others = sorted(set().union(*(top_level(p) for p in OTHERS)))
    code = f"import sys, vllm_fleet.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in {others!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ vllm-fleet lab, by entry point

def test_vllm_fleet_lab_comes_from_the_labs_entry_point():
    declared = project(ROOT / "lab" / "pyproject.toml")["project"]["entry-points"][cli.COMMANDS_GROUP]
    assert declared == {"lab": "vllm_fleet_lab.cli:add_command"}
    installed = {ep.name: ep.value for ep in metadata.entry_points(group=cli.COMMANDS_GROUP)}
    assert installed.get("lab") == declared["lab"], "the lab's entry point is not installed: run scripts/setup"
    args = cli.build_parser().parse_args(["lab", "up", "--nodes", "2", "--vendors", "cpu", "--name", "x"])
    assert (args.func.__module__, args.lab_command, args.nodes, args.vendors, args.name) == \
        ("vllm_fleet_lab.cli", "up", 2, "cpu", "x")


@pytest.mark.parametrize("verb", ["up", "down", "status"])
def test_vllm_fleet_lab_acts_on_the_lab_vllm_fleet_lab_name_names_without_name(monkeypatch, verb):
    monkeypatch.delenv("VLLM_FLEET_LAB_NAME", raising=False)
    assert cli.build_parser().parse_args(["lab", verb]).name == "lab"
    monkeypatch.setenv("VLLM_FLEET_LAB_NAME", "second")
    assert cli.build_parser().parse_args(["lab", verb]).name == "second"
    assert cli.build_parser().parse_args(["lab", verb, "--name", "x"]).name == "x"


@pytest.mark.parametrize("argv", [["lab"], ["lab", "up", "--nodes", "2"], ["lab", "--help"], ["lab", "status", "-h"]])
def test_without_the_lab_vllm_fleet_lab_says_how_to_get_it(monkeypatch, capsys, argv):
    monkeypatch.setattr(cli, "plugin_commands", lambda: [])
    assert cli.main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("vllm-fleet lab: not installed:") and "vllm-fleet-lab" in err and "./scripts/setup" in err


def test_without_the_lab_the_help_lists_it_as_not_installed(monkeypatch):
    monkeypatch.setattr(cli, "plugin_commands", lambda: [])
    text = cli.build_parser().format_help()
    assert "lab" in text and "(not installed)" in " ".join(text.split())


def test_a_broken_plugin_leaves_the_products_commands_working(monkeypatch, capsys):
    broken = metadata.EntryPoint(name="lab", value="vllm_fleet_no_such_lab.cli:add_command", group=cli.COMMANDS_GROUP)
    shadowing = metadata.EntryPoint(name="plan", value="vllm_fleet_lab.cli:add_command", group=cli.COMMANDS_GROUP)
    monkeypatch.setattr(cli, "plugin_commands", lambda: [broken, shadowing])
    parser = cli.build_parser()
    assert parser.parse_args(["plan", "-i", "x", "-o", "y"]).func is cli.cmd_plan  # the product's plan stays
    assert "vllm-fleet already has a command plan" in capsys.readouterr().err
    assert cli.main(["lab", "status"]) == EXIT_ERROR
    assert "vllm_fleet_no_such_lab.cli:add_command failed to load: ModuleNotFoundError" in capsys.readouterr().err
