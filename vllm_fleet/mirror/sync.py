"""``vllm-fleet mirror sync``: fill a mirror directory with the bill of materials.

First a plan: for each item, whether the mirror holds it already (read from the manifest and the
disk only: a second sync contacts nothing for it) or what it will fetch and how large that is (the
sources' announced sizes, pip's resolution, the hubs' file lists, the images' manifests). ``--check``
stops there. Otherwise the plan's total is held against the directory's free space before a byte
moves; a package file a node installs with apt (a .deb of the matrix) is fetched first and the plan
made again with it, so what it depends on joins the apt repository; then each item is fetched,
verified and recorded in the manifest as soon as it is whole, so a sync cut off resumes where it
stopped. A failed item does not stop the others; the summary names each failure with the host and
variable that want it. Last, the apt repository is built again when what it holds changed, or its
key (vllm_fleet.mirror.apt).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from vllm_fleet.mirror import apt, bom, fetch, oci, store
from vllm_fleet.mirror.fetch import FetchError, human
from vllm_fleet.mirror.layout import APT_DIR, DEB_ARCH, git_path, image_path

#: Free space kept beyond what the plan adds (the manifest, indexes, partial files).
DISK_MARGIN = 64 * 1024 * 1024
#: The manifest's record of the apt repository (what it was built of, its key, its files).
APT_REPOSITORY = "apt:repository"


@dataclass
class Entry:
    item: bom.Item
    present: bool
    size: int | None = None        # bytes to fetch (None: not known before fetching)
    detail: dict = field(default_factory=dict)   # what the plan resolved (pip's wheels, a hub's files)
    error: str = ""


@dataclass
class Summary:
    entries: list[Entry]
    fetched: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    received: int = 0
    refused: str = ""
    apt: str = ""                  # what the apt repository holds, after the sync
    apt_fingerprint: str = ""      # the fingerprint of its key (the manifest's apt:repository), to pin

    @property
    def ok(self) -> bool:
        return not self.failed and not self.refused


# ---------------------------------------------------------------- the plan

def _present(item: bom.Item, manifest: store.Manifest) -> bool:
    record = manifest.items.get(f"{item.kind}:{item.key}")
    if item.kind == "artifact":
        return manifest.has_file(item.key, item.sha256)
    if item.kind == "git":
        return record is not None and fetch.git_has(manifest.root / record["path"], item.ref)
    if item.kind in ("pip", "model"):
        return record is not None and all(manifest.has_file(rel) for rel in record["files"])
    if item.kind == "deb":  # its packages in the repository's pool
        return record is not None and bool(record.get("files")) and all(manifest.has_file(r) for r in record["files"])
    if item.kind == "image":  # the tag in its layout at the recorded digest, every blob on disk (not read)
        held = oci.held(manifest.root / image_path(item.key.rsplit(":", 1)[0]), item.ref) if record else None
        return held is not None and held["digest"] == record["digest"] \
            and (not item.sha256 or record["digest"] == f"sha256:{item.sha256}") \
            and record.get("arch") in ("", item.arch)
    return False


def plan(bill: bom.Bill, root: Path, log=print) -> list[Entry]:
    """Every item with whether it is present, and the size to fetch of those that are not."""
    manifest = store.Manifest(root)
    entries = []
    for item in bill.items.values():
        entry = Entry(item, _present(item, manifest))
        if not entry.present:
            try:
                _size(entry)
            except FetchError as exc:
                entry.error = str(exc)
        entries.append(entry)
    # The sources the builds of present repositories fetch are known without fetching anything.
    for entry in list(entries):
        if entry.item.kind == "git" and entry.present:
            for dep in _deps(entry.item, root, bill):
                entries.append(Entry(dep, _present(dep, manifest)))
    _count_wheels_once(entries, manifest)
    _add_package_file_depends(entries, manifest, log)
    _plan_apt(entries, manifest, log)
    return entries


def _count_wheels_once(entries: list[Entry], manifest: store.Manifest) -> None:
    """A wheel of several sets (a vendor's torch in the venvs of its nodes and spans) is counted once, in
    the first set that fetches it, and not at all when the mirror holds it: the size the plan says, and the
    one the disk check holds against the free space, is what the sync writes (each wheel once, in
    pypi/packages/), as for the apt sets (_plan_apt)."""
    counted: set[str] = set()
    for entry in entries:
        wheels = entry.detail.get("wheels")
        if entry.item.kind != "pip" or entry.present or not wheels:
            continue
        size = 0
        for wheel in wheels:
            rel = f"pypi/packages/{fetch.wheel_file(wheel['url'])}"
            if rel not in counted and not manifest.has_file(rel, wheel["sha256"] or None):
                size += wheel.get("size") or 0
            counted.add(rel)
        entry.size = size


def package_file(item: bom.Item) -> bool:
    """A Debian package file of the matrix (MUSA's driver): the node installs it with apt, which installs its
    dependencies from the node's apt sources, so they belong in the mirror's apt repository."""
    return item.kind == "artifact" and item.key.endswith(".deb")


def _host(who: str) -> str:
    return who.split(": ", 1)[0]


def _add_package_file_depends(entries: list[Entry], manifest: store.Manifest, log) -> None:
    """Give each package file the mirror holds to the apt sets of the hosts that install it: apt resolves the
    file itself with the set (apt-get install FILE, as the node's apt does), so the packages it depends on,
    alternatives chosen as apt chooses them, join the repository. One the mirror does not hold yet is
    given once fetched (sync fetches those first)."""
    sets = [e for e in entries if e.item.kind == "deb"]
    for entry in entries:
        if not package_file(entry.item) or not entry.present:
            continue
        path = str(manifest.root / entry.item.key)
        hosts = {_host(w) for w in entry.item.wanted_by}
        mine = [d for d in sets if hosts & {_host(w) for w in d.item.wanted_by}]
        for deb in mine:
            files = deb.item.index.setdefault("package_files", [])
            if path not in files:
                files.append(path)
        if not mine:
            log(f"artifact {entry.item.key}: no apt set of {', '.join(sorted(hosts))} takes the packages it "
                "depends on (fleet_mirror_apt: false?): their own apt sources must hold them")


def _plan_apt(entries: list[Entry], manifest: store.Manifest, log) -> None:
    """The packages of the deb sets, when one is not in the mirror: every set, the bill's and those the
    mirror holds from earlier syncs, resolved from the same package lists (one snapshot; a set of an
    earlier sync that no longer resolves is dropped, said in the log); a set whose closure is what the
    mirror holds stays present."""
    debs = [e for e in entries if e.item.kind == "deb"]
    if all(e.present for e in debs):
        return
    wanted = {e.item.key for e in debs}
    for key, record in sorted(manifest.items.items()):
        if key.startswith("deb:") and key[len("deb:"):] not in wanted:
            item = bom.Item("deb", key[len("deb:"):], specs=list(record["specs"]), arch=record["arch"],
                            index={"without_recommends": list(record.get("without_recommends", [])),
                                   "repositories": list(record.get("repositories", [])),
                                   "package_files": [str(manifest.root / r) for r in record.get("package_files", [])]},
                            wanted_by=list(record.get("wanted_by") or []) or ["an earlier sync"])
            debs.append(Entry(item, True, detail={"earlier": True}))
    # A package of several sets is counted once, in the first.
    held = {rel.rsplit("/", 1)[-1] for rel in manifest.files if rel.startswith(f"{APT_DIR}/pool/")}
    for entry in debs:
        try:
            packages = apt.closure(entry.item)
        except FetchError as exc:
            if entry.detail.get("earlier"):
                log(f"deb      {entry.item.key}: of an earlier sync, no longer resolves, dropped: {exc}")
                entry.detail["drop"] = True
                entries.append(entry)
                continue
            entry.present, entry.error = False, str(exc)
            continue
        entry.detail["packages"] = packages
        record = manifest.items.get(f"deb:{entry.item.key}") or {}
        same = sorted(p["file"] for p in record.get("packages", [])) == sorted(p["file"] for p in packages)
        entry.present = same and _present(entry.item, manifest)
        entry.size = sum(p["size"] for p in packages if apt.pool_name(p) not in held)
        held |= {apt.pool_name(p) for p in packages}
        if entry.detail.get("earlier"):
            entries.append(entry)


def _size(entry: Entry) -> None:
    item = entry.item
    if item.kind == "artifact":
        entry.size = next((s for s in map(fetch.head_size, item.sources) if s is not None), None)
    elif item.kind == "pip":
        wheels = fetch.pip_resolve(item)
        entry.detail["wheels"] = wheels
        for wheel in wheels:
            wheel["size"] = fetch.head_size(wheel["url"]) or 0
        entry.size = sum(w["size"] for w in wheels)
    elif item.kind == "model" and item.hub in bom.DEFAULT_REVISION:
        info = fetch.hub("info", item)
        entry.detail["info"] = info
        entry.size = sum(int(f.get("size") or 0) for f in info["files"])
    elif item.kind == "model" and item.hub == "git":
        # Known only once cloned; the inventory's size_gb, where it says one.
        entry.size = item.size_hint or None
    elif item.kind == "model":
        sizes = [fetch.head_size(f"{item.sources[0].rstrip('/')}/{f['name']}") for f in item.files]
        entry.size = sum(s or 0 for s in sizes) or item.size_hint
    elif item.kind == "image":
        entry.size = oci.remote_size(item)
    # deb: all sets together (_plan_apt)


def _deps(item: bom.Item, root: Path, bill: bom.Bill) -> list[bom.Item]:
    """What a fetched commit's install fetches in its turn: the FetchContent sources of its build, as
    git items (through the GitHub proxy the wanting hosts' inventory names), and, for a pinned source
    installed into a venv, its build requirements and its requirements, each a pip set resolved for
    that venv's Python and architecture."""
    repo = root / item.key.rpartition("@")[0]
    github = item.index.get("github_mirror", "")
    out = []
    if item.python:
        for what, specs in zip(("build requirements", "requirements"), fetch.source_requirements(repo, item.ref),
                               strict=True):
            if specs:
                out.append(bill.add(bom.pip_item(specs, item.python, item.arch, item.index),
                                    f"{item.key}: its {what}"))
    for url, tag in fetch.fetch_content_deps(repo, item.ref):
        dep = bom.Item("git", f"{git_path(url)}@{tag}", sources=bom.via_github_mirror(url, github), ref=tag,
                       index={"github_mirror": github})
        known = bill.add(dep, f"{item.key}: FetchContent")
        out.append(known)
    return out


# ---------------------------------------------------------------- the sync

def sync(bill: bom.Bill, root: Path, *, check: bool = False, apt_key: str = "", log=print) -> Summary:
    """Fill `root` with the bill (`check`: say what, and how large, and fetch nothing); `apt_key` names the
    operator's GnuPG key that signs the apt repository (else the mirror's own, in keys/)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    apt.new_sync()
    entries = plan(bill, root, log)
    summary = Summary(entries, skipped=list(bill.skipped))
    _print_plan(entries, bill, log)
    if check or not _room(entries, root, summary, log):
        return summary
    first = [e for e in entries if package_file(e.item) and not e.present and not e.error]
    if first:
        # A package file's dependencies are read from the file: those are fetched first, then the plan made again.
        manifest = store.Manifest(root)
        for entry in first:
            log(f"artifact {entry.item.key}: fetched first, for the packages it depends on")
            try:
                summary.received += _artifact(entry, manifest, log)
            except (FetchError, OSError) as exc:
                log(f"artifact {entry.item.key}: FAILED: {exc}")  # tried again below, and named in the summary
                continue
            manifest.save()
            summary.fetched.append(f"{entry.item.kind} {entry.item.key}")
        entries = summary.entries = plan(bill, root, log)
        log("the plan again, with the packages they depend on:")
        _print_plan(entries, bill, log)
        if not _room(entries, root, summary, log):
            return summary
    manifest = store.Manifest(root)
    for entry in entries:
        if entry.detail.get("drop"):
            manifest.items.pop(f"deb:{entry.item.key}", None)
    queue = [e for e in entries if not e.present and not e.detail.get("drop")]
    done = 0
    while queue:
        entry = queue.pop(0)
        done += 1
        item = entry.item
        label = f"[{done}/{done + len(queue)}] {item.kind} {item.key}"
        log(f"{label}: fetching {human(entry.size) if entry.size is not None else '(size known after)'}")
        started = time.monotonic()
        try:
            received = _FETCHERS[item.kind](entry, manifest, log)
        except (FetchError, OSError) as exc:
            summary.failed.append(f"{item.kind} {item.key}: {exc} (wanted by {', '.join(item.wanted_by)})")
            log(f"{label}: FAILED: {exc}")
            continue
        manifest.save()
        summary.received += received
        summary.fetched.append(f"{item.kind} {item.key}")
        log(f"{label}: done, {human(received)} in {time.monotonic() - started:.1f} s")
        if item.kind == "git":
            queue += [Entry(d, _present(d, manifest)) for d in _deps(item, root, bill)
                      if not _present(d, manifest) and all(d is not q.item for q in queue)]
    if any(e.item.kind == "pip" for e in entries):
        store.write_simple_index(root)
    manifest.save()
    if any(k.startswith("deb:") for k in manifest.items):
        try:
            _publish_apt(manifest, apt_key, summary, log)
        except FetchError as exc:
            summary.failed.append(f"the apt repository {APT_DIR}/: {exc}")
            log(f"apt repository: FAILED: {exc}")
        manifest.save()
    _print_summary(summary, log)
    return summary


def _room(entries: list[Entry], root: Path, summary: Summary, log) -> bool:
    """Whether the directory has room for what the plan fetches; else the summary says why, and nothing more is."""
    wanted = sum(e.size or 0 for e in entries if not e.present)
    free = shutil.disk_usage(root).free
    if wanted + DISK_MARGIN <= free:
        return True
    summary.refused = (f"{root} has {human(free)} free; this sync adds {human(wanted)} (and needs "
                       f"{human(DISK_MARGIN)} to spare): free space or choose another directory; "
                       f"{'nothing more' if summary.fetched else 'nothing'} was fetched")
    log(f"refused: {summary.refused}")
    return False


def _artifact(entry: Entry, manifest: store.Manifest, log) -> int:
    item = entry.item
    received, sha = fetch.http_file(item.sources, manifest.root / item.key, item.sha256, _progress(item.key, log))
    manifest.add_file(item.key, sha)
    manifest.items[f"artifact:{item.key}"] = {"path": item.key, "sha256": sha, "wanted_by": item.wanted_by}
    return received


def _git(entry: Entry, manifest: store.Manifest, log) -> int:
    item = entry.item
    path = item.key.rpartition("@")[0]
    repo = manifest.root / path
    before = _tree_size(repo)
    fetch.git_fetch(item.sources, repo, item.ref)
    record = manifest.items.setdefault(f"git:{item.key}", {"path": path, "commits": [], "tags": []})
    record["wanted_by"] = item.wanted_by
    record["commits" if fetch.git_ref(repo, item.ref)[0] == item.ref else "tags"] = [item.ref]
    return max(_tree_size(repo) - before, 0)


def _pip(entry: Entry, manifest: store.Manifest, log) -> int:
    item = entry.item
    wheels = entry.detail.get("wheels") or fetch.pip_resolve(item)
    received, files = 0, []
    for wheel in wheels:
        rel = f"pypi/packages/{fetch.wheel_file(wheel['url'])}"
        if not manifest.has_file(rel, wheel["sha256"] or None):
            got, sha = fetch.http_file([wheel["url"]], manifest.root / rel, wheel["sha256"] or None,
                                       _progress(rel, log))
            received += got
            manifest.add_file(rel, sha)
        files.append(rel)
    manifest.items[f"pip:{item.key}"] = {"specs": item.specs, "python": item.python, "arch": item.arch,
                                         "files": files, "wanted_by": item.wanted_by}
    return received


def _model(entry: Entry, manifest: store.Manifest, log) -> int:
    item = entry.item
    if item.hub == "url":
        received, files = 0, []
        for f in item.files:
            rel = f"{item.key}/{f['name']}"
            got, sha = fetch.http_file([f"{item.sources[0].rstrip('/')}/{f['name']}"], manifest.root / rel,
                                       f["sha256"], _progress(rel, log))
            received += got
            manifest.add_file(rel, sha)
            files.append(rel)
        manifest.items[f"model:{item.key}"] = {"files": files, "wanted_by": item.wanted_by}
        return received
    if item.hub == "git":
        return _git_model(entry, manifest, log)
    info = entry.detail.get("info") or fetch.hub("info", item)
    if not info["files"]:
        raise FetchError(f"the hub lists no file in {item.key[len('models/'):]}")
    # Under the revision the inventory names (what a node asks the mirror for); the commit it
    # named when synced is in the manifest.
    rel_dir = item.key
    local = manifest.root / rel_dir
    local.mkdir(parents=True, exist_ok=True)
    before = _tree_size(local)
    fetch.hub("download", item, local)
    files = []
    for f in info["files"]:
        rel = f"{rel_dir}/{f['name']}"
        if not (manifest.root / rel).is_file():
            raise FetchError(f"{f['name']} is listed by the hub but was not downloaded")
        if f.get("size") is not None and (manifest.root / rel).stat().st_size != int(f["size"]):
            raise FetchError(f"{f['name']}: {(manifest.root / rel).stat().st_size} bytes, the hub lists {f['size']}")
    _snapshot(manifest, item, rel_dir, [f["name"] for f in info["files"]], info["revision"])
    return max(_tree_size(local) - before, 0)


def _git_model(entry: Entry, manifest: store.Manifest, log) -> int:
    """A git source's model: its working copy in the cache (fetched, the revision checked out, its LFS files
    pulled), then its files, without .git, copied into the snapshot under the revision the inventory names."""
    item = entry.item
    url = item.sources[0]
    work = fetch.git_model_cache() / git_path(url).removeprefix("git/")
    before = _tree_size(work / ".git")
    commit, names = fetch.git_model_checkout(url, item.ref, work)
    received = max(_tree_size(work / ".git") - before, 0)
    log(f"  {url}@{item.ref}: {commit}, {len(names)} file(s)")
    local = manifest.root / item.key
    for name in names:
        # A link would copy what it points at (anywhere on this machine), a submodule is another repository.
        if (work / name).is_symlink() or not (work / name).is_file() or "\n" in name:
            raise FetchError(f"{url}@{item.ref}: {name!r} is not a plain file (a link, a submodule): not mirrored")
    for name in names:
        dest = local / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        shutil.copyfile(work / name, part)
        part.replace(dest)
    _snapshot(manifest, item, item.key, names, commit)
    return received


def _snapshot(manifest: store.Manifest, item: bom.Item, rel_dir: str, names: list[str], revision: str) -> None:
    """Record a model snapshot's files (each with its sha256), write its sha256 list beside it (what the nodes
    read, sha256sum -c's format) and its item: the commit the revision named when synced."""
    files = []
    for name in names:
        rel = f"{rel_dir}/{name}"
        manifest.add_file(rel)
        files.append(rel)
    sums = manifest.root / f"{rel_dir}.sha256"
    sums.write_text("".join(f"{manifest.files[rel]['sha256']}  {rel[len(rel_dir) + 1:]}\n" for rel in files))
    manifest.items[f"model:{item.key}"] = {"revision": revision, "dir": rel_dir, "files": files,
                                           "wanted_by": item.wanted_by}


def _image(entry: Entry, manifest: store.Manifest, log) -> int:
    """An image into its repository's OCI layout (a blob the layout has already is not fetched again); the
    manifest records the tag's digest, its blobs (verify checks each by its name) and their size."""
    item = entry.item
    repository = item.key.rsplit(":", 1)[0]
    layout = manifest.root / image_path(repository)
    before = _tree_size(layout)
    copied = oci.copy(item, manifest.root)
    manifest.items[f"image:{item.key}"] = {"repository": repository, "path": image_path(repository), "tag": item.ref,
                                           "arch": item.arch,
                                           "pinned": bool(item.sha256), "wanted_by": item.wanted_by, **copied}
    log(f"  {item.key}: {copied['digest']}, {len(copied['blobs'])} blob(s), {human(copied['size'])}")
    return max(_tree_size(layout) - before, 0)


def _deb(entry: Entry, manifest: store.Manifest, log) -> int:
    """A host's packages with their dependencies, into the cache; the repository is built once every item is
    done (_publish_apt), which records where each of its files is in the pool."""
    item = entry.item
    packages = entry.detail.get("packages") or apt.closure(item)
    received = apt.download(item, packages)
    manifest.items[f"deb:{item.key}"] = {
        "specs": item.specs, "without_recommends": item.index.get("without_recommends", []), "arch": item.arch,
        "repositories": item.index.get("repositories", []), "files": [], "wanted_by": item.wanted_by,
        "package_files": [str(Path(f).relative_to(manifest.root)) for f in item.index.get("package_files", [])],
        "packages": [{k: p[k] for k in ("name", "version", "arch", "file", "size", "component", "uri")}
                     for p in packages]}
    return received


def _publish_apt(manifest: store.Manifest, apt_key: str, summary: Summary, log) -> None:
    """Build the apt repository again when the packages of the deb sets, or the key, differ from what it
    was built of, or a file of it is missing; each package from the cache, else from the current pool."""
    root = manifest.root
    records = {k: r for k, r in manifest.items.items() if k.startswith("deb:")}
    packages = {(p["component"], p["file"]): p for r in records.values() for p in r["packages"]}
    built = manifest.items.get(APT_REPOSITORY) or {}
    # An operator's key, once named, stays the key of later syncs until another is named.
    named = apt_key or ("" if built.get("own", True) else built.get("fingerprint", ""))
    key = apt.signing_key(root, named, log)
    try:
        debs = sorted(f"{c}/{f}" for c, f in packages)
        if built.get("debs") != debs or built.get("fingerprint") != key.fingerprint \
                or not all(manifest.has_file(rel) for rel in built.get("files") or [""]):
            _build_apt(manifest, records, packages, key, log)
            files = [rel for rel in sorted(manifest.files) if rel.startswith(f"{APT_DIR}/")]
            manifest.items[APT_REPOSITORY] = {"debs": debs, "fingerprint": key.fingerprint, "own": key.own,
                                              "files": files}
    finally:
        apt.release(key)
    files = manifest.items[APT_REPOSITORY]["files"]
    size = sum(manifest.files[r]["size"] for r in files if r.endswith(".deb"))
    summary.apt = (f"apt repository {APT_DIR}/: {len(packages)} package(s), {human(size)}, "
                   f"signed by {key.fingerprint}")
    summary.apt_fingerprint = key.fingerprint


def _build_apt(manifest: store.Manifest, records: dict, packages: dict, key, log) -> None:
    root = manifest.root
    pool = {(rel.split("/")[2], rel.rsplit("/", 1)[-1]): root / rel for rel in manifest.files
            if rel.startswith(f"{APT_DIR}/pool/")}
    debs = []
    for (component, file), package in sorted(packages.items()):
        path = apt.cached(package) or pool.get((component, apt.pool_name(package)))
        if path is None or not path.is_file():
            raise FetchError(f"{file} is neither in the cache nor in the mirror's pool: sync again to fetch it")
        debs.append((component, path))
    # The old pool's files are read before the new repository replaces them.
    architectures = sorted({DEB_ARCH.get(r["arch"], r["arch"]) for r in records.values()})
    started = time.monotonic()
    files = apt.publish(root, debs, architectures, key, log)
    for rel in [r for r in manifest.files if r.startswith(f"{APT_DIR}/")]:
        del manifest.files[rel]
    for rel in files:
        manifest.add_file(rel)
    where = {(rel.split("/")[2], rel.rsplit("/", 1)[-1]): rel for rel in files if rel.startswith(f"{APT_DIR}/pool/")}
    for record in records.values():
        record["files"] = sorted(where[(p["component"], apt.pool_name(p))] for p in record["packages"])
    log(f"apt repository {APT_DIR}/: built of {len(debs)} package(s) in {time.monotonic() - started:.1f} s, "
        f"signed by {key.fingerprint}")


_FETCHERS = {"artifact": _artifact, "git": _git, "pip": _pip, "model": _model, "deb": _deb, "image": _image}


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _progress(name: str, log):
    """A progress callback that logs a line per tenth of a file of at least 64 MB."""
    state = {"tenth": 0}

    def report(got: int, total: int | None) -> None:
        if not total or total < 64 * 1024 * 1024:
            return
        tenth = got * 10 // total
        if tenth > state["tenth"]:
            state["tenth"] = tenth
            log(f"  {name}: {human(got)} of {human(total)}")
    return report


def _print_plan(entries: list[Entry], bill: bom.Bill, log) -> None:
    for entry in entries:
        item = entry.item
        if entry.detail.get("drop"):
            continue  # said by _plan_apt
        size = human(entry.size) if entry.size is not None else "size known after fetching"
        what = "present" if entry.present else (f"FAILS: {entry.error}" if entry.error else f"to fetch, {size}")
        if package_file(item) and not entry.present and not entry.error:
            what += " (its dependencies join the apt repository once it is fetched)"
        log(f"{item.kind:8} {item.key}: {what}")
        if item.kind == "pip" and not entry.present:
            for wheel in entry.detail.get("wheels", []):
                log(f"           {wheel['name']}=={wheel['version']}")
        if item.kind == "deb" and not entry.present:
            for package in entry.detail.get("packages", []):
                log(f"           {package['name']}={package['version']} {package['arch']} ({package['component']}, "
                    f"{human(package['size'])})")
    for line in bill.skipped:
        log(f"skipped  {line}")
    entries = [e for e in entries if not e.detail.get("drop")]
    missing = [e for e in entries if not e.present]
    total = sum(e.size or 0 for e in missing)
    unknown = sum(e.size is None for e in missing)
    log(f"{len(entries)} item(s): {len(entries) - len(missing)} present, {len(missing)} to fetch, {human(total)}"
        + (f" (and {unknown} of a size known only after fetching)" if unknown else ""))


def _print_summary(summary: Summary, log) -> None:
    log(f"fetched {len(summary.fetched)} item(s), {human(summary.received)}; "
        f"{sum(e.present and f'{e.item.kind} {e.item.key}' not in summary.fetched for e in summary.entries)} "
        f"already present; {len(summary.failed)} failed")
    for line in summary.failed:
        log(f"failed: {line}")
    for line in summary.skipped:
        log(f"skipped: {line}")
    if summary.apt:
        log(summary.apt)
    if summary.apt_fingerprint:  # what the inventory pins: each host checks the mirror's key against it
        log(f'pin it: fleet_mirror_apt_key_fingerprint: "{summary.apt_fingerprint}" '
            "(the inventory's group_vars/all; each host's apt then refuses any other key)")
