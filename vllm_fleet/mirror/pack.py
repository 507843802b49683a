"""Carrying a mirror across the air gap: ``mirror pack`` writes the directory as one tar stream cut
into volumes of a bounded size (a file larger than a volume, a model shard, spans two), with
``SHA256SUMS`` of the volumes and ``PACK.json`` (their order, the mirror manifest's checksum), all of
it but ``keys/`` (the secret key a sync created to sign the apt repository);
``mirror verify`` checks a pack's volumes as it checks a mirror's files; ``mirror unpack`` checks,
then extracts the stream (tarfile's "data" filter: no absolute paths, links out of the tree or
device files) and verifies the mirror it wrote.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

from vllm_fleet.mirror import apt, store

PACK = "PACK.json"
SUMS = "SHA256SUMS"


class _Volumes:
    """A write-only stream that cuts what it is given into files of at most `size` bytes."""

    def __init__(self, out: Path, size: int):
        self.out, self.size, self.names, self.handle, self.left = out, size, [], None, 0
        self.digests: dict[str, str] = {}
        self._digest = None

    def _next(self) -> None:
        self._close()
        name = f"mirror.tar.{len(self.names) + 1:04d}"
        self.names.append(name)
        self.handle, self.left, self._digest = open(self.out / name, "wb"), self.size, hashlib.sha256()

    def _close(self) -> None:
        if self.handle:
            self.handle.close()
            self.digests[self.names[-1]] = self._digest.hexdigest()
            self.handle = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if not self.handle or not self.left:
                self._next()
            chunk = view[: self.left]
            self.handle.write(chunk)
            self._digest.update(chunk)
            self.left -= len(chunk)
            view = view[len(chunk):]
        return len(data)

    def close(self) -> None:
        self._close()


def pack(root: Path, out: Path, volume_bytes: int, log=print) -> list[str]:
    """Pack the mirror at `root` into `out`; returns the problems that stop it ([] when packed)."""
    root, out = Path(root), Path(out)
    problems = store.verify(root, log=log)
    if problems:
        return [f"{root} is not whole, nothing packed: {p}" for p in problems]
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("mirror.tar.*"), out / SUMS, out / PACK]:
        old.unlink(missing_ok=True)
    volumes = _Volumes(out, volume_bytes)
    with tarfile.open(fileobj=volumes, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            # The key a sync created to sign the apt repository stays on the connected side.
            if path.relative_to(root).parts[0] == apt.KEYS_DIR:
                continue
            # Directories too: a bare repository's empty refs/ directories are part of it.
            if path.is_dir() or (path.is_file() and not path.name.endswith(".part")):
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    volumes.close()
    (out / SUMS).write_text("".join(f"{volumes.digests[n]}  {n}\n" for n in volumes.names))
    (out / PACK).write_text(json.dumps({"volumes": volumes.names, "volume_bytes": volume_bytes,
                                        "manifest_sha256": store.sha256_file(root / store.MANIFEST)}, indent=1) + "\n")
    total = sum((out / n).stat().st_size for n in volumes.names)
    log(f"packed {root} into {len(volumes.names)} volume(s) of at most {volume_bytes} bytes in {out} ({total} bytes)")
    return []


def verify_pack(out: Path, log=print) -> list[str]:
    """Every problem of a pack's volumes: missing, extra bytes, a checksum that differs."""
    out = Path(out)
    meta = json.loads((out / PACK).read_text())
    sums = dict(reversed(line.split("  ", 1)) for line in (out / SUMS).read_text().splitlines() if line)
    problems = []
    for name in meta["volumes"]:
        path = out / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif store.sha256_file(path) != sums.get(name):
            problems.append(f"{name}: sha256 differs from {SUMS} (corrupted on the way)")
    log(f"verified {len(meta['volumes'])} volume(s): {len(problems)} problem(s)")
    return problems


class _Chain:
    """The volumes read back as one stream."""

    def __init__(self, paths: list[Path]):
        self.paths, self.handle = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self.handle is None:
                if not self.paths:
                    return b""
                self.handle = open(self.paths.pop(0), "rb")
            data = self.handle.read(size)
            if data:
                return data
            self.handle.close()
            self.handle = None


def unpack(out: Path, root: Path, log=print) -> list[str]:
    out, root = Path(out), Path(root)
    problems = verify_pack(out, log=log)
    if problems:
        return problems
    meta = json.loads((out / PACK).read_text())
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=_Chain([out / n for n in meta["volumes"]]), mode="r|") as tar:
        for member in tar:
            # A file already there is replaced, never rewritten in place: on a mirror host the registry's
            # store shares the image layers' files (roles/services/mirror links them), and serves them meanwhile.
            safe = tarfile.data_filter(member, str(root))
            target = root / safe.name
            if safe.isfile() and target.is_file() and not target.is_symlink():
                target.unlink()
            tar.extract(safe, root, filter="data")
    if store.sha256_file(root / store.MANIFEST) != meta["manifest_sha256"]:
        return [f"{root / store.MANIFEST}: not the manifest the pack was made from"]
    return store.verify(root, log=log)
