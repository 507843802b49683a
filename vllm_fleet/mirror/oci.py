"""Container images in the mirror: an OCI image layout per repository (``images/<repository>/``:
``oci-layout``, ``index.json`` with a reference per tag, ``blobs/sha256/<hex>``), written by Debian's
``skopeo`` from the registry the inventory names (``fleet_container_registry``, the sync's door).

- ``remote_size``: what a copy would fetch, from the manifests alone (``skopeo inspect --raw``: the
  manifest, then the platform's manifest of a list; the sum of their config and layer sizes), no layer
  is read;
- ``copy``: ``skopeo copy docker://<source> oci:images/<repository>:<tag>``, the nodes' platform only
  (``--override-arch``), or every platform (nodes of two architectures), or, when the matrix pins a
  digest, that manifest as it is (``--preserve-digests``: the nodes pull by it) and checked against the
  pin; a blob already in the layout is not fetched again (skopeo reuses it: a cut copy resumes);
- ``held``: what the layout holds for a tag, read from the disk only (its digest, its blobs and
  their size), which the sync records in the manifest and ``verify`` checks blob by blob: a blob's
  file name is its sha256.

skopeo reads the controller's containers configuration (``/etc/containers/registries.conf``: an
internal registry's ``insecure = true``; ``policy.json``; credentials in ``auth.json``), as for any
transfer the sync makes through the inventory's doors. A registry on loopback is spoken to over plain
HTTP, as Docker does (it takes 127.0.0.0/8 as insecure).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from vllm_fleet.mirror import bom
from vllm_fleet.mirror.fetch import FetchError
from vllm_fleet.mirror.layout import DEB_ARCH, image_path

SKOPEO = "skopeo"
#: Manifest media types that list the manifests of several platforms.
LISTS = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
#: The annotation of an OCI layout's index.json naming a manifest's tag.
REF_NAME = "org.opencontainers.image.ref.name"
_CHUNK = 1 << 20


def _skopeo(*args: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run([SKOPEO, *args], capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise FetchError("skopeo is not installed (Debian's package skopeo; scripts/setup installs it)") from exc
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise FetchError(" ".join(lines[-2:])[-400:] or f"skopeo exited {done.returncode}")
    return done


def _loopback(source: str) -> bool:
    host = source.split("/", 1)[0].rsplit(":", 1)[0] if "/" in source else ""
    return host in ("localhost", "[::1]") or host.startswith("127.")


def _tls(source: str, flag: str) -> list[str]:
    """skopeo's option for plain HTTP (`flag`: --tls-verify, --src-tls-verify) to a registry on loopback."""
    return [f"{flag}=false"] if _loopback(source) else []


def name_of(source: str) -> str:
    """An image reference without its tag: reg:5000/a/b:1 -> reg:5000/a/b."""
    head, sep, tail = source.rpartition(":")
    return head if sep and "/" not in tail else source


def reference(item: bom.Item, source: str) -> str:
    """What skopeo fetches: docker://<source>, by the pinned digest when the matrix pins one."""
    return f"docker://{name_of(source)}@sha256:{item.sha256}" if item.sha256 else f"docker://{source}"


def _platform(manifest: dict, arch: str) -> bool:
    platform = manifest.get("platform") or {}
    return platform.get("os") == "linux" and platform.get("architecture") == DEB_ARCH.get(arch, arch)


def _manifest_size(raw: bytes) -> int:
    data = json.loads(raw)
    return len(raw) + int((data.get("config") or {}).get("size") or 0) \
        + sum(int(layer.get("size") or 0) for layer in data.get("layers") or [])


def remote_size(item: bom.Item) -> int:
    """The bytes a copy of the item fetches (its manifests, config and layers), read from the manifests."""
    errors = []
    for source in item.sources:
        try:
            ref = reference(item, source)
            tls = _tls(source, "--tls-verify")
            raw = _skopeo("inspect", "--raw", *tls, ref).stdout
            data = json.loads(raw)
            if data.get("mediaType") not in LISTS and "manifests" not in data:
                return _manifest_size(raw)
            wanted = [m for m in data["manifests"]
                      if item.sha256 or not item.arch or _platform(m, item.arch)]
            if not wanted:
                raise FetchError(f"lists no image for linux/{DEB_ARCH.get(item.arch, item.arch)}")
            name = name_of(source)
            return len(raw) + sum(_manifest_size(_skopeo("inspect", "--raw", *tls, f"docker://{name}@{m['digest']}")
                                                 .stdout) for m in wanted)
        except (FetchError, ValueError, KeyError) as exc:
            errors.append(f"{source}: {exc}")
    raise FetchError("; ".join(errors) or "no source")


def copy(item: bom.Item, root: Path) -> dict:
    """Copy the item into its layout under `root` from the first source that has it; what the layout
    then holds for its tag (held)."""
    repository, tag = item.key.rsplit(":", 1)
    layout = Path(root) / image_path(repository)
    layout.parent.mkdir(parents=True, exist_ok=True)
    if item.sha256:
        options = ["--multi-arch", "all", "--preserve-digests"]
    elif item.arch:
        options = ["--override-os", "linux", "--override-arch", DEB_ARCH.get(item.arch, item.arch)]
    else:
        options = ["--multi-arch", "all"]
    errors = []
    for source in item.sources:
        try:
            _skopeo("copy", "--quiet", *options, *_tls(source, "--src-tls-verify"), reference(item, source),
                    f"oci:{layout}:{tag}")
        except FetchError as exc:
            errors.append(f"{source}: {exc}")
            continue
        record = held(layout, tag)
        if record is None:
            raise FetchError(f"skopeo copied {source}, but {layout}/index.json names no {tag}")
        if item.sha256 and record["digest"] != f"sha256:{item.sha256}":
            raise FetchError(f"{source} gave {record['digest']}, the inventory pins sha256:{item.sha256}")
        return {**record, "source": source}
    raise FetchError("; ".join(errors) or "no source")


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexa = digest.partition(":")
    return layout / "blobs" / algorithm / hexa


def held(layout: Path, tag: str) -> dict | None:
    """What the layout holds for `tag`, from the disk only: {digest, blobs (the sha256 of every blob
    the tag reaches: its manifests, configs, layers), size (their sum)}; None when the index names no
    such tag or a blob it reaches is not there."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        return None
    top = next((m for m in index.get("manifests") or [] if (m.get("annotations") or {}).get(REF_NAME) == tag), None)
    if top is None:
        return None
    blobs: dict[str, int] = {}
    queue = [(top, True)]  # (descriptor, whether it is a manifest or a list, read for what it names)
    while queue:
        descriptor, manifest = queue.pop()
        digest = str(descriptor.get("digest") or "")
        path = _blob(layout, digest)
        if not digest.startswith("sha256:") or not path.is_file():
            return None
        blobs[digest[len("sha256:"):]] = path.stat().st_size
        if manifest:
            try:
                data = json.loads(path.read_bytes())
            except ValueError:
                return None
            queue += [(m, True) for m in data.get("manifests") or []]
            queue += [(data["config"], False)] if isinstance(data.get("config"), dict) else []
            queue += [(layer, False) for layer in data.get("layers") or []]
    return {"digest": top["digest"], "blobs": sorted(blobs), "size": sum(blobs.values())}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(root: Path, record: dict, checked: set[str] | None = None) -> list[str]:
    """Every problem of an image's record against its layout: the tag names another manifest, a blob
    missing or whose sha256 is not its name (corrupted). `checked`: the blobs read already (skipped, then
    added to)."""
    layout = Path(root) / record["path"]
    problems = []
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError) as exc:
        return [f"{record['path']}/index.json: unreadable ({exc})"]
    tagged = {(m.get("annotations") or {}).get(REF_NAME): m.get("digest") for m in index.get("manifests") or []}
    if tagged.get(record["tag"]) != record["digest"]:
        problems.append(f"{record['path']}: the tag {record['tag']} names {tagged.get(record['tag'])}, the manifest "
                        f"says {record['digest']}")
    checked = set() if checked is None else checked
    for hexa in record["blobs"]:
        rel = f"{record['path']}/blobs/sha256/{hexa}"
        path = Path(root) / rel
        if rel in checked:
            continue
        checked.add(rel)
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif _sha256(path) != hexa:
            problems.append(f"{rel}: its sha256 is not its name (corrupted)")
    return problems
