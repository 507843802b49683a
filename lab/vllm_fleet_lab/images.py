"""The lab's container registry: the "internet's" registry of upstream images, for container mode.

Upstream's vLLM OpenAI image (the lab's NVIDIA matrix's ``vllm_image``, read from the inventory `lab up` wrote)
is played by an image holding the engine stand-in: Debian 12's Python and bash taken from the
lab's rootfs (the files they load, found with ldd in it), the stand-in's release wheel from the
lab's pip index installed where a real image has vLLM (/usr/local/lib/python3.11/dist-packages),
``vllm`` on the PATH and ``vllm serve`` as the entrypoint. It is written here as an OCI layout
(one gzip layer, its config, its manifest) and cached under CACHE_DIR/images/<key>; no build
tool is needed, and none is reachable (no registry, no base image).

Debian's docker-registry (the one scripts/setup unpacks for the mirror's image tests) serves it
on the lab's port block (LabPaths.registry_port), filled by skopeo as a registry is filled: the
door `vllm-fleet mirror sync` copies images through (the lab inventory's
fleet_container_registry). Its access log (registry.log) is what the air-gapped checks read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from vllm_fleet_lab import daemons
from vllm_fleet_lab.paths import CACHE_DIR, LabPaths, cache_lock

#: Bumped whenever what goes into the image changes, so the cached layout is rebuilt.
REVISION = 1
#: What the image holds from the rootfs: bash (vllm-fleet's launcher is a bash script) and Python,
#: with every shared object they and Python's extension modules load.
PROGRAMS = ("usr/bin/bash", "usr/bin/python3.11")
TREES = ("usr/lib/python3.11",)
#: The top-level links of Debian's merged /usr.
LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
SITE = "usr/local/lib/python3.11/dist-packages"
ENTRY = ("#!/usr/bin/python3\n# vLLM's console script, as pip writes it.\nimport sys\n"
         "from vllm.entrypoints.cli.main import main\nsys.exit(main())\n")
ETC = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
}
REGISTRY_BIN = "docker-registry"


def _wheel(packages: Path, version: str) -> Path:
    wheel = packages / f"vllm-{version}-py3-none-any.whl"
    if not wheel.is_file():
        raise RuntimeError(f"the lab's pip index has no {wheel.name}: the image holds the stand-in's release wheel")
    return wheel


def _libraries(rootfs: Path) -> set[str]:
    """The shared objects (paths in the rootfs) the programs and Python's extension modules load."""
    objects = [f"/{p}" for p in PROGRAMS] + [f"/{p.relative_to(rootfs)}"
                                             for p in (rootfs / TREES[0] / "lib-dynload").glob("*.so")]
    done = subprocess.run(["chroot", str(rootfs), "ldd", *objects], capture_output=True, text=True, check=False)
    found = set()
    for line in done.stdout.splitlines():
        parts = line.split()
        path = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0] if parts and parts[0].startswith("/") \
            else ""
        if path.startswith("/") and not path.endswith(":"):  # not ldd's heading of each object
            top, _, rest = path.lstrip("/").partition("/")
            found.add(f"{LINKS.get(top, top)}/{rest}")  # /lib/x.so is usr/lib/x.so in a merged /usr
    if not found:
        raise RuntimeError(f"ldd in the rootfs found no libraries: {done.stderr.strip()[-300:]}")
    return found


def _names(tar: tarfile.TarFile) -> set[str]:
    """The names in the tar so far, kept beside it (tarfile's getnames() lists them anew on every call)."""
    if not hasattr(tar, "vllm_fleet_names"):
        tar.vllm_fleet_names = {member.name for member in tar.members}
    return tar.vllm_fleet_names


def _add(tar: tarfile.TarFile, rootfs: Path, rel: str) -> None:
    """Add rootfs/rel as rel (a link is added as a link, and what it points to as well)."""
    path = rootfs / rel
    info = tar.gettarinfo(str(path), arcname=rel)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    _names(tar).add(rel)
    if info.isfile():
        with open(path, "rb") as handle:
            tar.addfile(info, handle)
    else:
        tar.addfile(info)
    if info.issym():
        target = os.path.normpath(os.path.join(os.path.dirname(rel), os.readlink(path))) \
            if not os.readlink(path).startswith("/") else os.readlink(path).lstrip("/")
        if (rootfs / target).exists() and target not in _names(tar):
            _add(tar, rootfs, target)


def _text(tar: tarfile.TarFile, rel: str, text: str, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(rel)
    data = text.encode()
    info.size, info.mode, info.mtime = len(data), mode, 0
    _names(tar).add(rel)
    tar.addfile(info, io.BytesIO(data))


def _dirs(tar: tarfile.TarFile, rel: str) -> None:
    """Add rel's parent directories not added yet (a layer's tar lists a directory before its files)."""
    parts = Path(rel).parts[:-1]
    names = _names(tar)
    for i in range(1, len(parts) + 1):
        name = "/".join(parts[:i])
        if name not in names:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
            names.add(name)


def _layer(rootfs: Path, root: Path) -> bytes:
    """The image's one layer, an uncompressed tar: what it takes of `rootfs`, and `root` (the wheel's files)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, target in LINKS.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
            tar.addfile(info)
        for name in ("tmp", "root", "usr/local/bin"):
            _dirs(tar, name + "/x")
        files = set(PROGRAMS) | _libraries(rootfs)
        for tree in TREES:
            files |= {str(p.relative_to(rootfs)) for p in (rootfs / tree).rglob("*")
                      if not p.is_dir() and "__pycache__" not in p.parts and "test" not in p.parts[:4]}
        for rel in sorted(files):
            _dirs(tar, rel)
            if rel not in _names(tar):
                _add(tar, rootfs, rel)
        for rel in sorted(str(p.relative_to(root)) for p in root.rglob("*")
                          if not p.is_dir() and "__pycache__" not in p.parts):
            _dirs(tar, rel)
            _add(tar, root, rel)
        info = tarfile.TarInfo("usr/bin/python3")
        info.type, info.linkname, info.mtime = tarfile.SYMTYPE, "python3.11", 0
        tar.addfile(info)
        _text(tar, "usr/local/bin/vllm", ENTRY, 0o755)
        for rel, text in ETC.items():
            _dirs(tar, rel)
            _text(tar, rel, text)
    return buffer.getvalue()


def _blob(blobs: Path, data: bytes, media_type: str) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def build_image(rootfs: Path, packages: Path, version: str, tag: str, log=print) -> Path:
    """The OCI layout of the stand-in's release `version` under `tag`, built once per rootfs, wheel, tag and
    REVISION."""
    wheel = _wheel(packages, version)
    key = hashlib.sha256(f"{rootfs.name}|{hashlib.sha256(wheel.read_bytes()).hexdigest()}|{tag}|{REVISION}"
                         .encode()).hexdigest()[:16]
    layout = CACHE_DIR / "images" / key
    if (layout / "index.json").exists():
        return layout
    with cache_lock(layout):
        if (layout / "index.json").exists():
            return layout
        log(f"building the lab's vLLM image {tag} (the engine stand-in)")
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "root"
            site = root / SITE
            subprocess.run(["python3", "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                            "--target", str(site), str(wheel)], check=True, capture_output=True)
            shutil.rmtree(site / "bin", ignore_errors=True)
            raw = _layer(rootfs, root)
        new = layout.with_name(layout.name + ".new")
        shutil.rmtree(new, ignore_errors=True)
        blobs = new / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer = _blob(blobs, gzip.compress(raw, compresslevel=1, mtime=0),
                      "application/vnd.oci.image.layer.v1.tar+gzip")
        config = _blob(blobs, json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Entrypoint": ["vllm", "serve"], "WorkingDirectory": "/",
                       "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
        }, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
        kind = "application/vnd.oci.image.manifest.v1+json"
        manifest = _blob(blobs, json.dumps({"schemaVersion": 2, "mediaType": kind, "config": config, "layers": [layer]},
                                           sort_keys=True).encode(), kind)
        manifest["annotations"] = {"org.opencontainers.image.ref.name": tag}
        (new / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (new / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
        shutil.rmtree(layout, ignore_errors=True)
        new.rename(layout)
    return layout


def _pidfile(paths: LabPaths) -> Path:
    return paths.root / "registry.pid"


def start_registry(paths: LabPaths) -> None:
    """docker-registry on 127.0.0.1:registry_port over the lab's registry/ directory, its requests in
    registry.log (one JSON line each)."""
    binary = shutil.which(REGISTRY_BIN)
    if binary is None:
        raise RuntimeError("docker-registry is not installed (Debian's package; scripts/setup unpacks it): the lab's "
                           "upstream registry is it")
    config = paths.root / "registry.yml"
    config.write_text(json.dumps({
        "version": 0.1, "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(paths.root / "registry")}, "delete": {"enabled": True}},
        "http": {"addr": paths.registry_host}}))
    daemons.start([binary, "serve", str(config)], _pidfile(paths), paths.root / "registry.log", paths.registry_port,
                  "the lab's registry")


def stop_registry(paths: LabPaths) -> None:
    daemons.stop(_pidfile(paths))


def publish(paths: LabPaths, layout: Path, repository: str, tag: str) -> str:
    """Push the layout's image into the lab's registry as repository:tag (skopeo; nothing is sent twice); its
    reference."""
    reference = f"{paths.registry_host}/{repository}:{tag}"
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}",
                    f"docker://{reference}"], check=True, capture_output=True)
    return reference


def registry_requests(paths: LabPaths, offset: int = 0) -> list[str]:
    """The paths asked of the lab's registry (its access log) after the log's first `offset` bytes."""
    try:
        with open(paths.root / "registry.log", "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    asked = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        uri = (entry.get("http.request.uri") or "") if isinstance(entry, dict) else ""
        if uri and entry.get("msg") == "response completed":
            asked.append(uri)
    return asked
