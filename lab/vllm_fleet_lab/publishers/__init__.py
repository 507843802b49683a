"""The lab's vendor publishers: what a vendor's lab nodes download that the lab must simulate.

A vendor whose stack downloads something of its own (installer packages, an apt
repository, a pip index) has a module here named after it, with ``publish(site) -> dict``:
it writes under ``site.www`` and returns what it adds to the lab's manifest, which the
lab inventory's templates (``lab/inventory/group_vars/<vendor>-nodes/*.yml.j2``) read.
`vllm_fleet_lab.www.build` runs the publisher of each vendor of the lab, found by name
from the vendor list, so nothing else in the lab names a vendor. A vendor without one
publishes nothing: its packages come from the lab's pip index and git mirror.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from vllm_fleet_lab.paths import LabPaths


@dataclass
class Site:
    """The web root being built, as a publisher sees it."""

    www: Path                 # the new web root
    paths: LabPaths           # the lab (web_url for the URLs the manifest gives)
    versions: dict            # lab/inventory/versions.yml
    packages: Path            # the lab pip index's packages (built before the publishers run)
    log: Callable = print
    models_dirs: list[Path] = field(default_factory=list)  # model fixtures the lab's hub serves

    def url(self, path: Path) -> str:
        """The URL of a file or directory under the web root."""
        return f"{self.paths.web_url}/{path.relative_to(self.www).as_posix()}"


def publisher(vendor: str) -> ModuleType | None:
    """The vendor's publisher module, or None when the vendor has nothing to publish."""
    name = f"{__name__}.{vendor}"
    return importlib.import_module(name) if importlib.util.find_spec(name) else None


def publish(vendors, site: Site, manifest: dict) -> None:
    """Run the publisher of each of `vendors`, merging what each returns into `manifest`."""
    for vendor in vendors:
        module = publisher(vendor)
        if module is not None:
            _merge(manifest, module.publish(site))


def _merge(into: dict, entries: dict) -> None:
    for key, value in entries.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif key in into:
            raise ValueError(f"two lab publishers give the manifest's {key!r}")
        else:
            into[key] = value
