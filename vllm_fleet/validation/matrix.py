"""Checksums: the example's placeholders, wherever a host's variables carry one."""

from __future__ import annotations

import re
from typing import Any

#: The example's placeholder sha256: sixty zeros, then a counter (also as an image digest, sha256:<hex>).
PLACEHOLDER_SHA256 = re.compile(r"^(sha256:)?0{60}[0-9a-f]{4}$")
#: The keys that hold a checksum, at any depth: `sha256` (fleet_matrix.npu_driver.sha256), `*_sha256`
#: (an apt source's key_sha256), and an image's `digest`. One rule for every variable, the
#: matrix's and the roles' alike, so that a checksum kept outside fleet_matrix is not missed.
CHECKSUM_KEY = re.compile(r"^(sha256|.+_sha256|digest)$")


def placeholder_checksums(value: Any, path: str = "fleet_matrix") -> list[str]:
    """Where `value` (a variable named `path`) still carries an example's placeholder checksum (sixty
    zeros, then a counter), at any depth: `fleet_matrix.npu_driver` (its `sha256`),
    `fleet_matrix.vllm_overlays[0]`, `nvidia_driver_apt_repositories[0].key_sha256` (a key of
    another name is named itself)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and CHECKSUM_KEY.match(str(key)) and PLACEHOLDER_SHA256.match(item):
                found.append(path if key == "sha256" else f"{path}.{key}")
            else:
                found += placeholder_checksums(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += placeholder_checksums(item, f"{path}[{index}]")
    return found


def placeholder_warnings(hosts: dict[str, dict]) -> list[str]:
    """One warning per set of placeholder checksums, naming the variables and the hosts that carry
    them (`hosts`: host -> its variables, as validation reads them); [] when there is none."""
    by_paths: dict[tuple[str, ...], list[str]] = {}
    for host, host_vars in sorted(hosts.items()):
        paths = tuple(sorted(p for name, value in sorted(host_vars.items())
                             for p in placeholder_checksums(value, str(name))))
        if paths:
            by_paths.setdefault(paths, []).append(host)
    return [f"{', '.join(paths)} carry placeholder sha256 values (on {', '.join(names)}); downloads will fail their "
            "checksum until you set the published ones"
            for paths, names in sorted(by_paths.items(), key=lambda kv: kv[1])]
