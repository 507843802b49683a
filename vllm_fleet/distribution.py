"""A model revision to many nodes in waves, from the mirror and from the nodes that already hold it.

Pure code (no I/O): the wave plan, the input file of Debian's aria2c for one node, the blame of a
peer that served a wrong file, and the bytes a run moves (issue 37). roles/blocks/model_fetch reads
them through filter_plugins/distribution.py (playbooks/distribute.yml), and
scripts/bench-distribution drives aria2c with exactly these.

Why aria2c and not a transfer of our own: it fetches one file from several HTTP sources at once
(``split``, each connection a range of the file), checks each file against its sha256
(``checksum=sha-256=``) and resumes a cut file from its ``.aria2`` control file (``--continue``).
Its BitTorrent mode would need a tracker or DHT and the mirror as a web seed for a gain that
plain HTTP from the earlier waves already gives (docs/performance/distribution.md measures it).

The waves. The nodes that need a revision are ordered (the caller's order, stable between runs)
and cut into batches: the first of one node (the mirror's copy checked once before it is spread),
then each batch as large as the number of nodes that hold the revision when it starts: 1, 1, 2,
4, 8, ... Every holder then serves one node's worth of bytes per wave, so each wave costs about
one copy's time at the serving side's bandwidth and N nodes cost 1 + log2(N) copies instead of N.
Nodes that already hold the revision verified (an earlier run) are holders from the start.

The mirror. The first batch fetches from the mirror alone; while a node has a single peer the
mirror is a second regular source (it halves that wave); from two peers on, it is the last
source, a spare aria2c opens only when a peer fails. So the mirror serves about 1.5 model sizes
whatever the number of nodes (issue 37's target: at most 2), and still finishes a run whose
peers all fail.

A node's peers. With P holders and a batch of n nodes, node i takes ``fan_in`` peers starting at
``i * fan_in`` round the holders: each holder is opened by about ``n * fan_in / P`` nodes (one
connection each), and a node of a 256-node wave does not open 256 connections.

Blame. aria2c spreads a file's ranges over its sources and reports only that the whole file's
sha256 is wrong, not which source sent the bad range. A file that fails its check is therefore
fetched again from each of its sources alone (``probe_input``): a source whose copy differs
from the manifest served a wrong file, is named and is dropped from the run's sources
(``blame``). This costs a file's size per source, only when a check failed; giving every file a
single source instead (rotating) would name the source at once but lose the multi-source
transfer of a model's one large file, and a fetch that has no failure pays nothing here.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

# Peers one node opens at once (aria2c's split of a file); more add connections, not bandwidth.
FAN_IN = 8


def share_url(address: str, port: int, model_path: str) -> str:
    """A node's URL of a revision in its share: http://<address>:<port>/<the mirror's path of it>
    (vllm_fleet/mirror/layout.model_path): a peer's URL is the mirror's with another base."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{int(port)}/{model_path.strip('/')}"


class DistributionError(ValueError):
    """A plan or a manifest that cannot be distributed; the message says what is wrong."""


@dataclass(frozen=True)
class NodeFetch:
    """What one node of a wave fetches from: its wave (1-based), its sources in aria2c's order
    (base URLs of the revision's directory) and how many of them it opens at once (the rest are
    spares, opened only when one of those fails)."""

    host: str
    wave: int
    sources: tuple[str, ...]
    split: int
    peers: tuple[str, ...] = field(default=())  # the hosts among the sources, in the same order


def batch_sizes(needing: int, holders: int = 0) -> list[int]:
    """The sizes of the batches that bring `needing` nodes a revision that `holders` nodes hold.

    The first batch, without holders, is one node; each next batch is as large as the number of
    holders when it starts (1, 1, 2, 4, 8, ...); the last one takes what is left."""
    if needing < 0 or holders < 0:
        raise DistributionError(f"batch_sizes: negative count (needing {needing}, holders {holders})")
    sizes: list[int] = []
    have, left = holders, needing
    while left:
        size = min(left, max(1, have))
        sizes.append(size)
        have, left = have + size, left - size
    return sizes


def serial(needing: int, holders: int = 0) -> list[int]:
    """`batch_sizes` as Ansible's ``serial`` list (it repeats the last entry; the last batch
    being the rest, the list is the plan itself). An empty run still needs a batch size: [1]."""
    return batch_sizes(needing, holders) or [1]


def _join(base: str, path: str) -> str:
    return f"{base.rstrip('/')}/{path.strip('/')}" if path else base.rstrip("/")


def plan(needing: list[str], holders: list[str], mirror: str, share: dict[str, str], *,
         fan_in: int = FAN_IN) -> list[list[NodeFetch]]:
    """The waves of one revision: for each batch, each node's `NodeFetch`.

    `needing`: the nodes without the revision, in a stable order (the inventory's); `holders`: those
    that hold it verified; `mirror`: the revision's base URL in the mirror (or hub); `share`: each
    node's base URL of the revision in its share (at least every holder's and every needing node's
    that is not in the last batch)."""
    if fan_in < 1:
        raise DistributionError(f"plan: fan_in must be at least 1, not {fan_in}")
    both = set(needing) & set(holders)
    if both:
        raise DistributionError(f"plan: {', '.join(sorted(both))} both need and hold the revision")
    if len(set(needing)) != len(needing):
        raise DistributionError("plan: a node is named twice among the nodes that need the revision")
    if not mirror:
        raise DistributionError("plan: no mirror URL: the first wave has no source")
    have = list(holders)
    waves: list[list[NodeFetch]] = []
    start = 0
    for number, size in enumerate(batch_sizes(len(needing), len(holders)), 1):
        batch = needing[start:start + size]
        missing = [host for host in have if host not in share]
        if missing:
            raise DistributionError(f"plan: no share URL for {', '.join(missing)}, a source of wave {number}")
        waves.append([node_fetch(host, number, index, have, mirror, share, fan_in=fan_in)
                      for index, host in enumerate(batch)])
        have += batch
        start += size
    return waves


def node_fetch(host: str, wave: int, index: int, have: list[str], mirror: str, share: dict[str, str], *,
               fan_in: int = FAN_IN) -> NodeFetch:
    """The sources of node number `index` of its batch (wave `wave`), `have` holding the revision
    verified before the batch starts (each with its URL in `share`); what `plan` gives each node,
    for a caller that runs the batches itself (Ansible's ``serial``: roles/blocks/model_fetch)."""
    missing = [h for h in have if h not in share]
    if missing:
        raise DistributionError(f"no share URL for {', '.join(missing)}, a source of {host}")
    if not have:
        return NodeFetch(host, wave, (mirror,), 1)
    count = min(fan_in, len(have))
    peers = tuple(have[(index * fan_in + k) % len(have)] for k in range(count))
    urls = tuple(share[p] for p in peers)
    if len(peers) == 1:
        # One peer: the mirror is a second regular source (see the module's docstring).
        return NodeFetch(host, wave, (*urls, mirror), 2, peers)
    return NodeFetch(host, wave, (*urls, mirror), len(urls), peers)


def without(fetch: NodeFetch, bad: set[str]) -> NodeFetch:
    """`fetch` with the sources in `bad` (URLs) dropped; the mirror left alone is a regular source."""
    kept = [(url, peer) for url, peer in zip(fetch.sources, (*fetch.peers, None), strict=False) if url not in bad]
    if not kept:
        raise DistributionError(f"{fetch.host}: every source of the revision was dropped ({', '.join(sorted(bad))})")
    sources = tuple(url for url, _ in kept)
    peers = tuple(peer for _, peer in kept if peer is not None)
    # As in plan: from two peers on, the mirror stays a spare.
    split = len(peers) if len(peers) > 1 else len(sources)
    return NodeFetch(fetch.host, fetch.wave, sources, split, peers)


def _check_name(name: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or any(c in name for c in "\t\r\n"):
        raise DistributionError(f"a file name that would leave the model's directory or break the input file: {name!r}")
    return name


def aria2_input(files: list[dict], sources: tuple[str, ...] | list[str], split: int, dest: str) -> str:
    """aria2c's input file (``aria2c -i``) that fetches `files` ([{name, sha256}], the manifest, or
    what of it is missing) into `dest` from each of `sources` (base URLs), `split` at once, each
    file checked against its sha256. One entry per file: its URLs on one line, tab-separated, then
    its options, indented."""
    if not sources:
        raise DistributionError("aria2_input: no source")
    lines = []
    for item in files:
        name = _check_name(str(item["name"]))
        digest = str(item["sha256"])
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise DistributionError(f"aria2_input: {name}: not a sha256: {digest!r}")
        lines.append("\t".join(_join(base, name) for base in sources))
        directory, base_name = posixpath.split(name)
        lines.append(f"  dir={_join(dest, directory)}")
        lines.append(f"  out={base_name}")
        lines.append(f"  checksum=sha-256={digest}")
        lines.append(f"  split={max(1, split)}")
    return "\n".join(lines) + ("\n" if lines else "")


def probe_dir(dest: str, index: int) -> str:
    """Where `probe_input` puts the copies of source number `index`."""
    return _join(dest, f".probe/{index}")


def probe_input(files: list[dict], sources: tuple[str, ...] | list[str], dest: str) -> str:
    """The input file that fetches each of `files` (those that failed their check) from each of
    `sources` alone, into probe_dir(dest, <source's index>), each checked against its sha256."""
    return "".join(aria2_input(files, [url], 1, probe_dir(dest, index)) for index, url in enumerate(sources))


def blame(results: dict[tuple[str, int], str], files: list[dict],
          sources: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """The sources that served a wrong file: {source URL: [file names]}, from `results`, the sha256
    of each probed copy by (file name, source index) ('' where the source gave nothing, a dead
    source, which is not blamed for a wrong file)."""
    want = {str(f["name"]): str(f["sha256"]) for f in files}
    bad: dict[str, list[str]] = {}
    for (name, index), got in sorted(results.items()):
        if got and name in want and got != want[name]:
            bad.setdefault(sources[index], []).append(name)
    return bad


def wave_bytes(waves: list[list[NodeFetch]], size: int) -> dict:
    """The bytes a run moves, for plan and status: {'total', 'mirror', 'peers', 'nodes', 'waves'},
    the mirror's and the peers' parts estimated as aria2c spreads them (each regular source an
    equal part of each file; spares nothing)."""
    mirror = peers = 0.0
    nodes = 0
    for wave in waves:
        for fetch in wave:
            nodes += 1
            # The first len(peers) sources are the peers' URLs, the mirror's comes after them.
            regular = len(fetch.sources[:fetch.split])
            from_peers = min(regular, len(fetch.peers))
            mirror += size * (regular - from_peers) / regular
            peers += size * from_peers / regular
    return {"total": size * nodes, "mirror": round(mirror), "peers": round(peers), "nodes": nodes, "waves": len(waves)}


def revision_key(model: dict) -> str:
    """A model revision's name in plans and status: <repo>@<revision> of its source, or its path."""
    source = model.get("source") or {}
    if source.get("repo"):
        return f"{source['repo']}@{source.get('revision') or 'default'}"
    return str(source.get("url") or model.get("path") or model.get("name"))


def placement(node_models: dict[str, list[dict]], held: dict[str, set[str]],
              sizes: dict[str, int] | None = None) -> list[dict]:
    """Where each revision is and what a run would move, for plan and status: one row per revision
    {revision, holders, needing, bytes}, from each node's models (`node_models`, vllm_fleet.models'
    resolution: read, never resolved again here) and the revisions each node holds verified
    (`held`: {host: {revision keys}}). `sizes`: bytes of a revision, else its size_gb."""
    rows: dict[str, dict] = {}
    for host in sorted(node_models):
        for model in node_models[host]:
            if not model.get("enabled", True):
                continue
            key = revision_key(model)
            row = rows.setdefault(key, {"revision": key, "holders": [], "needing": [],
                                        "size": (sizes or {}).get(key) or int(float(model.get("size_gb") or 0) * 1e9)})
            target = row["holders"] if key in held.get(host, set()) else row["needing"]
            if host not in target:
                target.append(host)
    out = []
    for key in sorted(rows):
        row = rows[key]
        size = row.pop("size")
        row["bytes"] = size * len(row["needing"])
        out.append(row)
    return out
