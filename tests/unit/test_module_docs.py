"""Every module in library/ has a page `ansible-doc` can show, and its options are the module's
argument spec: names, types, elements, required, choices and defaults (issue 35, item 5).

The modules are found by listing the folder, so a new module is covered without editing this
test. The argument spec is read by running each module with AnsibleModule replaced by a
recorder (no parsing of the source: a spec built in a variable is read the same way).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (REPO / "library").glob("*.py") if not p.name.startswith("_"))

# Runs one module as Ansible would (__main__), with its module_utils importable as
# ansible.module_utils.<name> and AnsibleModule recording its argument spec, then exiting.
RECORDER = r"""
import importlib.util, json, runpy, sys
from pathlib import Path
import ansible.module_utils, ansible.module_utils.basic as basic
repo, name = Path(sys.argv[1]), sys.argv[2]
for path in (repo / "module_utils").glob("*.py"):
    spec = importlib.util.spec_from_file_location("ansible.module_utils." + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    setattr(ansible.module_utils, path.stem, mod)
class Recorder:
    def __init__(self, argument_spec, **kwargs):
        print(json.dumps(argument_spec, default=str))
        raise SystemExit(0)
basic.AnsibleModule = Recorder
sys.argv = [name]
runpy.run_path(str(repo / "library" / (name + ".py")), run_name="__main__")
"""


def argument_spec(name: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", RECORDER, str(REPO), name], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def pages() -> dict:
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-doc"), "-M", str(REPO / "library"), "-j", *MODULES],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_folder_has_modules():
    assert len(MODULES) >= 7, MODULES


@pytest.mark.ansible
@pytest.mark.parametrize("name", MODULES)
def test_every_module_page_loads_and_equals_its_argument_spec(pages, name):
    assert name in pages, f"ansible-doc shows no page for {name}"
    page = pages[name]
    doc = page["doc"]
    assert doc.get("short_description") and doc.get("description"), name
    assert (page.get("examples") or "").strip(), f"{name} has no EXAMPLES"
    spec = argument_spec(name)
    options = doc.get("options") or {}
    assert set(options) == set(spec), f"{name}: documented {sorted(options)}, argument spec {sorted(spec)}"
    for option, want in spec.items():
        shown = options[option]
        where = f"{name}.{option}"
        assert shown.get("type", "str") == want.get("type", "str"), where
        assert shown.get("elements") == want.get("elements"), where
        assert bool(shown.get("required", False)) == bool(want.get("required", False)), where
        if "choices" in want:
            assert list(shown.get("choices") or []) == list(want["choices"]), where
        if want.get("default") not in (None, [], {}):
            assert shown.get("default") == want["default"], where
