"""docs/CONTRIBUTING-VENDOR.md lists exactly the files a new vendor is (issue 36, item 4): the
sixth vendor's files (tests/lab/vendor/acme, which tests/lab/vendor/test_sixth_vendor.py lays
over a copy of the tree and converges) are checked against the page's list, both ways."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "CONTRIBUTING-VENDOR.md"
ACME = ROOT / "tests" / "lab" / "vendor" / "acme"
#: How the test vendor carries its one edit of an existing file (its VENDORS entry).
FACTS_ENTRY = "module_utils/vendors_entry.py.txt"


def listed() -> list[tuple[str, bool]]:
    """(pattern, optional) for each line of the page's list of paths."""
    block = re.search(r"The same files as paths.*?```text\n(.*?)```", PAGE.read_text(), re.S)
    assert block, "docs/CONTRIBUTING-VENDOR.md has lost its list of paths"
    rows = []
    for line in block.group(1).splitlines():
        if line.strip():
            path, _, note = line.partition(" ")
            rows.append((path, note.strip().startswith("optional")))
    return rows


def as_glob(pattern: str, vendor: str) -> str:
    return pattern.replace("<vendor>", vendor).replace("<tool>", "*").replace("<file>", "*")


def acme_files() -> list[str]:
    files = sorted(str(p.relative_to(ACME)) for p in ACME.rglob("*") if p.is_file())
    return ["module_utils/vllm_fleet_accel.py" if f == FACTS_ENTRY else f for f in files]


def test_every_file_of_the_sixth_vendor_is_on_the_page():
    patterns = [as_glob(p, "acme") for p, _ in listed()]
    unlisted = [f for f in acme_files() if not any(fnmatch.fnmatch(f, g) for g in patterns)]
    assert unlisted == [], f"docs/CONTRIBUTING-VENDOR.md does not list what the sixth vendor needed: {unlisted}"


def test_every_file_on_the_page_is_one_the_sixth_vendor_needed():
    files = acme_files()
    unused = [p for p, optional in listed()
              if not optional and not any(fnmatch.fnmatch(f, as_glob(p, "acme")) for f in files)]
    assert unused == [], f"docs/CONTRIBUTING-VENDOR.md asks for files the sixth vendor did without: {unused}"


def test_the_page_s_list_holds_for_every_vendor_of_the_tree():
    """The five vendors have each mandatory file too (the page describes them, not only ACME)."""
    from vllm_fleet.vendors import VENDORS  # noqa: PLC0415

    tree = [str(p.relative_to(ROOT)) for d in ("roles", "inventories/example", "lab", "module_utils")
            for p in (ROOT / d).rglob("*") if p.is_file()]
    missing = [f"{vendor}: {pattern}" for vendor in VENDORS for pattern, optional in listed()
               if not optional and "<tool>" not in pattern
               and not any(fnmatch.fnmatch(f, as_glob(pattern, vendor)) for f in tree)]
    assert missing == []


def test_the_fleet_scenario_runs_every_vendor_scenario_s_checks():
    """molecule/fleet/verify.yml imports each vendor scenario's verify.yml (import_playbook takes
    no loop): a vendor scenario it misses, or one it names that is gone, fails here."""
    import yaml  # noqa: PLC0415

    plays = yaml.safe_load((ROOT / "molecule" / "fleet" / "verify.yml").read_text())
    imported = {Path(p["ansible.builtin.import_playbook"]).parent.name for p in plays
                if "ansible.builtin.import_playbook" in p}
    from vllm_fleet.vendors import VENDORS  # noqa: PLC0415

    scenarios = {v for v in VENDORS if (ROOT / "molecule" / v / "verify.yml").is_file()}
    # The vendors the fleet's lab leaves out have a scenario of their own, run beside it (cpu).
    env = yaml.safe_load((ROOT / "molecule" / "fleet" / "molecule.yml").read_text())["provisioner"]["env"]
    skipped = set(str(env.get("VLLM_FLEET_LAB_SKIP_VENDORS", "")).split(","))
    assert scenarios - skipped <= imported, f"molecule/fleet/verify.yml misses {sorted(scenarios - skipped - imported)}"
    assert not (imported & set(VENDORS)) - scenarios
