"""Publishes the lab's simulated ACME driver (the sixth-vendor test, tests/lab/vendor).

A tarball holding the driver's ``version`` file, which the lab's acme-smi reads on the
node; the manifest's ``artifacts.acme.driver`` gives its file name, version and sha256.
"""

from __future__ import annotations

import hashlib
import io
import tarfile

VERSION = "1.2.3"


def publish(site) -> dict:
    art_dir = site.www / "artifacts" / "acme"
    art_dir.mkdir(parents=True, exist_ok=True)
    name = f"acme-driver-{VERSION}.tar.gz"
    data = f"{VERSION}\n".encode()
    info = tarfile.TarInfo("version")
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    with tarfile.open(art_dir / name, "w:gz") as tar:
        tar.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256((art_dir / name).read_bytes()).hexdigest()
    return {"artifacts": {"acme": {"driver": {"file": name, "version": VERSION, "sha256": sha,
                                              "url": site.url(art_dir / name)}}}}
