"""Assembles the lab's web root and runs the lab's web server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from vllm_fleet.lab import artifacts
from vllm_fleet.lab.paths import FIXTURES_DIR, INVENTORY_TEMPLATES, LabPaths

WEB_SCRIPT = FIXTURES_DIR / "services" / "labweb.py"


def lab_matrix_versions() -> dict:
    """The versions the lab inventory pins (read from its template) that artifacts are built for."""
    path = INVENTORY_TEMPLATES / "versions.yml"
    return yaml.safe_load(path.read_text())


def build(paths: LabPaths, log=print) -> dict:
    """Build the web root into a fresh directory, swap it in, return the manifest."""
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
    manifest["artifacts"].update(_vendor_installers(new / "artifacts", paths, versions))

    _write_sha256sums(new / "artifacts")
    (new / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    old = paths.root / "www.old"
    if paths.www.exists():
        paths.www.rename(old)
    new.rename(paths.www)
    shutil.rmtree(old, ignore_errors=True)
    paths.manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def _vendor_installers(art_dir: Path, paths: LabPaths, versions: dict) -> dict:
    """Build the simulated vendor installers each vendor's fixtures provide."""
    out: dict = {}
    ascend_builder = FIXTURES_DIR / "installers" / "ascend" / "build.py"
    if ascend_builder.exists():
        sys.path.insert(0, str(ascend_builder.parent))
        try:
            import build as ascend_build  # noqa: PLC0415 - the fixture's own builder
        finally:
            sys.path.pop(0)
        v = versions["ascend"]
        # The builder's package keys -> the matrix's component names.
        keys = {"driver": "npu_driver", "firmware": "npu_firmware", "toolkit": "cann_toolkit",
                "kernels": "cann_kernels", "nnal": "cann_nnal"}
        built = ascend_build.build_all(art_dir / "ascend", {k: v[m] for k, m in keys.items()}, arch=os.uname().machine)
        for key, info in built.items():
            out[keys[key]] = {"url": f"{paths.web_url}/artifacts/ascend/{info['filename']}",
                         "file": info["filename"], "sha256": info["sha256"], "version": info["version"]}
        sys.modules.pop("build", None)
    return out


def _write_sha256sums(art_dir: Path) -> None:
    for d in [art_dir, *[p for p in art_dir.rglob("*") if p.is_dir()]]:
        files = sorted(p for p in d.iterdir() if p.is_file() and p.name != "SHA256SUMS")
        if files:
            (d / "SHA256SUMS").write_text("".join(f"{artifacts.sha256_file(f)}  {f.name}\n" for f in files))


# ------------------------------------------------------------------ server

def _pidfile(paths: LabPaths) -> Path:
    return paths.root / "web.pid"


def server_pid(paths: LabPaths) -> int | None:
    pidfile = _pidfile(paths)
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
        return pid
    except (ValueError, ProcessLookupError):
        pidfile.unlink(missing_ok=True)
        return None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def start_server(paths: LabPaths) -> None:
    if server_pid(paths) is not None:
        return
    if port_open(paths.web_port):
        raise RuntimeError(f"port {paths.web_port} on 127.0.0.1 is taken by another program; "
                           "choose another --port-base for this lab")
    log = open(paths.root / "web.log", "ab")
    proc = subprocess.Popen([sys.executable, str(WEB_SCRIPT), "--root", str(paths.www), "--port", str(paths.web_port)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    _pidfile(paths).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if port_open(paths.web_port):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"the lab web server did not start; see {paths.root / 'web.log'}")


def stop_server(paths: LabPaths) -> None:
    pid = server_pid(paths)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    _pidfile(paths).unlink(missing_ok=True)
