"""vllm_fleet.distribution: the waves of a model revision, aria2c's input file, the blame of a peer
that served a wrong file and the bytes a run moves (issue 37). Pure code; aria2c itself runs in
scripts/bench-distribution."""

from __future__ import annotations

import pytest

from vllm_fleet import distribution as dist

MIRROR = "http://mirror:8080/models/org/m/rev1"
SUM_A, SUM_B = "a" * 64, "b" * 64


def share(hosts):
    return {h: f"http://{h}:8099/models/org/m/rev1" for h in hosts}


def hosts(n):
    return [f"n{i:02d}" for i in range(n)]


@pytest.mark.parametrize(("needing", "holders", "sizes"), [
    (0, 0, []),
    (1, 0, [1]),
    (4, 0, [1, 1, 2]),
    (16, 0, [1, 1, 2, 4, 8]),
    (17, 0, [1, 1, 2, 4, 8, 1]),
    (100, 0, [1, 1, 2, 4, 8, 16, 32, 36]),
    (5, 3, [3, 2]),
])
def test_batches_double_from_one_node(needing, holders, sizes):
    assert dist.batch_sizes(needing, holders) == sizes
    assert sum(sizes) == needing


def test_serial_is_the_plan_and_never_empty():
    assert dist.serial(16) == [1, 1, 2, 4, 8]
    assert dist.serial(0) == [1]


def test_first_wave_from_the_mirror_alone_then_the_mirror_halves_the_second():
    waves = dist.plan(hosts(4), [], MIRROR, share(hosts(4)))
    first, second, third = waves
    assert first == [dist.NodeFetch("n00", 1, (MIRROR,), 1)]
    assert second[0].sources == (share(["n00"])["n00"], MIRROR)
    assert second[0].split == 2
    # From two peers on, the mirror is the spare: listed last, beyond the split.
    assert [f.host for f in third] == ["n02", "n03"]
    for fetch in third:
        assert fetch.peers == ("n00", "n01")
        assert fetch.sources[-1] == MIRROR
        assert fetch.split == 2


def test_every_source_of_a_wave_holds_the_revision_before_it():
    nodes = hosts(16)
    waves = dist.plan(nodes, [], MIRROR, share(nodes))
    have = set()
    for wave in waves:
        for fetch in wave:
            assert set(fetch.peers) <= have
        have |= {f.host for f in wave}
    assert have == set(nodes)


def test_a_large_wave_spreads_its_nodes_over_the_holders():
    nodes = hosts(64)
    waves = dist.plan(nodes, [], MIRROR, share(nodes), fan_in=4)
    last = waves[-1]
    assert len(last) == 32
    load = {}
    for fetch in last:
        assert len(fetch.peers) == 4 and fetch.split == 4
        for peer in fetch.peers:
            load[peer] = load.get(peer, 0) + 1
    # 32 nodes x 4 peers over 32 holders: each holder opened by exactly 4 nodes.
    assert set(load.values()) == {4}


def test_holders_of_an_earlier_run_serve_the_first_wave():
    nodes = hosts(5)
    waves = dist.plan(nodes[3:], nodes[:3], MIRROR, share(nodes))
    assert [[f.host for f in w] for w in waves] == [["n03", "n04"]]
    assert all(len(f.peers) == 3 and f.split == 3 for f in waves[0])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"needing": ["a"], "holders": ["a"]}, "both need and hold"),
    ({"needing": ["a", "a"], "holders": []}, "named twice"),
    ({"needing": ["a", "b"], "holders": [], "share": {}}, "no share URL for a"),
    ({"needing": ["a"], "holders": [], "mirror": ""}, "no mirror URL"),
])
def test_plans_that_cannot_run_are_refused(kwargs, message):
    args = {"mirror": MIRROR, "share": share(["a", "b"]), **kwargs}
    with pytest.raises(dist.DistributionError, match=message):
        dist.plan(args["needing"], args["holders"], args["mirror"], args["share"])


def test_the_input_file_lists_every_file_with_its_sources_and_checksum():
    files = [{"name": "config.json", "sha256": SUM_A}, {"name": "sub/model.safetensors", "sha256": SUM_B}]
    text = dist.aria2_input(files, ("http://p1/x", "http://p2/x/", MIRROR), 2, "/srv/m.partial")
    assert text == (
        "http://p1/x/config.json\thttp://p2/x/config.json\t" + MIRROR + "/config.json\n"
        "  dir=/srv/m.partial\n  out=config.json\n  checksum=sha-256=" + SUM_A + "\n  split=2\n"
        "http://p1/x/sub/model.safetensors\thttp://p2/x/sub/model.safetensors\t" + MIRROR + "/sub/model.safetensors\n"
        "  dir=/srv/m.partial/sub\n  out=model.safetensors\n  checksum=sha-256=" + SUM_B + "\n  split=2\n")
    assert dist.aria2_input([], (MIRROR,), 1, "/d") == ""


@pytest.mark.parametrize("item", [
    {"name": "../etc/passwd", "sha256": SUM_A},
    {"name": "/abs", "sha256": SUM_A},
    {"name": "a\tb", "sha256": SUM_A},
    {"name": "ok", "sha256": "XYZ"},
])
def test_the_input_file_refuses_what_would_leave_the_directory_or_break_it(item):
    with pytest.raises(dist.DistributionError):
        dist.aria2_input([item], (MIRROR,), 1, "/d")


def test_a_peer_that_served_a_wrong_file_is_blamed_and_dropped():
    files = [{"name": "w.bin", "sha256": SUM_A}]
    fetch = dist.plan(hosts(4), [], MIRROR, share(hosts(4)))[2][0]
    probe = dist.probe_input(files, fetch.sources, "/d")
    assert f"dir={dist.probe_dir('/d', 1)}" in probe and probe.count("split=1") == 3
    # n01's copy differs from the manifest; the mirror gave nothing (dead): not blamed for a wrong file.
    results = {("w.bin", 0): SUM_A, ("w.bin", 1): SUM_B, ("w.bin", 2): ""}
    bad = dist.blame(results, files, fetch.sources)
    assert bad == {fetch.sources[1]: ["w.bin"]}
    kept = dist.without(fetch, set(bad))
    assert kept.peers == ("n00",)
    # One peer left: the mirror becomes a regular source again.
    assert kept.sources == (fetch.sources[0], MIRROR) and kept.split == 2
    with pytest.raises(dist.DistributionError, match="every source"):
        dist.without(kept, set(kept.sources))


def test_bytes_of_a_run_come_mostly_from_peers():
    nodes = hosts(16)
    moved = dist.wave_bytes(dist.plan(nodes, [], MIRROR, share(nodes)), 1000)
    # The mirror: the first node whole, half of the second; the peers the rest.
    assert moved == {"total": 16000, "mirror": 1500, "peers": 14500, "nodes": 16, "waves": 5}
    assert dist.wave_bytes([], 1000)["total"] == 0


def test_placement_shows_where_each_revision_is_and_what_a_run_moves():
    model = {"name": "m", "enabled": True, "size_gb": 2,
             "source": {"type": "huggingface", "repo": "org/m", "revision": "r1"}}
    off = {**model, "name": "off", "enabled": False, "source": {"type": "huggingface", "repo": "org/off"}}
    rows = dist.placement({"a": [model, off], "b": [model], "c": [model]}, {"a": {"org/m@r1"}})
    assert rows == [{"revision": "org/m@r1", "source": model["source"], "holders": ["a"], "needing": ["b", "c"],
                     "size": 2_000_000_000, "bytes": 4_000_000_000}]
    # Held everywhere: a run moves nothing.
    held = {h: {"org/m@r1"} for h in "abc"}
    assert dist.placement({"a": [model], "b": [model], "c": [model]}, held)[0]["bytes"] == 0


# ---- the filters the role reads (filter_plugins/distribution.py)

def test_the_role_sees_the_holders_that_nobody_blamed():
    from filter_plugins import distribution as filters

    source = {"type": "huggingface", "repo": "org/m", "revision": "rev1"}
    key = filters.fleet_distribution_key(source)
    assert key == "models/org/m/rev1"
    play = hosts(6)
    hostvars = {h: {"_model_fetch_shared": [key], "_model_fetch_share_base": f"http://{h}:8091"} for h in play[:4]}
    hostvars.update({h: {} for h in play[4:]})
    hostvars["n01"]["_model_fetch_blamed"] = ["n02"]
    # Batches 1, 1, 2, 2: n04 and n05 form the fourth; n02 was blamed by n01, so it serves nobody.
    fetch = filters.fleet_distribution_fetch(source, "n05", play, ["n04", "n05"], hostvars, "http://mirror:8080")
    assert fetch["peers"] == ["n03", "n00", "n01"]  # the second of its batch starts further round
    assert fetch["wave"] == 4 and fetch["split"] == 3
    assert fetch["sources"][-1] == "http://mirror:8080/models/org/m/rev1"
    assert "http://n00:8091/models/org/m/rev1" in fetch["sources"]
    # A holder of a later batch (it held the revision before the run) serves an earlier one.
    first = filters.fleet_distribution_fetch(source, "n00", play, ["n00"], hostvars, "http://mirror:8080")
    assert first["peers"] == ["n01", "n03"] and first["wave"] == 1
    # The converge's play, one batch of every node: the holders serve it too; without any, the mirror alone.
    alone = filters.fleet_distribution_fetch(source, "n05", play, play, hostvars, "http://mirror:8080")
    assert sorted(alone["peers"]) == ["n00", "n01", "n03"] and alone["sources"][-1] == "http://mirror:8080/models/org/m/rev1"
    nobody = filters.fleet_distribution_fetch(source, "n05", play, play, {h: {} for h in play}, "http://mirror:8080")
    assert nobody["sources"] == ["http://mirror:8080/models/org/m/rev1"] and nobody["peers"] == []


def test_the_role_names_the_peer_from_sha256sum_lines():
    from filter_plugins import distribution as filters

    fetch = {"host": "n03", "wave": 3, "sources": ["http://n00/x", "http://n01/x", MIRROR], "split": 2,
             "peers": ["n00", "n01"]}
    files = [{"name": "w/a.bin", "sha256": SUM_A}]
    out = f"{SUM_A}  .probe/0/w/a.bin\n{SUM_B}  .probe/1/w/a.bin\n"
    blame = filters.fleet_distribution_blame(out, files, fetch)
    assert blame == [{"source": "http://n01/x", "host": "n01", "files": ["w/a.bin"]}]
    kept = filters.fleet_distribution_without(fetch, [b["source"] for b in blame])
    assert kept["peers"] == ["n00"] and kept["sources"] == ["http://n00/x", MIRROR]
    assert "checksum=sha-256=" + SUM_A in filters.fleet_aria2_input(files, kept, "/m.partial")


def test_the_share_allows_the_fleet_and_loopback_only_in_a_loopback_lab():
    from filter_plugins import distribution as filters

    real = {"a": {"fleet_cluster_address": "10.0.0.2"}, "b": {"ansible_host": "10.0.0.3"}}
    assert filters.fleet_distribution_allow(["a", "b"], real) == ["10.0.0.2", "10.0.0.3"]
    lab = {"a": {"fleet_cluster_address": "127.0.0.3"}, "b": {"fleet_cluster_address": "127.0.0.4"}}
    assert filters.fleet_distribution_allow(["a", "b"], lab) == ["127.0.0.1", "127.0.0.3", "127.0.0.4"]
    assert filters.fleet_distribution_hostport("::1", 8091) == "[::1]:8091"
    assert filters.fleet_distribution_serial(hosts(16)) == [1, 1, 2, 4, 8]
    assert filters.fleet_distribution_wanted(["a"], {"a": {"model_fetch_distribution": "waves"}})
    assert not filters.fleet_distribution_wanted(["a"], {"a": {}})


def test_the_run_says_where_each_revision_is_and_what_it_would_move():
    from filter_plugins import distribution as filters

    resolved = {"name": "m", "enabled": True, "size_gb": 10, "path": "/srv/m", "port": 8000,
                "source": {"type": "huggingface", "repo": "org/m", "revision": "r1"}}
    model = filters.fleet_distribution_model(resolved)
    assert "port" not in model
    marker = {"stdout_lines": ["/srv/m/.vllm-fleet-complete"]}
    hostvars = {"a": {"_model_fetch_markers": marker, "_model_fetch_shared": ["models/org/m/r1"],
                      "_model_fetch_hub_models": [model]}, **{h: {"_model_fetch_hub_models": [model]} for h in "bcd"}}
    lines = filters.fleet_distribution_placement(["a", "b", "c", "d"], hostvars)
    # a holds and shares it: batches of b, then c and d; b with one peer and the mirror beside it,
    # c and d from two peers.
    assert lines == ["org/m@r1: held by a; to fetch on b, c, d: 30.0 GB "
                     "(about 5.0 GB from the mirror, 25.0 GB from peers)"]
    everywhere = {h: {"_model_fetch_markers": marker, "_model_fetch_hub_models": [model]} for h in "abcd"}
    assert filters.fleet_distribution_placement(list("abcd"), everywhere) == [
        "org/m@r1: held by a, b, c, d; nothing to fetch: 0 B (about 0 B from the mirror, 0 B from peers)"]
