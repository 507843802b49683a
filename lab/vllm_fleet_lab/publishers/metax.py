"""Publishes the lab's simulated MetaX software (lab/fixtures/installers/metax).

`publish` runs once per web root of a lab with MetaX nodes: MetaX's driver package and MACA SDK
archive, and MetaX's two overlays built from the engine and triton stand-ins, for the
versions of lab/inventory/versions.yml (`metax`). The manifest's ``artifacts.metax``
then gives the lab inventory each file's name, url, version and sha256. (vLLM's 0.10.2
release wheel and MetaX's torch and triton stand-ins are in the pip index, from
lab/fixtures/wheels/standins.yml.)
"""

from __future__ import annotations

from vllm_fleet_lab.artifacts import fixture_module, published
from vllm_fleet_lab.paths import FIXTURES_DIR

BUILDER = FIXTURES_DIR / "installers" / "metax" / "build.py"


def _builder():
    return fixture_module(BUILDER, "vllm_fleet_lab_metax_build")


def publish(site) -> dict:
    """Build the artifacts; return ``{"artifacts": {"metax": {key: {url, file, sha256, version}}}}``."""
    art_dir = site.www / "artifacts" / "metax"
    built = _builder().build_all(art_dir, site.versions["metax"])
    return {"artifacts": {"metax": published(built, site.url(art_dir))}}
