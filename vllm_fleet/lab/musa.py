"""Publishes the lab's simulated Moore Threads software (lab/fixtures/installers/musa).

`www.build` calls `publish` once per web root: the Miniforge installer, AIModule's
environment archive (its Python packages come from the lab's own pip index, so it is
built after it) and the MUSA driver package, for the versions of
lab/inventory/versions.yml (`musa`). The manifest's ``artifacts.musa`` then gives the
lab inventory each file's name, url, version and sha256.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_fleet.lab.artifacts import fixture_module, published
from vllm_fleet.lab.paths import FIXTURES_DIR, LabPaths

BUILDER = FIXTURES_DIR / "installers" / "musa" / "build.py"


def _builder():
    return fixture_module(BUILDER, "vllm_fleet_lab_musa_build")


def publish(art_dir: Path, packages_dir: Path, paths: LabPaths, versions: dict) -> dict:
    """Build the packages into ``art_dir``; return ``{"musa": {component: {url, file, sha256, version}}}``."""
    built = _builder().build_all(art_dir, versions["musa"], packages_dir, arch=os.uname().machine)
    return {"musa": published(built, f"{paths.web_url}/artifacts/{art_dir.name}")}
