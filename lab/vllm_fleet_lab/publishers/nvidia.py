"""Publishes the lab's simulated NVIDIA packages (lab/fixtures/installers/nvidia).

`publish` runs once per web root of a lab with NVIDIA nodes: an apt repository under ``apt/nvidia/``
holding the stand-in driver metapackage at every version of lab/inventory/versions.yml
(`nvidia.nvidia_driver_packages`: an older one, then the matrix's) and the container
toolkit's packages. The manifest's ``apt.nvidia`` gives the lab inventory the
repository's URL, suite and components, and each package's versions.
"""

from __future__ import annotations

import os

from vllm_fleet_lab.artifacts import fixture_module
from vllm_fleet_lab.paths import FIXTURES_DIR

BUILDER = FIXTURES_DIR / "installers" / "nvidia" / "build.py"


def _builder():
    return fixture_module(BUILDER, "vllm_fleet_lab_nvidia_build")


def publish(site) -> dict:
    """Build the repository into ``apt/nvidia``; return ``{"apt": {"nvidia": {url, suites, components, packages}}}``."""
    v = site.versions["nvidia"]
    repo = site.www / "apt" / "nvidia"
    info = _builder().build_repository(
        repo,
        {"driver_branch": v["nvidia_driver_branch"], "driver_packages": v["nvidia_driver_packages"],
         "cuda": v["nvidia_driver_cuda"], "container_toolkit": v["nvidia_container_toolkit"]},
        arch=os.uname().machine)
    return {"apt": {"nvidia": {"url": site.url(repo), "suites": [info["suite"]],
                               "components": info["components"], "packages": info["packages"]}}}
