"""The lab's NVIDIA pieces without a lab: the apt repository of stand-in packages, the
vLLM stand-in's release wheel, and the lab inventory they make (which must equal the
example's versions and pass the same validation)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, example_hosts, lab_host_vars, load_module
from vllm_fleet.validation import validate_hosts
from vllm_fleet_lab import artifacts, inventory
from vllm_fleet_lab.nodes import Node
from vllm_fleet_lab.paths import LabPaths
from vllm_fleet_lab.publishers import nvidia

VERSIONS = yaml.safe_load((ROOT / "lab" / "inventory" / "versions.yml").read_text())["nvidia"]
BUILD_INPUT = {"driver_branch": VERSIONS["nvidia_driver_branch"], "driver_packages": VERSIONS["nvidia_driver_packages"],
               "cuda": VERSIONS["nvidia_driver_cuda"], "container_toolkit": VERSIONS["nvidia_container_toolkit"]}


@pytest.fixture(scope="module")
def builder():
    return load_module(nvidia.BUILDER, "nvidia_lab_build")


@pytest.fixture(scope="module")
def repo(builder, tmp_path_factory):
    out = tmp_path_factory.mktemp("apt") / "nvidia"
    return out, builder.build_repository(out, BUILD_INPUT, arch="x86_64")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ versions

def test_lab_pins_the_example_versions():
    matrix = example_hosts()["nvidia-01"]["fleet_matrix"]
    driver = matrix["nvidia_driver"]
    assert (VERSIONS["nvidia_driver_branch"], VERSIONS["nvidia_driver"], VERSIONS["nvidia_driver_cuda"]) == (
        driver["branch"], driver["version"], driver["cuda"])
    assert VERSIONS["nvidia_driver_packages"][-1] == driver["package_version"]
    assert driver["packages"] == [f"nvidia-driver-{VERSIONS['nvidia_driver_branch']}"]
    # The older package is of the same branch, and older.
    older = VERSIONS["nvidia_driver_packages"][0]
    assert older.startswith(VERSIONS["nvidia_driver_branch"] + ".") and older != driver["package_version"]
    assert VERSIONS["nvidia_container_toolkit"] == matrix["nvidia_container_toolkit"]["package_version"]
    for key in ("torch", "transformers", "openai_harmony", "huggingface_hub"):
        assert VERSIONS[key] == matrix[key], key
    assert VERSIONS["vllm"] == matrix["vllm"]["version"]


def test_the_pip_index_has_the_release_and_the_torch_it_requires():
    plan = yaml.safe_load((ROOT / "lab" / "fixtures" / "wheels" / "standins.yml").read_text())
    releases = {r["version"]: r["requires"] for r in plan["engine_releases"]}
    assert f"torch=={VERSIONS['torch']}" in releases[VERSIONS["vllm"]]
    torch = next(d for d in plan["distributions"] if d["name"] == "torch")
    assert VERSIONS["torch"] in torch["versions"]


# ------------------------------------------------------------------ apt repository

def test_repository_lists_every_package_version(repo):
    _, info = repo
    assert info["packages"] == {
        "libnvidia-container-tools": ["1.17.8-1"], "libnvidia-container1": ["1.17.8-1"],
        "nvidia-container-toolkit": ["1.17.8-1"], "nvidia-container-toolkit-base": ["1.17.8-1"],
        "nvidia-driver-570": ["570.172.08-0ubuntu0.22.04.1", "570.195.03-0ubuntu0.22.04.1"],
    }
    assert (info["suite"], info["components"], info["architecture"]) == ("stable", ["main"], "amd64")


def test_index_and_release_describe_the_files_exactly(repo):
    out, _ = repo
    binary = out / "dists" / "stable" / "main" / "binary-amd64"
    index = (binary / "Packages").read_text()
    assert gzip.decompress((binary / "Packages.gz").read_bytes()).decode() == index
    stanzas = [dict(re.findall(r"(?m)^([A-Za-z0-9-]+): (.*)$", s)) for s in index.strip().split("\n\n")]
    assert len(stanzas) == 6
    for stanza in stanzas:
        deb = out / stanza["Filename"]
        assert int(stanza["Size"]) == deb.stat().st_size and stanza["SHA256"] == sha256(deb), stanza["Filename"]
    release = (out / "dists" / "stable" / "Release").read_text()
    for path in (binary / "Packages", binary / "Packages.gz"):
        assert f" {sha256(path)} {path.stat().st_size:>8} main/binary-amd64/{path.name}" in release


def test_repository_is_byte_identical_when_rebuilt(builder, repo, tmp_path):
    out, _ = repo
    again = tmp_path / "nvidia"
    builder.build_repository(again, BUILD_INPUT, arch="x86_64")
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all(sha256(out / f) == sha256(again / f) for f in files)


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_dpkg_reads_the_driver_package(repo):
    out, _ = repo
    deb = out / "pool" / "main" / "nvidia-driver-570_570.195.03-0ubuntu0.22.04.1_amd64.deb"
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture"],
                            capture_output=True, text=True, check=True).stdout
    assert fields.splitlines() == ["Package: nvidia-driver-570", "Version: 570.195.03-0ubuntu0.22.04.1",
                                   "Architecture: amd64"]
    version_file = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert b"Version=570.195.03\nCudaVersion=12.8\n" in version_file
    postinst = subprocess.run(["dpkg-deb", "-I", str(deb), "postinst"], capture_output=True, text=True,
                              check=True).stdout
    # Only a change from another version (configure's second argument) marks a reboot.
    assert '[ -n "$2" ] && [ "$2" != "570.195.03-0ubuntu0.22.04.1" ]' in postinst
    assert "/run/vllm-fleet-lab/reboot-required" in postinst


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")
def test_toolkit_packages_depend_on_each_other_exactly(repo):
    out, _ = repo
    deb = out / "pool" / "main" / "nvidia-container-toolkit_1.17.8-1_amd64.deb"
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert depends == "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (= 1.17.8-1)"


def test_nvidia_ctk_configures_docker_like_the_real_one(builder, tmp_path):
    script = tmp_path / "nvidia-ctk"
    script.write_text(builder._script("nvidia-ctk", VERSION="1.17.8-1", UPSTREAM="1.17.8"))
    config = tmp_path / "docker" / "daemon.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"log-driver": "journald"}))
    done = subprocess.run([sys.executable, str(script), "runtime", "configure", "--runtime=docker",
                           f"--config={config}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(config.read_text()) == {
        "log-driver": "journald", "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    version = subprocess.run([sys.executable, str(script), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "NVIDIA Container Toolkit CLI version 1.17.8"
    other = subprocess.run([sys.executable, str(script), "runtime", "configure", "--runtime=crio"],
                           capture_output=True, text=True)
    assert other.returncode == 2 and "vllm-fleet lab simulator" in other.stderr


# ------------------------------------------------------------------ the engine's release wheel

def test_release_wheel_installs_as_that_release(tmp_path):
    wheel = artifacts.build_engine_release(tmp_path / "wheels", "0.11.2", ["torch==2.9.0"])
    assert wheel.name == "vllm-0.11.2-py3-none-any.whl"
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stderr
    version = subprocess.run([str(env_dir / "bin" / "vllm"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "0.11.2", version.stderr
    metadata = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                               "from importlib.metadata import requires; print(requires('vllm'))"],
                              capture_output=True, text=True).stdout
    assert "torch==2.9.0" in metadata


def test_a_slow_release_wheel_paces_its_stream_and_a_good_one_does_not(tmp_path):
    import zipfile

    slow = artifacts.build_engine_release(tmp_path / "slow", "0.11.2.post2", [], piece_seconds=0.05)
    good = artifacts.build_engine_release(tmp_path / "good", "0.11.2", [])
    with zipfile.ZipFile(slow) as wheel:
        assert wheel.read("vllm/_release_slow.py").decode().endswith("PIECE_SECONDS = 0.05\n")
    with zipfile.ZipFile(good) as wheel:
        assert "vllm/_release_slow.py" not in wheel.namelist()
    # What the engine does with it, each release unpacked as pip would: a pause before each streamed piece.
    timing = "import time; from vllm.entrypoints.openai import serving as s; t = time.monotonic(); " \
             "list(s.paced(['a ', 'b ', 'c '])); print(round(time.monotonic() - t, 2))"
    took = {}
    for name, wheel in (("slow", slow), ("good", good)):
        with zipfile.ZipFile(wheel) as unpacked:
            unpacked.extractall(tmp_path / f"{name}-site")
        done = subprocess.run([sys.executable, "-c", timing], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(tmp_path / f"{name}-site")})
        assert done.returncode == 0, done.stderr
        took[name] = float(done.stdout)
    assert took["slow"] >= 0.15 and took["good"] < 0.05, took


# ------------------------------------------------------------------ the lab inventory

def test_lab_inventory_of_an_nvidia_node_is_valid():
    """The templates with a manifest of the lab's shape give an inventory that validates."""
    paths = LabPaths("unit", 30000)
    web = paths.web_url
    manifest = {
        "pypi": {"index_url": f"{web}/pypi/simple/"},
        "artifacts": {"tiktoken_o200k": {"url": f"{web}/artifacts/tiktoken/o200k_base.tiktoken",
                                         "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"}},
        "apt": {"nvidia": {"url": f"{web}/apt/nvidia", "suites": ["stable"], "components": ["main"], "packages": {}}},
        "hub": {"openai/gpt-oss-20b": {"size_gb": 6.2e-06}},
        "hub_endpoints": {"hf_endpoint": f"{web}/huggingface", "modelscope_endpoint": f"{web}/modelscope"},
        "git": {},
    }
    node = Node(name="nvidia-01", vendor="nvidia", index=0, ssh_port=30001, machine="vf-unit-nvidia-01")
    ctx = inventory.render_context(paths, [node], manifest)
    host_vars = lab_host_vars(ctx, node, "nvidia-nodes")
    assert validate_hosts({"nvidia-01": host_vars}) == []
    assert host_vars["nvidia_driver_apt_repositories"] == [{
        "name": "vllm-fleet-lab", "uris": [f"{web}/apt/nvidia"], "suites": ["stable"], "components": ["main"],
        "trusted": True}]
    (model,) = host_vars["fleet_models"]
    assert [a["source"]["repo"] for a in model["lora_adapters"]] == [
        "vllm-fleet-lab/gpt-oss-20b-lora-support", "vllm-fleet-lab/gpt-oss-20b-lora-coding"]
    assert "port" not in model  # from the node's fleet_serve_base_port
