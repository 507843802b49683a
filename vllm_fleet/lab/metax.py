"""Publishes the lab's simulated MetaX software (lab/fixtures/installers/metax).

`www.build` calls `publish` once per web root: MetaX's driver package and MACA SDK
archive, and MetaX's two overlays built from the engine and triton stand-ins, for the
versions of lab/inventory/versions.yml (`metax`). The manifest's ``artifacts.metax``
then gives the lab inventory each file's name, url, version and sha256. (vLLM's 0.10.2
release wheel and MetaX's torch and triton stand-ins are in the pip index, from
lab/fixtures/wheels/standins.yml.)
"""

from __future__ import annotations

from pathlib import Path

from vllm_fleet.lab.artifacts import fixture_module, published
from vllm_fleet.lab.paths import FIXTURES_DIR, LabPaths

BUILDER = FIXTURES_DIR / "installers" / "metax" / "build.py"


def _builder():
    return fixture_module(BUILDER, "vllm_fleet_lab_metax_build")


def publish(art_dir: Path, paths: LabPaths, versions: dict) -> dict:
    """Build the artifacts into ``art_dir``; return ``{"metax": {key: {url, file, sha256, version}}}``."""
    built = _builder().build_all(art_dir, versions["metax"])
    return {"metax": published(built, f"{paths.web_url}/artifacts/{art_dir.name}")}
