"""A model revision to many nodes in waves, from the mirror and from the nodes that already hold it.

Pure code (no I/O): the wave plan, the input file of Debian's aria2c for one node, the blame of a
peer that served a wrong file, and where each revision is and the bytes a run moves (issue 37).
roles/blocks/model_fetch reads them through filter_plugins/distribution.py (playbooks/distribute.yml),
`vllm-fleet plan` writes the waves of a first run (``waves_document``, through the same filters),
`vllm-fleet status` shows where each revision is (``placement``, ``moves``, ``describe``), and
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

import yaml

from vllm_fleet.mirror import layout
from vllm_fleet.mirror.fetch import human

# Peers one node opens at once (aria2c's split of a file); more add connections, not bandwidth.
FAN_IN = 8
#: The sources whose models go in waves: a hub's or a git repository's, whose snapshot the fleet's mirror
#: holds with its sha256 list (roles/blocks/model_fetch: _model_fetch_hubs). Url and path sources never do.
HUB_SOURCES = layout.SNAPSHOT_SOURCES


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
    if source.get("url"):
        return f"{source['url']}@{source['revision']}" if source.get("revision") else str(source["url"])
    return str(model.get("path") or model.get("name"))


def fetch_items(models: list[dict]) -> list[dict]:
    """What a node fetches of its resolved models (vllm_fleet.models' one resolution), as
    roles/blocks/model_fetch fetches and marks them complete (its _model_fetch_items): each enabled
    model and each of its LoRA adapters, as {name, path, source, size_gb}. Those of a `path` source
    are left out: they are checked in place, never fetched, never marked."""
    items = []
    for model in models:
        if not model.get("enabled", True):
            continue
        for item in [model, *(model.get("lora_adapters") or [])]:
            source = item.get("source") or {"type": "path"}
            if source.get("type", "path") == "path":
                continue
            items.append({"name": item.get("name"), "path": item.get("path"), "source": source,
                          "size_gb": item.get("size_gb")})
    return items


def placement(node_models: dict[str, list[dict]], held: dict[str, set[str]],
              sizes: dict[str, int] | None = None) -> list[dict]:
    """Where each revision is and what a run would move, for plan and status: one row per revision
    {revision, source, holders, needing, size, bytes}, from what each node fetches (`node_models`:
    fetch_items of vllm_fleet.models' resolution, read, never resolved again here) and the revisions
    each node holds verified (`held`: {host: {revision keys}}). `size` is one copy's bytes: `sizes`'
    (measured on a holder), else the inventory's size_gb, else None (unknown, and `bytes` with it)."""
    rows: dict[str, dict] = {}
    for host in sorted(node_models):
        for model in node_models[host]:
            if not model.get("enabled", True):
                continue
            key = revision_key(model)
            declared = int(float(model["size_gb"]) * 1e9) if model.get("size_gb") else None
            row = rows.setdefault(key, {"revision": key, "source": dict(model.get("source") or {}),
                                        "holders": [], "needing": [], "size": (sizes or {}).get(key) or declared})
            row["size"] = row["size"] or declared
            target = row["holders"] if key in held.get(host, set()) else row["needing"]
            if host not in target:
                target.append(host)
    out = []
    for key in sorted(rows):
        row = rows[key]
        row["bytes"] = None if row["size"] is None else row["size"] * len(row["needing"])
        out.append(row)
    return out


def run_waves(hosts: list[str], needing: list[str], holders: list[str], mirror: str, share: dict[str, str], *,
              batches: list[int] | None = None, fan_in: int = FAN_IN) -> list[list[NodeFetch]]:
    """The waves of one revision as playbooks/distribute.yml runs them: the play's `hosts`, in order, in
    Ansible's `serial` batches (`batches`, the last entry repeated; default serial(len(hosts))); in each,
    every node of `needing` fetches it (node_fetch, its index that of the batch) from the mirror and from
    the nodes that hold it, in the play's order: `holders` (verified and shared before the run, whatever
    their batch) and the nodes of `needing` of the earlier batches (verified and shared by then). A
    batch that fetches nothing is no wave; each NodeFetch keeps its batch's number."""
    both = set(needing) & set(holders)
    if both:
        raise DistributionError(f"run_waves: {', '.join(sorted(both))} both need and hold the revision")
    sizes = list(batches or serial(len(hosts)))
    if any(int(size) < 1 for size in sizes):
        raise DistributionError(f"run_waves: a batch of fewer than one node in {sizes}")
    wanted, done = set(needing), set(holders)
    waves: list[list[NodeFetch]] = []
    start = number = 0
    while start < len(hosts):
        size = int(sizes[min(number, len(sizes) - 1)])
        batch = hosts[start:start + size]
        number += 1
        have = [host for host in hosts if host in done]
        fetches = [node_fetch(host, number, index, have, mirror, share, fan_in=fan_in)
                   for index, host in enumerate(batch) if host in wanted]
        if fetches:
            waves.append(fetches)
        done |= wanted & set(batch)
        start += size
    return waves


def moves(row: dict, hosts: list[str], *, waves: set[str] | frozenset[str] = frozenset(), sharing: list[str] = (),
          batches: list[int] | None = None) -> dict:
    """The bytes the next run moves for a placement row: {'total', 'mirror', 'peers'} (None each where
    the row's size is unknown). 'mirror' is the fleet's mirror or the model's own source. The row's
    needing nodes in `waves` (model_fetch_distribution `waves`, a hub source, a fleet with a mirror)
    fetch it in waves (run_waves over the play's `hosts`) from the mirror and from `sharing`, the
    holders that share it verified, and from each other; the others fetch it alone."""
    size = row.get("size")
    if size is None:
        return {"total": None, "mirror": None, "peers": None}
    in_waves = [h for h in row["needing"] if h in waves]
    alone = len(row["needing"]) - len(in_waves)
    mirror, peers = size * alone, 0
    if in_waves:
        sources = [h for h in hosts if h in set(sharing) and h not in in_waves]
        order = [h for h in hosts if h in set(in_waves) | set(sources)]
        # URLs stand for the nodes: only the shares of the bytes count here.
        share = {h: f"peer:{h}" for h in order}
        moved = wave_bytes(run_waves(order, in_waves, sources, "mirror", share, batches=batches), size)
        mirror, peers = mirror + moved["mirror"], moved["peers"]
    return {"total": size * len(row["needing"]), "mirror": mirror, "peers": peers}


def describe(row: dict, moved: dict, origin: str = "the mirror") -> str:
    """One revision's line, as the distribution run and `vllm-fleet status` print it (`moved`: moves'
    answer; `origin`: what 'mirror' is there, the fleet's mirror or the model's own source)."""
    fetch = "to fetch on " + ", ".join(row["needing"]) if row["needing"] else "nothing to fetch"
    if moved["total"] is None:
        amount = "size unknown (no node holds it and the inventory gives no size_gb)"
    else:
        amount = (f"{human(moved['total'])} (about {human(moved['mirror'])} from {origin}, "
                  f"{human(moved['peers'])} from peers)")
    return f"{row['revision']}: held by {', '.join(row['holders']) or 'no node'}; {fetch}: {amount}"


#: What `vllm-fleet plan` says of its waves: it contacts no node, so it cannot know what they hold.
WAVES_ASSUMPTION = ("no node holds any of these revisions yet (a plan contacts no node): the waves and bytes of a "
                    "first run; a node that holds a revision verified is a source from the start and fetches "
                    "nothing (`vllm-fleet status` shows where each revision is and what the next run would move)")


def waves_document(hosts: list[str], items: dict[str, list[dict]], mirror: str, share_bases: dict[str, str], *,
                   batches: list[int] | None = None) -> str:
    """The waves of `vllm-fleet plan` (DIR/model-distribution.yml), as YAML in a stable order, so that two
    plans compare with diff -r: for each hub revision that the nodes in waves fetch (`items`: {host:
    fetch_items of its models}, those nodes only), its batches as playbooks/distribute.yml runs them over
    the play's `hosts`, each node's sources in aria2c's order (the peers' shares at `share_bases`:
    share_url(address, port, ""); the mirror at `mirror`, "" without one: no waves then) and the bytes
    from the mirror and from the peers, under WAVES_ASSUMPTION."""
    node_items = {h: [i for i in items.get(h) or [] if (i.get("source") or {}).get("type") in HUB_SOURCES]
                  for h in hosts}
    revisions = []
    for row in placement({h: v for h, v in node_items.items() if v}, {}):
        path = layout.model_path(row["source"])
        needing = [h for h in hosts if h in row["needing"]]
        entry = {"revision": row["revision"], "mirror_path": path, "size_bytes": row["size"],
                 "nodes": len(needing)}
        if not mirror:
            revisions.append(entry)
            continue
        share = {h: _join(share_bases[h], path) for h in hosts if h in share_bases}
        waves = run_waves(hosts, needing, [], f"{mirror.rstrip('/')}/{path}", share, batches=batches)
        moved = wave_bytes(waves, row["size"] or 0)
        entry["bytes"] = {k: None if row["size"] is None else moved[k] for k in ("total", "mirror", "peers")}
        entry["waves"] = [{"wave": wave[0].wave, "nodes": [
            {"host": f.host, "sources": list(f.sources), "at_once": f.split, "peers": list(f.peers)} for f in wave]}
            for wave in waves]
        revisions.append(entry)
    head = "".join(f"# {line}\n" for line in (
        "The model revisions the nodes fetch in waves (model_fetch_distribution: waves), as",
        "playbooks/distribute.yml would run them: vllm_fleet/distribution.py, written by `vllm-fleet plan`.",
        "Per revision: its batches in order, each node's sources in aria2c's order (the first `at_once`",
        "fetched from together, the rest spares), and the bytes from the mirror and from peers."))
    body = {"assumption": WAVES_ASSUMPTION, "mirror": mirror or None,
            "note": None if mirror else "no host in the group mirror: waves need the fleet's mirror, so every node "
                                        "fetches alone, as with model_fetch_distribution mirror",
            "revisions": revisions}
    return head + yaml.safe_dump({k: v for k, v in body.items() if v is not None}, sort_keys=False, width=120)

