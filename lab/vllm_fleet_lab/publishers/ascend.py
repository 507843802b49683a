"""Publishes the lab's simulated Huawei Ascend packages (lab/fixtures/installers/ascend).

`publish` runs once per web root of a lab with Ascend nodes: the NPU driver and firmware
and CANN's toolkit, kernels and NNAL `.run` packages, for the versions of
lab/inventory/versions.yml (`ascend`). The manifest's ``artifacts`` then gives the lab
inventory each package's name, url, version and sha256, under the matrix's names.
"""

from __future__ import annotations

import os

from vllm_fleet_lab.artifacts import fixture_module, published
from vllm_fleet_lab.paths import FIXTURES_DIR

BUILDER = FIXTURES_DIR / "installers" / "ascend" / "build.py"
#: The builder's package keys -> the matrix's component names.
MATRIX_KEYS = {"driver": "npu_driver", "firmware": "npu_firmware", "toolkit": "cann_toolkit",
               "kernels": "cann_kernels", "nnal": "cann_nnal"}


def publish(site) -> dict:
    """Build the packages into ``artifacts/ascend``; return ``{"artifacts": {component: {url, file, ...}}}``."""
    builder = fixture_module(BUILDER, "vllm_fleet_lab_ascend_build")
    v = site.versions["ascend"]
    art_dir = site.www / "artifacts" / "ascend"
    built = builder.build_all(art_dir, {k: v[m] for k, m in MATRIX_KEYS.items()}, arch=os.uname().machine)
    return {"artifacts": published({MATRIX_KEYS[key]: info for key, info in built.items()}, site.url(art_dir))}
