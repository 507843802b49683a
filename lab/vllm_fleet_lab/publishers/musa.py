"""Publishes the lab's simulated Moore Threads software (lab/fixtures/installers/musa).

`publish` runs once per web root of a lab with Moore Threads nodes: the Miniforge installer, AIModule's
environment archive (its Python packages come from the lab's own pip index, so it is
built after it) and the MUSA driver package, for the versions of
lab/inventory/versions.yml (`musa`). The manifest's ``artifacts.musa`` then gives the
lab inventory each file's name, url, version and sha256.
"""

from __future__ import annotations

import os

from vllm_fleet_lab.artifacts import fixture_module, published
from vllm_fleet_lab.paths import FIXTURES_DIR

BUILDER = FIXTURES_DIR / "installers" / "musa" / "build.py"


def _builder():
    return fixture_module(BUILDER, "vllm_fleet_lab_musa_build")


def publish(site) -> dict:
    """Build the packages; return ``{"artifacts": {"musa": {component: {url, file, sha256, version}}}}``."""
    art_dir = site.www / "artifacts" / "musa"
    built = _builder().build_all(art_dir, site.versions["musa"], site.packages, arch=os.uname().machine)
    return {"artifacts": {"musa": published(built, site.url(art_dir))}}
