"""Filters of the model distribution in waves (roles/blocks/model_fetch, playbooks/distribute.yml;
issue 37): thin calls into vllm_fleet.distribution, where the rules live and are unit-tested
(tests/unit/test_model_distribution.py)."""

from __future__ import annotations

import itertools
import posixpath
import re
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

try:
    from vllm_fleet import distribution as dist
    from vllm_fleet import models
    from vllm_fleet.mirror import layout
    from vllm_fleet.plain import plain as _plain
    from vllm_fleet.role_specs import role_default
except ImportError:  # running ansible-playbook from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from vllm_fleet import distribution as dist
    from vllm_fleet import models
    from vllm_fleet.mirror import layout
    from vllm_fleet.plain import plain as _plain
    from vllm_fleet.role_specs import role_default


def _fetch(value) -> dist.NodeFetch:
    value = _plain(value)
    return dist.NodeFetch(value["host"], int(value["wave"]), tuple(value["sources"]), int(value["split"]),
                          tuple(value.get("peers") or ()))


def _dict(fetch: dist.NodeFetch) -> dict:
    return {"host": fetch.host, "wave": fetch.wave, "sources": list(fetch.sources), "split": fetch.split,
            "peers": list(fetch.peers)}


def fleet_distribution_serial(hosts):
    """The distribution play's `serial`: the waves' batches (1, 1, 2, 4, ...) over the fleet's nodes.
    Play keywords see no inventory variable (only groups and extra vars), so the batches are
    always these; the play ends at its first task where no node asks for waves."""
    return dist.serial(len(list(_plain(hosts) or [])))


def fleet_distribution_wanted(hosts, hostvars):
    """Whether a node of `hosts` has model_fetch_distribution `waves`."""
    return any(str(hostvars[h].get("model_fetch_distribution", "mirror")) == "waves" for h in _plain(hosts) or [])


def fleet_distribution_addresses(hosts, hostvars):
    """Each node's fleet address, in order: its fleet_cluster_address, else its ansible_host, else its name."""
    return [str(hostvars[h].get("fleet_cluster_address") or hostvars[h].get("ansible_host") or h)
            for h in _plain(hosts) or []]


def fleet_distribution_hostport(address, port):
    """<address>:<port>, an IPv6 address in brackets: the share's nginx listen and its URL."""
    return dist.share_url(str(address), int(port), "").removeprefix("http://").rstrip("/")


def fleet_distribution_allow(hosts, hostvars):
    """The share's allow-list: every node's fleet address; with loopback addresses (nodes that share
    one machine's loopback, as the lab's do) the loopback itself, which a client there connects from
    whatever address it connects to, and which no other machine reaches."""
    addresses = sorted(set(fleet_distribution_addresses(hosts, hostvars)))
    return sorted({*addresses, "127.0.0.1"}) if any(models.is_loopback(a) for a in addresses) else addresses


def fleet_distribution_key(source):
    """A mirrored model's revision as the mirror and every share path it (layout.model_path): a hub's
    models/<org>/<name>/<revision>, a git source's models/git/<host>/<path>/<revision>."""
    return layout.model_path(_plain(source))


def fleet_distribution_fetch(source, host, play_hosts, batch, hostvars, mirror_url):
    """Where `host` fetches the hub model `source` from in this batch of the play: the mirror, and the
    other hosts of the play (in its order) that share the revision verified (their fact
    _model_fetch_shared: the nodes of the earlier batches that fetched it in this run, and any node
    that held it from an earlier run, whatever its batch) and that no node of the run blamed for a
    wrong file (their fact _model_fetch_blamed names the ones it blamed). {host, wave, sources,
    split, peers}."""
    host, batch, play_hosts = str(host), [str(h) for h in _plain(batch)], [str(h) for h in _plain(play_hosts)]
    key = layout.model_path(_plain(source))
    mirror = f"{mirror_url}/{key}"
    first = min((play_hosts.index(h) for h in batch if h in play_hosts), default=len(play_hosts))
    blamed = {str(b) for h in play_hosts for b in (_plain(hostvars[h].get("_model_fetch_blamed")) or [])}
    have = [h for h in play_hosts if h != host and key in (_plain(hostvars[h].get("_model_fetch_shared")) or [])
            and h not in blamed and hostvars[h].get("_model_fetch_share_base")]
    share = {h: f"{str(hostvars[h]['_model_fetch_share_base']).rstrip('/')}/{key}" for h in have}
    index = batch.index(host) if host in batch else 0
    # The batch's number, for the logs: how many of the plan's batches end at or before it starts.
    wave = 1 + sum(1 for end in itertools.accumulate(dist.serial(len(play_hosts))) if end <= first)
    try:
        return _dict(dist.node_fetch(host, wave, index, have, mirror, share))
    except dist.DistributionError as exc:
        raise AnsibleFilterError(f"fleet_distribution_fetch: {exc}") from exc


def fleet_distribution_share_of(host, key):
    """{host, key}: the share of the revision `key` (models/<org>/<name>/<revision>) on `host`."""
    return {"host": str(host), "key": str(key)}


def fleet_distribution_model(model):
    """What the run's account of a hub model needs of a resolved one: {name, path, size_gb, source}."""
    model = _plain(model)
    return {"name": model.get("name"), "path": model.get("path"), "size_gb": model.get("size_gb"),
            "source": model.get("source") or {}}


def fleet_distribution_placement(hosts, hostvars):
    """Where each hub model revision is and what the waves would move, one line per revision, from
    each node's facts: its hub models (_model_fetch_hub_models, from roles/stages/fleet's one
    resolution), their completion markers (_model_fetch_markers) and its shares (_model_fetch_shared);
    the account is vllm_fleet.distribution's (placement, moves, describe), as `vllm-fleet status`'s."""
    hosts = [str(h) for h in _plain(hosts) or []]
    node_models, held, sharing = {}, {}, {}
    for host in hosts:
        own = hostvars[host]
        hub = _plain(own.get("_model_fetch_hub_models")) or []
        node_models[host] = hub
        markers = (_plain(own.get("_model_fetch_markers")) or {}).get("stdout_lines") or []
        done = {posixpath.dirname(p) for p in markers}
        held[host] = {dist.revision_key(m) for m in hub if m.get("path") in done}
        shared = set(_plain(own.get("_model_fetch_shared")) or [])
        for model in hub:
            if layout.model_path(model["source"]) in shared:
                sharing.setdefault(dist.revision_key(model), []).append(host)
    return [dist.describe(row, dist.moves(row, hosts, waves=set(hosts), sharing=sharing.get(row["revision"], [])))
            for row in dist.placement(node_models, held)]


def fleet_distribution_waves(hosts, hostvars, mirror_url, fleet_hosts=None):
    """`vllm-fleet plan`'s model-distribution.yml (vllm_fleet.distribution.waves_document): the waves of
    every hub revision the nodes of `hosts` (the play's, in order) with model_fetch_distribution `waves`
    fetch, from the mirror at `mirror_url` and from each other's shares, assuming no node holds any
    yet. Each node's models are vllm_fleet.models' one resolution of its variables; its share is at its
    fleet address and model_fetch_share_port. The batches are `serial` over `fleet_hosts` (the group
    fleet), as in playbooks/distribute.yml."""
    hosts = [str(h) for h in _plain(hosts) or []]
    items, bases = {}, {}
    try:
        for host in hosts:
            own = hostvars[host]
            if str(own.get("model_fetch_distribution", role_default("model_fetch_distribution"))) != "waves":
                continue
            inputs = {name: _plain(own.get(name)) for name in models.NODE_INPUTS}
            items[host] = dist.fetch_items(models.node_models(inputs, host)[0])
            port = _plain(own.get("model_fetch_share_port", role_default("model_fetch_share_port")))
            bases[host] = dist.share_url(fleet_distribution_addresses([host], hostvars)[0], int(port), "")
        batches = dist.serial(len(list(_plain(fleet_hosts) or hosts)))
        return dist.waves_document(hosts, items, str(mirror_url or ""), bases, batches=batches)
    except (dist.DistributionError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_distribution_waves: {exc}") from exc


def fleet_aria2_input(files, fetch, dest):
    """aria2c's input file that fetches `files` ([{name, sha256}]) into `dest` from `fetch`'s sources."""
    fetch = _fetch(fetch)
    try:
        return dist.aria2_input(_plain(files), fetch.sources, fetch.split, str(dest))
    except dist.DistributionError as exc:
        raise AnsibleFilterError(f"fleet_aria2_input: {exc}") from exc


def fleet_aria2_probe(files, fetch, dest):
    """aria2c's input file that fetches each of `files` from each of `fetch`'s sources alone."""
    try:
        return dist.probe_input(_plain(files), _fetch(fetch).sources, str(dest))
    except dist.DistributionError as exc:
        raise AnsibleFilterError(f"fleet_aria2_probe: {exc}") from exc


_SUM_LINE = re.compile(r"^([0-9a-f]{64})  (?:\./)?\.probe/(\d+)/(.+)$")


def fleet_distribution_blame(sha256sum_out, files, fetch):
    """The sources that served a wrong file, from sha256sum's lines over the probe's copies (run in
    the staging directory): [{source: URL, host: the peer's name or "mirror", files: [names]}]."""
    fetch = _fetch(fetch)
    results = {}
    for line in str(sha256sum_out).splitlines():
        match = _SUM_LINE.match(line.strip())
        if match:
            results[(match[3], int(match[2]))] = match[1]
    names = dict(zip(fetch.sources, fetch.peers, strict=False))
    return [{"source": url, "host": names.get(url, "mirror"), "files": found}
            for url, found in sorted(dist.blame(results, _plain(files), fetch.sources).items())]


def fleet_distribution_without(fetch, bad):
    """`fetch` with the sources `bad` (URLs) dropped."""
    try:
        return _dict(dist.without(_fetch(fetch), set(_plain(bad) or [])))
    except dist.DistributionError as exc:
        raise AnsibleFilterError(f"fleet_distribution_without: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "fleet_distribution_serial": fleet_distribution_serial,
            "fleet_distribution_wanted": fleet_distribution_wanted,
            "fleet_distribution_addresses": fleet_distribution_addresses,
            "fleet_distribution_hostport": fleet_distribution_hostport,
            "fleet_distribution_allow": fleet_distribution_allow,
            "fleet_distribution_key": fleet_distribution_key,
            "fleet_distribution_fetch": fleet_distribution_fetch,
            "fleet_distribution_model": fleet_distribution_model,
            "fleet_distribution_share_of": fleet_distribution_share_of,
            "fleet_distribution_placement": fleet_distribution_placement,
            "fleet_distribution_waves": fleet_distribution_waves,
            "fleet_aria2_input": fleet_aria2_input,
            "fleet_aria2_probe": fleet_aria2_probe,
            "fleet_distribution_blame": fleet_distribution_blame,
            "fleet_distribution_without": fleet_distribution_without,
        }
