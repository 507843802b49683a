"""The version matrix: placeholder checksums of the example."""

from __future__ import annotations

import re
from typing import Any

#: The example's placeholder sha256: sixty zeros, then a counter.
PLACEHOLDER_SHA256 = re.compile(r"^0{60}[0-9a-f]{4}$")


def placeholder_checksums(matrix: Any, path: str = "fleet_matrix") -> list[str]:
    """Where `matrix` still carries an example's placeholder sha256 (sixty zeros, then a
    counter), at any depth: `fleet_matrix.npu_driver`, `fleet_matrix.vllm_overlays[0]`."""
    found: list[str] = []
    if isinstance(matrix, dict):
        if isinstance(matrix.get("sha256"), str) and PLACEHOLDER_SHA256.match(matrix["sha256"]):
            found.append(path)
        for key, value in matrix.items():
            found += placeholder_checksums(value, f"{path}.{key}")
    elif isinstance(matrix, list):
        for index, value in enumerate(matrix):
            found += placeholder_checksums(value, f"{path}[{index}]")
    return found
