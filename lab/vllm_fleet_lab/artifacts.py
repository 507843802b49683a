"""Builds what the lab's web server serves: git mirror, pip index, artifacts.

Everything is built deterministically (fixed commit dates, fixed archive
timestamps), so the same fixtures give the same commits and the same sha256 on
every machine; the lab inventory pins them like a real inventory pins upstream's.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import yaml

from vllm_fleet.mirror import store
from vllm_fleet_lab.paths import CACHE_DIR, FIXTURES_DIR, cache_lock

# Identity and date of every commit the lab makes, so commit ids never change.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "vllm-fleet lab", "GIT_AUTHOR_EMAIL": "lab@vllm-fleet.invalid",
    "GIT_COMMITTER_NAME": "vllm-fleet lab", "GIT_COMMITTER_EMAIL": "lab@vllm-fleet.invalid",
    "GIT_AUTHOR_DATE": "2025-12-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2025-12-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}
#: The canonical URL whose sha1 names the tiktoken cache entry (what openai-harmony looks up).
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def fixture_module(path: Path, name: str):
    """Import one of the fixtures' scripts (a vendor's installer builder, the hub) by its
    path: they live in lab/fixtures, outside this package, and also run on their own."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def published(built: dict, url_prefix: str) -> dict:
    """A builder's ``{key: {filename, sha256, version}}`` as the manifest's
    ``{key: {url, file, sha256, version}}``, the files served under ``url_prefix``."""
    return {key: {"url": f"{url_prefix}/{info['filename']}", "file": info["filename"],
                  "sha256": info["sha256"], "version": info["version"]}
            for key, info in built.items()}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git(*args: str, cwd: Path, env_extra: dict | None = None) -> str:
    env = {**os.environ, **_GIT_ENV, **(env_extra or {})}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


# ---------------------------------------------------------------- git mirror

def build_repo(src: Path, bare: Path, *, submodules: dict[str, tuple[str, str]] | None = None,
               after_pin: bool = True) -> dict:
    """Publish `src` as a bare repository at `bare`; return {pinned, head}.

    The pinned commit holds the fixture tree. When `after_pin`, a second commit
    on top makes HEAD differ from the pin, so a role that forgets to check out the
    pinned commit is caught. `submodules` maps path -> (url, commit) gitlinks.
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(src, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".git"))
        _git("init", "-q", "-b", "main", cwd=work)
        if submodules:
            lines = []
            for path, (url, commit) in sorted(submodules.items()):
                lines += [f'[submodule "{path}"]', f"\tpath = {path}", f"\turl = {url}"]
                _git("update-index", "--add", "--cacheinfo", f"160000,{commit},{path}", cwd=work)
            (work / ".gitmodules").write_text("\n".join(lines) + "\n")
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", f"{src.name}: lab stand-in", cwd=work)
        pinned = _git("rev-parse", "HEAD", cwd=work)
        if after_pin:
            (work / "UNRELEASED.md").write_text("Work after the pinned commit; not for deployment.\n")
            _git("add", "-A", cwd=work)
            _git("commit", "-q", "-m", "work after the pin", cwd=work)
        head = _git("rev-parse", "HEAD", cwd=work)
        if bare.exists():
            shutil.rmtree(bare)
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "-q", "--bare", str(work), str(bare), cwd=Path(tmp))
    _git("repack", "-q", "-a", "-d", cwd=bare)
    # The dumb HTTP protocol needs info/refs and objects/info/packs.
    _git("update-server-info", cwd=bare)
    return {"pinned": pinned, "head": head}


def build_github_standin(url: str, ref: str, github_dir: Path) -> str:
    """Publish a stand-in for a third-party source a fixture's build fetches (CMake's FetchContent:
    `url` at `ref`) under `github_dir`/<its URL's path>, as GitHub serves it; return its commit.

    Its one commit depends on the URL only, so it is the same on every machine: a fixture that pins
    a commit (as vLLM pins FlashAttention's) pins this one, and a drift is an error here. A tag is
    created on it.
    """
    path = urlparse(url).path.strip("/")
    bare = github_dir / path  # where the URL points, with or without .git, as GitHub answers both
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        _git("init", "-q", "-b", "main", cwd=work)
        (work / "README.md").write_text(f"Stands in for {url} (vllm-fleet lab): nothing is built from it.\n")
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", f"{path}: lab stand-in", cwd=work)
        commit = _git("rev-parse", "HEAD", cwd=work)
        if re.fullmatch(r"[0-9a-f]{40}", ref):
            if ref != commit:
                raise RuntimeError(f"a lab fixture pins {url} at {ref}, but its stand-in's commit is {commit}: "
                                   f"pin that one in the fixture (lab/fixtures/repos)")
        else:
            _git("tag", ref, cwd=work)
        if not bare.exists():
            bare.parent.mkdir(parents=True, exist_ok=True)
            _git("clone", "-q", "--bare", str(work), str(bare), cwd=Path(tmp))
        elif not re.fullmatch(r"[0-9a-f]{40}", ref):
            _git("fetch", "-q", str(work), f"refs/tags/{ref}:refs/tags/{ref}", cwd=bare)
    _git("update-server-info", cwd=bare)
    return commit


# ---------------------------------------------------------------- wheels

def write_wheel(out_dir: Path, name: str, version: str, files: dict[str, str | bytes],
                requires: list[str] | None = None, summary: str = "",
                scripts: dict[str, str] | None = None) -> Path:
    """Write a pure-Python wheel with fixed timestamps.

    Hand-written rather than `pip wheel` because a build backend stamps the
    current time into the archive, and the lab's index must give the same
    sha256 on every build. `scripts` maps console scripts to ``module:function``
    (entry_points.txt), which pip turns into executables in the venv's bin/.
    """
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
            f"Summary: {summary or name + ' (vllm-fleet lab stand-in)'}"]
    meta += [f"Requires-Dist: {r}" for r in (requires or [])]
    entries: dict[str, bytes] = {p: (c.encode() if isinstance(c, str) else c) for p, c in files.items()}
    entries[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    if scripts:
        lines = ["[console_scripts]"] + [f"{script} = {target}" for script, target in sorted(scripts.items())]
        entries[f"{info}/entry_points.txt"] = ("\n".join(lines) + "\n").encode()
    entries[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: vllm-fleet-lab\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n")
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in sorted(entries.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries[f"{info}/RECORD"] = record.getvalue().encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in sorted(entries.items()):
            zi = zipfile.ZipInfo(path, date_time=(2025, 12, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return target


def build_standin_wheels(out_dir: Path) -> list[Path]:
    """Build the stand-in distributions listed in wheels/standins.yml."""
    plan = yaml.safe_load((FIXTURES_DIR / "wheels" / "standins.yml").read_text())
    built = []
    for dist in plan["distributions"]:
        src = FIXTURES_DIR / "wheels" / dist["source"]
        for version in dist["versions"]:
            files = {}
            for path in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                text = path.read_text().replace("@VERSION@", version)
                files[str(path.relative_to(src))] = text
            requires = [r.replace("@VERSION@", version) for r in dist.get("requires", [])]
            built.append(write_wheel(out_dir, dist["name"], version, files, requires, dist.get("summary", "")))
    for release in plan.get("engine_releases", []):
        built.append(build_engine_release(out_dir, release["version"], release.get("requires", []),
                                          startup_error=release.get("startup_error"),
                                          piece_seconds=release.get("piece_seconds")))
    return built


#: The engine stand-in (repos/vllm), which the lab also publishes as release wheels.
ENGINE_DIR = FIXTURES_DIR / "repos" / "vllm"


def build_engine_release(out_dir: Path, version: str, requires: list[str], startup_error: str | None = None,
                         piece_seconds: float | None = None) -> Path:
    """The engine stand-in as the release wheel ``vllm==version`` of a pip index.

    What ``pip install vllm==<release>`` gets from PyPI: the package, a
    ``vllm/_version.py`` naming the release (as setuptools-scm writes it into a
    release build, and which the stand-in's version module reads first), the
    ``vllm`` console script, and the release's requirements (the torch it pins).
    With `startup_error`, a bad release: ``vllm/_release_fault.py`` carries the message
    ``vllm serve`` fails with at start-up (vllm.entrypoints.cli.main). With `piece_seconds`,
    a slow release: ``vllm/_release_slow.py`` makes the engine pause that long before each
    streamed piece (vllm.entrypoints.openai.serving).
    """
    files: dict[str, str | bytes] = {}
    package = ENGINE_DIR / "vllm"
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if path.name == "_version.py":
            continue  # a checkout's own build output; the release's is written below
        files[path.relative_to(ENGINE_DIR).as_posix()] = path.read_bytes()
    files["vllm/_version.py"] = f"# Written by the lab's release build.\n__version__ = version = {version!r}\n"
    if startup_error:
        files["vllm/_release_fault.py"] = ("# Written by the lab's release build: a bad release.\n"
                                           f"MESSAGE = {startup_error!r}\n")
    if piece_seconds:
        files["vllm/_release_slow.py"] = ("# Written by the lab's release build: a slow release.\n"
                                          f"PIECE_SECONDS = {float(piece_seconds)!r}\n")
    return write_wheel(out_dir, "vllm", version, files, requires,
                       "A high-throughput and memory-efficient inference and serving engine for LLMs "
                       "(vllm-fleet lab stand-in)", scripts={"vllm": "vllm.entrypoints.cli.main:main"})


def download_real_wheels(out_dir: Path, log=print) -> list[Path]:
    """Fetch (once, cached) the real wheels nodes install from the lab's index."""
    reqs = FIXTURES_DIR / "wheels" / "real-requirements.txt"
    key = hashlib.sha256(reqs.read_bytes()).hexdigest()[:12]
    cache = CACHE_DIR / "wheels" / key
    with cache_lock(cache):
        _download_real_wheels(cache, reqs, log)
    out_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for whl in sorted(cache.glob("*.whl")):
        shutil.copy2(whl, out_dir / whl.name)
        copied.append(out_dir / whl.name)
    return copied


def _download_real_wheels(cache: Path, reqs: Path, log) -> None:
    if not (cache / ".complete").exists():
        log("downloading the real wheels lab nodes need (openai-harmony, build tools) into the lab cache")
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys_python(), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_36_x86_64",
               "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
               "--platform", "manylinux2014_x86_64",
               "--platform", "any", "--implementation", "cp", "-d", str(cache), "-r", str(reqs)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"pip download for the lab index failed:\n{proc.stderr[-2000:]}")
        (cache / ".complete").write_text("ok\n")


def sys_python() -> str:
    return sys.executable


def write_simple_index(packages_dir: Path, simple_dir: Path) -> dict[str, list[str]]:
    """Write a PEP 503 index for every wheel in packages_dir; return project -> files (the
    product's index writer, vllm_fleet.mirror.store, which the fleet's mirror serves too)."""
    return store.write_index({w.name: sha256_file(w) for w in packages_dir.glob("*.whl")}, simple_dir)


# ---------------------------------------------------------------- tokenizer

def build_o200k(out_file: Path, expected_sha256: str, log=print) -> str:
    """Rebuild the real o200k_base.tiktoken offline from the npm package `tiktoken`.

    Its encoders/o200k_base.json holds `bpe_ranks` as lines "! <first-rank> <b64> <b64> ...";
    writing "<b64> <rank>" per token gives upstream's exact file.
    """
    cache = CACHE_DIR / "npm"
    cache.mkdir(parents=True, exist_ok=True)
    with cache_lock(cache):
        tarballs = _tiktoken_tarballs(cache, log)
    with tarfile.open(tarballs[-1]) as tf:
        data = json.load(tf.extractfile("package/encoders/o200k_base.json"))
    return _write_o200k(data, out_file, expected_sha256)


def _tiktoken_tarballs(cache: Path, log) -> list[Path]:
    tarballs = sorted(cache.glob("tiktoken-*.tgz"))
    if not tarballs:
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed once to fetch the tokenizer source (run scripts/setup)")
        log("fetching the npm package tiktoken to rebuild o200k_base.tiktoken offline")
        proc = subprocess.run(["npm", "pack", "--silent", "tiktoken@1.0.22"], cwd=cache, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"npm pack tiktoken failed: {proc.stderr.strip()}")
        tarballs = sorted(cache.glob("tiktoken-*.tgz"))
    return tarballs


def _write_o200k(data: dict, out_file: Path, expected_sha256: str) -> str:
    lines = []
    for row in data["bpe_ranks"].split("\n"):
        if not row:
            continue
        parts = row.split(" ")
        first = int(parts[1])
        lines += [f"{tok} {first + i}\n" for i, tok in enumerate(parts[2:])]
    blob = "".join(lines).encode()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != expected_sha256:
        raise RuntimeError(f"rebuilt o200k_base.tiktoken has sha256 {digest}, expected {expected_sha256}")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(blob)
    return digest
