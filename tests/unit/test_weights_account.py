"""Where model revisions are and what a run moves (issue 37, item 4): vllm_fleet.distribution's
account that playbooks/distribute.yml prints, `vllm-fleet status` shows and `vllm-fleet plan` writes
(model-distribution.yml, through filter_plugins/distribution.py). Pure code; status's reads of the
nodes are tested in tests/unit/test_live_status.py, the plan's file in tests/unit/test_plan.py."""

from __future__ import annotations

import pytest
import yaml

from vllm_fleet import distribution as dist

HUB = {"type": "huggingface", "repo": "org/m", "revision": "r1"}
MIRROR = "http://mirror:8081"


def hosts(n):
    return [f"n{i:02d}" for i in range(n)]


def share(names):
    return {h: f"peer:{h}" for h in names}


def test_what_a_node_fetches_is_its_enabled_models_and_adapters_of_a_source_to_fetch():
    models = [
        {"name": "m", "enabled": True, "path": "/m", "source": HUB, "size_gb": 2,
         "lora_adapters": [{"name": "a", "path": "/a", "source": {"type": "huggingface", "repo": "org/a"}},
                           {"name": "local", "path": "/l", "source": {"type": "path"}}]},
        {"name": "off", "enabled": False, "path": "/off", "source": {"type": "huggingface", "repo": "org/off"}},
        {"name": "here", "enabled": True, "path": "/here", "source": {"type": "path"}},
        {"name": "g", "enabled": True, "path": "/g", "source": {"type": "git", "url": "https://x/g.git",
                                                                   "revision": "v1"}},
    ]
    items = dist.fetch_items(models)
    assert [(i["name"], i["path"]) for i in items] == [("m", "/m"), ("a", "/a"), ("g", "/g")]
    assert [dist.revision_key(i) for i in items] == ["org/m@r1", "org/a@default", "https://x/g.git@v1"]


def test_the_waves_of_a_run_follow_the_plays_batches_and_its_holders():
    # The whole fleet needs it: the batches 1, 1, 2, 4 of the play, as dist.plan cuts them.
    nodes = hosts(8)
    waves = dist.run_waves(nodes, nodes, [], MIRROR, share(nodes))
    assert [[f.host for f in w] for w in waves] == [[f.host for f in w] for w in dist.plan(nodes, [], MIRROR,
                                                                                                share(nodes))]
    # Only some nodes need it: they fetch in their own batch of the play, from the nodes before them
    # that fetched it, and from a holder whatever its batch (it held it before the run).
    waves = dist.run_waves(nodes, ["n02", "n03", "n07"], ["n05"], MIRROR, share(nodes))
    assert [(f.host, f.wave, f.peers) for w in waves for f in w] == [
        ("n02", 3, ("n05",)), ("n03", 3, ("n05",)), ("n07", 4, ("n02", "n03", "n05"))]
    assert waves[0][0].sources == ("peer:n05", MIRROR) and waves[0][0].split == 2
    # Ansible repeats the last entry of `serial`.
    assert [f.wave for w in dist.run_waves(nodes, nodes, [], MIRROR, share(nodes), batches=[2]) for f in w] == \
        [1, 1, 2, 2, 3, 3, 4, 4]
    with pytest.raises(dist.DistributionError, match="both need and hold"):
        dist.run_waves(nodes, ["n01"], ["n01"], MIRROR, share(nodes))


def row(needing, holders=(), size=1000):
    return {"revision": "org/m@r1", "source": HUB, "holders": list(holders), "needing": list(needing),
            "size": size, "bytes": None if size is None else size * len(needing)}


def test_the_next_runs_bytes_from_the_mirror_and_from_peers():
    nodes = hosts(4)
    # All in waves, one holder that shares it: n01 fetches from n00 and the mirror, n02 and n03 from two peers.
    moved = dist.moves(row(nodes[1:], nodes[:1]), nodes, waves=set(nodes), sharing=nodes[:1])
    assert moved == {"total": 3000, "mirror": 500, "peers": 2500}
    # A holder that does not share it (fetched before the node was in waves) serves nobody.
    assert dist.moves(row(nodes[1:], nodes[:1]), nodes, waves=set(nodes), sharing=[])["mirror"] == 1500
    # Nodes not in waves fetch alone, from the mirror or the model's source.
    assert dist.moves(row(nodes), nodes) == {"total": 4000, "mirror": 4000, "peers": 0}
    assert dist.moves(row([], nodes), nodes) == {"total": 0, "mirror": 0, "peers": 0}
    assert dist.moves(row(nodes, size=None), nodes) == {"total": None, "mirror": None, "peers": None}


def test_a_revisions_line_names_its_holders_and_its_bytes():
    moved = dist.moves(row(["b", "c", "d"], ["a"], size=10_000_000_000), ["a", "b", "c", "d"], waves={"b", "c", "d"},
                       sharing=["a"])
    assert dist.describe(row(["b", "c", "d"], ["a"]), moved) == (
        "org/m@r1: held by a; to fetch on b, c, d: 30.0 GB (about 5.0 GB from the mirror, 25.0 GB from peers)")
    unknown = row(["b"], size=None)
    assert dist.describe(unknown, dist.moves(unknown, ["b"]), "its source") == (
        "org/m@r1: held by no node; to fetch on b: size unknown (no node holds it and the inventory gives no size_gb)")


def test_placement_sizes_a_revision_by_a_holders_copy_else_by_the_inventory():
    model = {"name": "m", "path": "/m", "source": HUB, "size_gb": 2}
    rows = dist.placement({"a": [model], "b": [model]}, {"a": {"org/m@r1"}}, {"org/m@r1": 1_900_000_000})
    assert (rows[0]["size"], rows[0]["bytes"]) == (1_900_000_000, 1_900_000_000)
    assert dist.placement({"a": [model]}, {})[0]["size"] == 2_000_000_000
    assert dist.placement({"a": [{**model, "size_gb": None}]}, {})[0]["bytes"] is None


def test_the_plans_waves_are_a_first_runs_in_a_stable_order():
    nodes = hosts(5)
    items = {h: [{"name": "m", "path": "/m", "source": HUB, "size_gb": 1}] for h in nodes[1:]}
    items["n00"] = [{"name": "x", "path": "/x", "source": {"type": "path"}}]
    bases = {h: dist.share_url(f"10.0.0.{i}", 8091, "") for i, h in enumerate(nodes)}
    text = dist.waves_document(nodes, items, MIRROR, bases)
    assert text == dist.waves_document(nodes, items, MIRROR, bases)  # diff -r of two plans: no noise
    doc = yaml.safe_load(text)
    assert doc["assumption"] == dist.WAVES_ASSUMPTION and "no node holds" in doc["assumption"]
    (revision,) = doc["revisions"]  # a path source is on its node already: never in waves
    assert revision["revision"] == "org/m@r1" and revision["mirror_path"] == "models/org/m/r1"
    assert revision["size_bytes"] == 1_000_000_000 and revision["nodes"] == 4
    # The play's batches over all five nodes: n00 (nothing to fetch), n01, then n02 and n03, then n04.
    assert [[n["host"] for n in w["nodes"]] for w in revision["waves"]] == [["n01"], ["n02", "n03"], ["n04"]]
    assert [w["wave"] for w in revision["waves"]] == [2, 3, 4]
    first, second = revision["waves"][0]["nodes"][0], revision["waves"][1]["nodes"][0]
    assert first["sources"] == [f"{MIRROR}/models/org/m/r1"] and first["peers"] == []
    assert second["sources"] == ["http://10.0.0.1:8091/models/org/m/r1", f"{MIRROR}/models/org/m/r1"]
    assert second["at_once"] == 2
    # n01 from the mirror alone; n02 and n03 from n01 and the mirror, half each; n04 from three peers.
    assert revision["bytes"] == {"total": 4_000_000_000, "mirror": 2_000_000_000, "peers": 2_000_000_000}
    # Without the fleet's mirror no node fetches in waves: the file says so.
    alone = yaml.safe_load(dist.waves_document(nodes, items, "", bases))
    assert "waves need the fleet's mirror" in alone["note"] and "waves" not in alone["revisions"][0]


def test_the_plans_filter_reads_each_nodes_models_and_share():
    from filter_plugins import distribution as filters

    model = {"name": "m", "kind": "chat", "path": "/m", "source": HUB, "size_gb": 1}
    hostvars = {h: {"fleet_models": [model], "fleet_accelerator": {"vendor": "cpu", "count": 1},
                    "ansible_host": f"10.0.0.{i}", "model_fetch_distribution": "waves"} for i, h in enumerate(hosts(3))}
    hostvars["n02"]["model_fetch_distribution"] = "mirror"  # fetches alone: in no wave
    hostvars["n01"]["model_fetch_share_port"] = 9000
    doc = yaml.safe_load(filters.fleet_distribution_waves(hosts(3), hostvars, MIRROR, hosts(3)))
    (revision,) = doc["revisions"]
    assert revision["nodes"] == 2
    assert revision["waves"][1]["nodes"][0]["sources"][0] == "http://10.0.0.0:8091/models/org/m/r1"


def test_a_git_sources_snapshot_goes_in_waves_like_a_hub_models():
    """The mirror holds a git source's checkout as a snapshot (vllm_fleet.mirror.layout.SNAPSHOT_SOURCES):
    the nodes fetch it in waves from the mirror and their peers, as a hub model's."""
    nodes = hosts(3)
    git = {"type": "git", "url": "https://git.internal/org/g.git", "revision": "main"}
    items = {h: [{"name": "g", "path": "/g", "source": git, "size_gb": 1}] for h in nodes}
    bases = {h: dist.share_url(f"10.0.0.{i}", 8091, "") for i, h in enumerate(nodes)}
    (revision,) = yaml.safe_load(dist.waves_document(nodes, items, MIRROR, bases))["revisions"]
    assert revision["mirror_path"] == "models/git/git.internal/org/g/main" and revision["nodes"] == 3
    assert revision["bytes"]["peers"] > 0
