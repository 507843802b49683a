"""The mirror's transfers, each resumable and verified, each with the tool that owns its protocol:

- files over HTTP(S) by ``urllib`` (the standard library's: a ranged GET that continues a
  ``.part`` file is all a resumable, checksummed download needs, and nothing is added to the
  controller for it);
- git by ``git`` itself (a bare repository per URL, the pinned commits and tags kept under refs
  so that ``git update-server-info`` publishes them to dumb-HTTP clients);
- pip's own resolver (``pip install --dry-run --report``) for the nodes' Python and platform,
  then each wheel as a file with the index's sha256;
- the hubs' own clients (``huggingface_hub``, ``modelscope``) in a child process
  (``python -m vllm_fleet.mirror.hubclient``), so each gets only its endpoint's environment;
- a model of a ``git`` source by ``git`` and ``git lfs`` (Debian's git-lfs), as a node would clone it,
  into a working copy kept in a cache between syncs (``git_model_checkout``).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from vllm_fleet.mirror import bom

_CHUNK = 1 << 20
TIMEOUT = 60


class FetchError(RuntimeError):
    """A transfer failed from every source; the message names each source and why."""


def human(size: int | None) -> str:
    if size is None:
        return "? B"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"


def head_size(url: str) -> int | None:
    """The size an HTTP source announces for a file (None when it says nothing or cannot be reached)."""
    if url.startswith("file://"):
        path = Path(url[len("file://"):])
        return path.stat().st_size if path.is_file() else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=TIMEOUT) as resp:
            length = resp.headers.get("Content-Length")
            return int(length) if length is not None else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def http_file(urls: list[str], dest: Path, sha256: str | None, progress=None) -> tuple[int, str]:
    """Fetch the first source that gives a file of `sha256` (any, when None) into `dest`; a ``.part``
    left by a cut transfer is continued with a range request. Returns (bytes received, sha256)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in urls:
        try:
            return _http_one(url, dest, sha256, progress)
        except FetchError as exc:
            errors.append(f"{url}: {exc}")
        except (OSError, urllib.error.URLError, ValueError, http.client.HTTPException) as exc:
            errors.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
    raise FetchError("; ".join(errors) or "no source")


def _http_one(url: str, dest: Path, sha256: str | None, progress) -> tuple[int, str]:
    part = dest.with_name(dest.name + ".part")
    start = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    received = 0
    with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
        if start and resp.status != 206:
            start = 0  # the source does not resume: from the beginning
        total = resp.headers.get("Content-Length")
        total = int(total) + start if total is not None else None
        with open(part, "ab" if start else "wb") as out:
            for block in iter(lambda: resp.read(_CHUNK), b""):
                out.write(block)
                received += len(block)
                if progress:
                    progress(start + received, total)
    if total is not None and start + received < total:
        raise FetchError(f"cut after {start + received} of {total} bytes (kept: the next sync resumes it)")
    digest = hashlib.sha256()
    with open(part, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    got = digest.hexdigest()
    if sha256 and got != sha256:
        part.unlink()
        raise FetchError(f"sha256 {got}, the inventory pins {sha256}: not kept")
    os.replace(part, dest)
    return received, got


# ---------------------------------------------------------------- git

def _git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check, env=env)


def git_has(repo: Path, ref: str) -> bool:
    return repo.is_dir() and _git("-C", str(repo), "cat-file", "-e", f"{ref}^{{commit}}", check=False).returncode == 0


def git_ref(repo: Path, ref: str) -> tuple[str, str]:
    """(what to fetch, where to keep it) for a pinned commit or a tag. A commit is kept as a branch:
    what a node's `git clone` of the mirror fetches (it takes branches and tags, no other refs)."""
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref, f"refs/heads/fleet/pinned/{ref}"
    return f"refs/tags/{ref}", f"refs/tags/{ref}"


def git_fetch(urls: list[str], repo: Path, ref: str) -> None:
    """Fetch a commit (or tag) into the bare `repo` from the first source that has it; keep it under a
    ref, publish it to dumb-HTTP clients. A source that only serves advertised refs (git's dumb
    HTTP, some servers) is fetched whole and the commit looked for in what came."""
    if not repo.is_dir():
        repo.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "--quiet", "--bare", str(repo))
    want, keep = git_ref(repo, ref)
    errors = []
    for url in urls:
        done = _git("-C", str(repo), "fetch", "--quiet", "--no-tags", url, f"+{want}:{keep}", check=False)
        if done.returncode != 0 and want == ref:
            done = _git("-C", str(repo), "fetch", "--quiet", "--no-tags", url,
                        "+refs/heads/*:refs/fleet/heads/*", "+refs/tags/*:refs/tags/*", check=False)
            if done.returncode == 0 and git_has(repo, ref):
                _git("-C", str(repo), "update-ref", keep, ref)
        if git_has(repo, want if want != ref else ref):
            _git("-C", str(repo), "update-server-info")
            return
        errors.append(f"{url}: " + (" ".join(done.stderr.split())[-300:] if done.returncode else f"has no {ref}"))
    raise FetchError("; ".join(errors))


#: The working copies of git model sources, kept between syncs (a sync cut off resumes from what came, a
#: second one fetches only what changed); VLLM_FLEET_GIT_CACHE moves it, ~/.cache serves where it is not writable.
GIT_MODEL_CACHE = Path("/var/cache/vllm-fleet/models-git")


def cache_dir(default: Path, env: str) -> Path:
    """A cache of the sync's kept between runs: `env` when set, else `default` (under /var/cache) when
    it can be written, else the same name under ~/.cache/vllm-fleet."""
    if os.environ.get(env):
        return Path(os.environ[env])
    try:
        default.mkdir(parents=True, exist_ok=True)
        if os.access(default, os.W_OK):
            return default
    except OSError:
        pass
    return Path.home() / ".cache" / "vllm-fleet" / default.name


def git_model_cache() -> Path:
    return cache_dir(GIT_MODEL_CACHE, "VLLM_FLEET_GIT_CACHE")


def lfs_url(url: str) -> str:
    """The LFS endpoint of a git URL, as git-lfs derives it (<repository>.git/info/lfs)."""
    base = url.rstrip("/")
    return f"{base if base.endswith('.git') else base + '.git'}/info/lfs"


def git_model_checkout(url: str, revision: str, work: Path) -> tuple[str, list[str]]:
    """Check out `revision` of the git model at `url` (a branch, tag or commit; HEAD: the remote's) in the
    working copy `work`, with its LFS files whole, as roles/blocks/model_fetch's source_git.yml clones it on
    a node: a full fetch (a hub's dumb HTTP cannot answer a shallow one), the revision resolved among the
    remote's branches, then as a tag or commit. Only `url` is contacted: its LFS endpoint is set from it,
    never from a .lfsconfig of the repository. Returns (the commit, the checked-out files, sorted)."""
    if shutil.which("git-lfs") is None:
        raise FetchError("git-lfs is not installed on this machine (apt-get install git-lfs)")
    if not (work / ".git").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        _git("init", "--quiet", str(work))
    repo = ("-C", str(work))
    for key, value in (("remote.origin.url", url), ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
                       ("lfs.url", lfs_url(url)), ("remote.origin.lfsurl", lfs_url(url)),
                       ("submodule.recurse", "false")):
        _git(*repo, "config", key, value)
    # The LFS filters of this working copy only: a checkout writes pointers, `git lfs pull` the files.
    _git(*repo, "lfs", "install", "--local", "--skip-smudge", "--force")
    done = _git(*repo, "fetch", "--quiet", "--tags", "origin", check=False)
    if done.returncode != 0:
        raise FetchError(f"git fetch {url}: " + " ".join(done.stderr.split())[-300:])
    if revision == "HEAD":
        done = _git(*repo, "fetch", "--quiet", "origin", "HEAD", check=False)
        commit = _git(*repo, "rev-parse", "--verify", "FETCH_HEAD^{commit}", check=False) if not done.returncode \
            else done
    else:
        commit = _git(*repo, "rev-parse", "-q", "--verify", f"refs/remotes/origin/{revision}^{{commit}}", check=False)
        if commit.returncode != 0:
            commit = _git(*repo, "rev-parse", "-q", "--verify", f"{revision}^{{commit}}", check=False)
    if commit.returncode != 0:
        raise FetchError(f"{url} has no {revision}" + (": " + " ".join(commit.stderr.split())[-300:]
                                                       if commit.stderr.strip() else ""))
    sha = commit.stdout.strip()
    done = _git(*repo, "checkout", "--quiet", "--force", "--detach", sha, check=False)
    if done.returncode == 0:
        done = _git(*repo, "lfs", "pull", "origin", check=False)
    if done.returncode != 0:
        raise FetchError(f"{url}@{revision}: " + " ".join(done.stderr.split())[-300:])
    names = sorted(n for n in _git(*repo, "ls-files", "-z").stdout.split("\0") if n)
    pointers = [n for n in _git(*repo, "lfs", "ls-files", "--name-only").stdout.splitlines()
                if not _lfs_whole(work / n)]
    if pointers:
        raise FetchError(f"{url}@{revision}: git lfs pull left pointers, not files: {', '.join(pointers[:5])}")
    return sha, names


def _lfs_whole(path: Path) -> bool:
    """Whether a file git-lfs tracks holds its content (not the pointer a checkout without it writes)."""
    with open(path, "rb") as handle:
        head = handle.read(200)
    return not head.startswith(b"version https://git-lfs.github.com/spec/v1\n")


_FETCH_CONTENT = re.compile(r"FetchContent_Declare\s*\((?P<body>[^)]*)\)", re.S)


def fetch_content_deps(repo: Path, commit: str) -> list[tuple[str, str]]:
    """(GIT_REPOSITORY, GIT_TAG) of every CMake FetchContent declaration in the commit's build files:
    the third-party sources a build of it fetches at configure time. Declarations built from CMake
    variables (${...}) cannot be read statically and are left out."""
    names = _git("-C", str(repo), "ls-tree", "-r", "--name-only", commit).stdout.split("\n")
    deps = []
    for name in names:
        if not (name.endswith(".cmake") or name.endswith("CMakeLists.txt")):
            continue
        text = _git("-C", str(repo), "show", f"{commit}:{name}").stdout
        for match in _FETCH_CONTENT.finditer(text):
            fields = dict(re.findall(r"\b(GIT_REPOSITORY|GIT_TAG)\s+(\S+)", match["body"]))
            url, tag = fields.get("GIT_REPOSITORY", ""), fields.get("GIT_TAG", "")
            if url and tag and "${" not in url + tag and (url, tag) not in deps:
                deps.append((url, tag))
    return deps


def source_requirements(repo: Path, commit: str) -> tuple[list[str], list[str]]:
    """(build requirements, requirements) of the Python project at the commit: pyproject.toml's
    build-system.requires and project.dependencies, and the requirements files vLLM's setup.py reads
    (requirements/common.txt, requirements/build.txt), without options, includes or direct URLs."""
    def show(name: str) -> str:
        done = _git("-C", str(repo), "show", f"{commit}:{name}", check=False)
        return done.stdout if done.returncode == 0 else ""

    def lines(text: str) -> list[str]:
        out = []
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-") and " @ " not in line and "://" not in line:
                out.append(line)
        return out

    try:
        project = tomllib.loads(show("pyproject.toml") or "")
    except tomllib.TOMLDecodeError:
        project = {}
    build = [str(r) for r in (project.get("build-system") or {}).get("requires") or []]
    deps = [str(r) for r in (project.get("project") or {}).get("dependencies") or []]
    return build + lines(show("requirements/build.txt")), deps + lines(show("requirements/common.txt"))


# ---------------------------------------------------------------- pip

def pip_args(item: bom.Item) -> list[str]:
    """pip's options that make it resolve as the nodes would: their index only (the controller's pip
    configuration ignored), their Python and platform, wheels only."""
    args = ["--isolated", "--only-binary=:all:", "--python-version", item.python, "--implementation", "cp"]
    for tag in bom.PLATFORM_TAGS[item.arch]:
        args += ["--platform", tag]
    if item.index.get("index_url"):
        args += ["--index-url", item.index["index_url"]]
    for url in item.index.get("extra_index_urls", []):
        args += ["--extra-index-url", url]
    for host in item.index.get("trusted_hosts", []):
        args += ["--trusted-host", host]
    return args


def pip_resolve(item: bom.Item) -> list[dict]:
    """The wheels pip would install for the item's set on the nodes: [{name, version, url, sha256}]."""
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-pip-") as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                               "--target", str(Path(tmp) / "target"), "--report", str(report), *pip_args(item),
                               *item.specs], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            raise FetchError(" ".join(lines[-3:]) or f"pip exited {done.returncode}")
        data = json.loads(report.read_text())
    out = []
    for entry in data.get("install", []):
        info = entry.get("download_info") or {}
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        out.append({"name": entry["metadata"]["name"], "version": entry["metadata"]["version"],
                    "url": info.get("url", ""), "sha256": hashes.get("sha256", "")})
    return sorted(out, key=lambda w: w["name"].lower())


def wheel_file(url: str) -> str:
    """A wheel's file name from its URL (unquoted: a local version's "+" arrives as %2B)."""
    return urllib.parse.unquote(url.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])


# ---------------------------------------------------------------- hubs

def hub(action: str, item: bom.Item, local_dir: Path | None = None) -> dict:
    """Run the hub client of the item's source (hubclient.py) in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELSCOPE_"))}
    endpoint = item.sources[0] if item.sources else ""
    if endpoint:
        env["HF_ENDPOINT" if item.hub == "huggingface" else "MODELSCOPE_ENDPOINT"] = endpoint
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    env["HF_HUB_DISABLE_UPDATE_CHECK"] = "1"
    repo, revision = item.key[len("models/"):].rsplit("/", 1)
    argv = [sys.executable, "-m", "vllm_fleet.mirror.hubclient", action, item.hub, repo, revision]
    if local_dir is not None:
        argv.append(str(local_dir))
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        raise FetchError(f"{item.hub} {repo}@{revision}: " + (" ".join(lines[-2:]) or f"exit {done.returncode}"))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = time.monotonic() - started
    return result
