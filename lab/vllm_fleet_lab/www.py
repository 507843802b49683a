"""Assembles the lab's web root and runs the lab's web server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from vllm_fleet.mirror.fetch import fetch_content_deps
from vllm_fleet_lab import artifacts, daemons, publishers
from vllm_fleet_lab.paths import FIXTURES_DIR, INVENTORY_TEMPLATES, LabPaths

WEB_SCRIPT = FIXTURES_DIR / "services" / "labweb.py"
HUB_SCRIPT = FIXTURES_DIR / "services" / "hub.py"
#: Tiny model fixtures, one folder per repository, named <org>--<name>.
MODELS_DIR = FIXTURES_DIR / "models"


def lab_matrix_versions() -> dict:
    """The versions the lab inventory pins (read from its template) that artifacts are built for."""
    path = INVENTORY_TEMPLATES / "versions.yml"
    return yaml.safe_load(path.read_text())


def build(paths: LabPaths, log=print, vendors=()) -> dict:
    """Build the web root into a fresh directory, swap it in, return the manifest.

    Shared by every node: the git mirror, the pip index of stand-ins and real wheels, the
    tokenizer and the model hub. Each of `vendors` adds what its publisher builds (a CPU
    lab, for instance, vLLM's real CPU build and the tiny real models it serves).
    """
    new = paths.root / "www.new"
    if new.exists():
        shutil.rmtree(new)
    new.mkdir(parents=True)
    versions = lab_matrix_versions()
    manifest: dict = {"web_url": paths.web_url, "git": {}, "artifacts": {}, "pypi": {}}

    # Git mirror: the stand-in repositories at fixed commits.
    repos_dir = FIXTURES_DIR / "repos"
    for src in sorted(p for p in repos_dir.iterdir() if p.is_dir()):
        info = artifacts.build_repo(src, new / "git" / f"{src.name}.git")
        manifest["git"][src.name] = {"url": f"{paths.web_url}/git/{src.name}.git", **info}
        # What their builds fetch from GitHub (CMake's FetchContent), under /github/ (the GitHub proxy).
        for url, ref in fetch_content_deps(new / "git" / f"{src.name}.git", info["pinned"]):
            artifacts.build_github_standin(url, ref, new / "github")

    # pip index: stand-ins plus the few real wheels.
    packages = new / "pypi" / "packages"
    artifacts.build_standin_wheels(packages)
    artifacts.download_real_wheels(packages, log=log)
    manifest["pypi"] = {"index_url": f"{paths.web_url}/pypi/simple/",
                        "projects": artifacts.write_simple_index(packages, new / "pypi" / "simple")}

    # Artifacts: tokenizer, vendor installers.
    o200k = new / "artifacts" / "tiktoken" / "o200k_base.tiktoken"
    sha = artifacts.build_o200k(o200k, versions["tiktoken_o200k"]["sha256"], log=log)
    manifest["artifacts"]["tiktoken_o200k"] = {
        "url": f"{paths.web_url}/artifacts/tiktoken/o200k_base.tiktoken", "sha256": sha}
    # What the lab's vendors download of their own (lab/vllm_fleet_lab/publishers/<vendor>.py).
    site = publishers.Site(www=new, paths=paths, versions=versions, packages=packages, log=log,
                           models_dirs=[MODELS_DIR])
    publishers.publish(vendors, site, manifest)

    # Model hub: the tiny models over the Hugging Face, ModelScope and git-lfs protocols.
    manifest["hub"] = build_hub(new, site.models_dirs)
    manifest["hub_endpoints"] = hub_endpoints(paths.web_url)

    _write_sha256sums(new / "artifacts")
    (new / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    old = paths.root / "www.old"
    if paths.www.exists():
        paths.www.rename(old)
    new.rename(paths.www)
    shutil.rmtree(old, ignore_errors=True)
    paths.manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _hub_module():
    """lab/fixtures/services/hub.py, which defines the pointer format and layout the server reads."""
    return artifacts.fixture_module(HUB_SCRIPT, "vllm_fleet_lab_hub")


def hub_endpoints(web_url: str) -> dict:
    """What a node's clients are pointed at: HF_ENDPOINT, MODELSCOPE_ENDPOINT, the git clone prefix."""
    return {"hf_endpoint": f"{web_url}/huggingface", "modelscope_endpoint": f"{web_url}/modelscope",
            "git_url_prefix": f"{web_url}/modelscope-git"}


def build_hub(www_dir: Path, models_dirs=(MODELS_DIR,)) -> dict:
    """Publish every model fixture under ``www_dir/hub``; return the manifest's ``hub`` section.

    Per repository ``hub/<org>/<name>/`` holds the files (with the ``.gitattributes``
    real hub repositories carry) and ``hub/<org>/<name>.git`` a bare repository in
    which the files matching it are LFS pointers. The commit id of that repository
    is the revision all three protocols report. ``hub/_index.json`` is what the
    server reads; the returned section is
    ``{repo_id: {"files": {path: {"size", "sha256"}}, "revision", "size_gb"}}``.
    """
    hub = _hub_module()
    hub_dir = www_dir / hub.HUB_DIR
    if hub_dir.exists():
        shutil.rmtree(hub_dir)
    hub_dir.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    index: dict = {"version": 1, "repos": {}}
    section: dict = {}
    # A model has a config.json, a LoRA adapter (PEFT's layout) an adapter_config.json.
    for src in sorted((p for d in models_dirs for p in Path(d).iterdir()
                       if (p / "config.json").is_file() or (p / "adapter_config.json").is_file()),
                      key=lambda p: p.name):
        repo_id = hub.repo_id_of_fixture(src.name)
        published = hub_dir / repo_id
        shutil.copytree(src, published, ignore=ignore)
        (published / ".gitattributes").write_text(hub.gitattributes_text())
        files: dict = {}
        with tempfile.TemporaryDirectory() as tmp:
            stage = Path(tmp) / src.name
            for path in sorted(p for p in published.rglob("*") if p.is_file()):
                name = path.relative_to(published).as_posix()
                data = path.read_bytes()
                info = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "lfs": hub.is_lfs_path(name)}
                target = stage / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if info["lfs"]:
                    pointer = hub.lfs_pointer(info["sha256"], info["size"])
                    info["pointer_size"] = len(pointer)
                    target.write_bytes(pointer)
                else:
                    target.write_bytes(data)
                files[name] = info
            revision = artifacts.build_repo(stage, hub_dir / f"{repo_id}.git", after_pin=False)["head"]
        # Blob ids of what git stores (the pointer, for LFS files) and tree ids, as the HF API lists them.
        trees: dict = {}
        listing = artifacts._git("ls-tree", "-r", "-t", revision, cwd=hub_dir / f"{repo_id}.git")
        for line in listing.splitlines():
            meta, name = line.split("\t", 1)
            _mode, kind, oid = meta.split()
            if kind == "tree":
                trees[name] = oid
            else:
                files[name]["oid"] = oid
        config_file = published / ("config.json" if (published / "config.json").is_file() else "adapter_config.json")
        config = json.loads(config_file.read_text())
        index["repos"][repo_id] = {
            "revision": revision, "files": files, "trees": trees,
            "config": {k: config[k] for k in ("architectures", "model_type") if k in config},
        }
        total = sum(info["size"] for info in files.values())
        section[repo_id] = {
            "files": {name: {"size": info["size"], "sha256": info["sha256"]} for name, info in files.items()},
            "revision": revision,
            "size_gb": round(total / 1e9, 9),
        }
    (hub_dir / hub.INDEX_NAME).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return section


def _write_sha256sums(art_dir: Path) -> None:
    for d in [art_dir, *[p for p in art_dir.rglob("*") if p.is_dir()]]:
        files = sorted(p for p in d.iterdir() if p.is_file() and p.name != "SHA256SUMS")
        if files:
            (d / "SHA256SUMS").write_text("".join(f"{artifacts.sha256_file(f)}  {f.name}\n" for f in files))


# ------------------------------------------------------------------ server

def faults_file(paths: LabPaths) -> Path:
    """The faults the server injects (labweb.py's Faults), outside the web root."""
    return paths.root / "web-faults.json"


def set_faults(paths: LabPaths, faults: dict) -> None:
    """Replace the injected faults ({url path: {"mode": "cut" | "wrong" | "slow", ...}}); {} for none."""
    tmp = faults_file(paths).with_suffix(".new")
    tmp.write_text(json.dumps(faults))
    os.replace(tmp, faults_file(paths))


def faults(paths: LabPaths) -> dict:
    """The injected faults as the server left them (with each one's ``hits``)."""
    try:
        return json.loads(faults_file(paths).read_text())
    except FileNotFoundError:
        return {}


def _pidfile(paths: LabPaths) -> Path:
    return paths.root / "web.pid"


def server_pid(paths: LabPaths) -> int | None:
    return daemons.pid(_pidfile(paths))


def start_server(paths: LabPaths) -> None:
    daemons.start([sys.executable, str(WEB_SCRIPT), "--root", str(paths.www), "--port", str(paths.web_port),
                   "--faults", str(faults_file(paths))], _pidfile(paths), paths.root / "web.log", paths.web_port,
                  "the lab web server")


def stop_server(paths: LabPaths) -> None:
    daemons.stop(_pidfile(paths))
