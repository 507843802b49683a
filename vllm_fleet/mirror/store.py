"""A mirror directory's manifest (``mirror.json``) and the check of the directory against it.

The manifest is the mirror's one record of what it holds: every file under ``artifacts/``,
``pypi/packages/``, ``models/`` and ``apt/`` with its size and sha256, what each item of the bill resolved
to (a pip set's wheels, a model revision's commit and files, a repository's commits and tags, a host's
apt packages), and what the apt repository was built of and signed with.
Container images are in OCI layouts under ``images/``, recorded by item (the tag's digest and the
blobs it reaches), not file by file: a blob's file name is its sha256 (vllm_fleet.mirror.oci).
A sync writes it after each item, so a sync cut off keeps what it finished; ``verify`` recomputes
every checksum (an image's blobs against their names) and asks git for every pinned object.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

from vllm_fleet.mirror import oci

MANIFEST = "mirror.json"
VERSION = 1
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class Manifest:
    """mirror.json of `root`: {"version", "files": {rel: {size, sha256}}, "items": {item key: record}}."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / MANIFEST
        data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        if data and data.get("version") != VERSION:
            raise ValueError(f"{self.path}: manifest version {data.get('version')!r}, this vllm-fleet reads {VERSION}")
        self.files: dict[str, dict] = data.get("files", {})
        self.items: dict[str, dict] = data.get("items", {})

    def add_file(self, rel: str, sha256: str | None = None) -> dict:
        """Record a file that is in place (its checksum computed unless given, already verified)."""
        path = self.root / rel
        entry = {"size": path.stat().st_size, "sha256": sha256 or sha256_file(path)}
        self.files[rel] = entry
        return entry

    def has_file(self, rel: str, sha256: str | None = None) -> bool:
        """The file is recorded (with that checksum, when given) and on disk at its recorded size."""
        entry = self.files.get(rel)
        path = self.root / rel
        return bool(entry) and (sha256 is None or entry["sha256"] == sha256) and path.is_file() \
            and path.stat().st_size == entry["size"]

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"version": VERSION, "files": dict(sorted(self.files.items())),
                                   "items": dict(sorted(self.items.items()))}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def verify(root: Path, log=print) -> list[str]:
    """Every problem of the directory against its manifest: a file missing, of another size or
    checksum, a pinned commit or tag missing from its repository, an image's blob missing or corrupted.
    [] when the mirror is whole."""
    root = Path(root)
    if not (root / MANIFEST).is_file():
        return [f"{root}: no {MANIFEST}: not a vllm-fleet mirror (vllm-fleet mirror sync writes one)"]
    manifest = Manifest(root)
    problems = []
    for rel, entry in sorted(manifest.files.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{rel}: {path.stat().st_size} bytes, the manifest says {entry['size']}")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{rel}: sha256 differs from the manifest's {entry['sha256']} (corrupted)")
    for key, record in sorted(manifest.items.items()):
        if not key.startswith("git:"):
            continue
        repo = root / record["path"]
        for ref in [*record.get("commits", []), *(f"refs/tags/{t}" for t in record.get("tags", []))]:
            done = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{ref}^{{commit}}"],
                                  capture_output=True, check=False)
            if done.returncode != 0:
                problems.append(f"{record['path']}: {ref} is missing")
    images = {k: r for k, r in manifest.items.items() if k.startswith("image:")}
    checked: set[str] = set()  # a blob two tags share is read once
    for _, record in sorted(images.items()):
        problems += oci.verify(root, record, checked)
    log(f"verified {len(manifest.files)} file(s), {sum(k.startswith('git:') for k in manifest.items)} "
        f"repository item(s) and {len(images)} image(s): {len(problems)} problem(s)")
    return problems


def write_simple_index(root: Path) -> dict[str, list[str]]:
    """pypi/simple/ of the mirror: a PEP 503 index of every wheel the manifest records under
    pypi/packages/, each link with its sha256 (pip checks it). Returns project -> files."""
    root = Path(root)
    manifest = Manifest(root)
    wheels = {Path(rel).name: entry["sha256"] for rel, entry in manifest.files.items()
              if rel.startswith("pypi/packages/") and rel.endswith(".whl")}
    return write_index(wheels, root / "pypi" / "simple")


def write_index(wheels: dict[str, str], simple_dir: Path) -> dict[str, list[str]]:
    """A PEP 503 index in `simple_dir` of wheels (file name -> sha256) kept in ../packages/."""
    projects: dict[str, list[str]] = {}
    for name in sorted(wheels):
        projects.setdefault(re.sub(r"[-_.]+", "-", name.split("-")[0]).lower(), []).append(name)
    if simple_dir.exists():
        shutil.rmtree(simple_dir)
    simple_dir.mkdir(parents=True)
    links = []
    for project, files in sorted(projects.items()):
        (simple_dir / project).mkdir()
        rows = [f'<a href="../../packages/{quote(f)}#sha256={wheels[f]}">{html.escape(f)}</a><br/>' for f in files]
        (simple_dir / project / "index.html").write_text(
            f"<!DOCTYPE html><html><body><h1>Links for {project}</h1>\n" + "\n".join(rows) + "\n</body></html>\n")
        links.append(f'<a href="{project}/">{project}</a><br/>')
    (simple_dir / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return projects
