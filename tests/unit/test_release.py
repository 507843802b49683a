"""Versioned releases: the id a matrix names (vllm_fleet/release.py, the one place it is
computed), what a node's releases say (previous, prune), and the shape of the role and of
playbooks/rollback.yml."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module
from vllm_fleet import release, vendors

ROOT = Path(__file__).resolve().parents[2]
# The node's half: what a node's releases say (previous, prune), decided on the node.
node = load_module(ROOT / "module_utils" / "vllm_fleet_release.py")


def example_matrix(vendor: str) -> dict:
    path = ROOT / "inventories" / "example" / "group_vars" / vendors.group(vendor) / "matrix.yml"
    return yaml.safe_load(path.read_text())["fleet_matrix"]


VERSIONED = [v for v in vendors.VENDORS if vendors.release_keys(v)]


def test_every_vendor_with_a_venv_is_versioned_and_musa_says_why_not():
    assert set(VERSIONED) == {"ascend", "metax", "nvidia", "cpu"}
    assert vendors.contract("musa")["release"] == [] and vendors.contract("musa")["pins"] == {}
    with pytest.raises(ValueError, match="defines no release keys"):
        vendors.vendor_release_id(example_matrix("musa"), "musa")


@pytest.mark.parametrize("vendor", VERSIONED)
def test_the_release_keys_are_entries_of_the_vendors_matrix(vendor):
    matrix = example_matrix(vendor)
    keys = vendors.release_keys(vendor)
    assert set(vendors.contract(vendor)["pins"].values()) <= set(keys)
    assert "python" in keys and "vllm" in keys and "torch" in keys
    assert set(keys) <= set(matrix), sorted(set(keys) - set(matrix))


@pytest.mark.parametrize("vendor", VERSIONED)
def test_the_id_changes_when_and_only_when_a_defining_entry_changes(vendor):
    matrix = example_matrix(vendor)
    keys = vendors.release_keys(vendor)
    base = vendors.vendor_release_id(matrix, vendor)
    assert len(base) == release.ID_LENGTH and int(base, 16) >= 0
    # Stable: the same matrix in another order, or copied, names the same release.
    assert vendors.vendor_release_id(dict(reversed(list(copy.deepcopy(matrix).items()))), vendor) == base
    for key in matrix:
        changed = copy.deepcopy(matrix)
        value = changed[key]
        if isinstance(value, str):
            changed[key] = value + ".1"
        elif isinstance(value, dict):
            first = next(k for k in value if k not in ("sources",))
            value[first] = str(value[first]) + "x"
        elif isinstance(value, list):
            value[0] = {**value[0], "sha256": "f" * 64}
        moved = vendors.vendor_release_id(changed, vendor) != base
        assert moved == (key in keys), f"{vendor}: changing {key} {'moved' if moved else 'kept'} the release"


def test_pins_keep_their_order_read_an_entrys_version_and_leave_out_what_the_matrix_lacks():
    pins = {"vllm": "vllm", "torch-npu": "torch_npu", "ray": "ray"}
    matrix = {"torch_npu": "2.7.1", "vllm": {"version": "0.11.2", "sources": ["https://x.invalid/v.git"]}}
    assert list(release.pin_versions(pins, matrix).items()) == [("vllm", "0.11.2"), ("torch-npu", "2.7.1")]
    assert release.pin_specs(pins, matrix) == ["vllm==0.11.2", "torch-npu==2.7.1"]
    assert release.pin_specs({}, matrix) == []
    # The release is named by the contract's release and every pinned entry, pinned or not in this matrix.
    assert release.release_keys(["python", "vllm"], pins) == ["python", "ray", "torch_npu", "vllm"]
    assert release.release_keys([], {}) == []
    for entry in ({"commit": "a" * 40}, ["2.7.1"], None, True):
        with pytest.raises(ValueError, match="a version or has one"):
            release.pin_specs({"torch": "torch"}, {"torch": entry})


@pytest.mark.parametrize("vendor", vendors.VENDORS)
def test_each_pin_is_a_pip_name_over_a_version_entry_of_the_vendors_matrix_schema(vendor):
    """The class of a pinned entry: a version, or an entry with one. The schema makes every
    pinned value a version before a pin reaches pip or doctor."""
    schema = vendors.matrix_schema(vendor)
    version = {"$ref": "#/$defs/version"}
    # The cluster's pins (Ray, on a span's members) too.
    for dist, key in vendors.pins(vendor, spans=True).items():
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", dist), f"{vendor}: {dist!r} is no pip name"
        entry = schema["properties"].get(key)
        has_version = entry.get("properties", {}).get("version") == version and "version" in entry.get("required", [])
        assert entry == version or has_version, f"{vendor}: pins {dist} to {key}: {entry}"
    versions = release.pin_versions(vendors.pins(vendor, spans=True), example_matrix(vendor))
    assert all(isinstance(v, str) and v for v in versions.values()), versions


def test_no_role_writes_a_pip_pin_of_the_matrix_outside_the_contracts_pins():
    """One home: a task or template that spells `name==` over a matrix entry would be a second
    list of what the contract's pins say (install and doctor could then disagree)."""
    written = re.compile(r"[A-Za-z0-9_.-]+==\s*(\{\{\s*|'\s*~\s*)fleet_matrix\.")
    found = [f"{path.relative_to(ROOT)}:{n}"
             for root in (ROOT / "roles", ROOT / "tests" / "lab" / "vendor" / "acme" / "roles")
             for path in sorted([*root.glob("*/*/tasks/**/*"), *root.glob("*/*/templates/**/*")]) if path.is_file()
             for n, line in enumerate(path.read_text().splitlines(), 1) if written.search(line)]
    assert not found, found


def test_where_a_commit_is_fetched_from_is_not_part_of_the_release():
    matrix = example_matrix("ascend")
    base = vendors.vendor_release_id(matrix, "ascend")
    mirrored = copy.deepcopy(matrix)
    mirrored["vllm"]["sources"] = ["https://mirror.example.internal/vllm.git"]
    assert vendors.vendor_release_id(mirrored, "ascend") == base
    repinned = copy.deepcopy(matrix)
    repinned["vllm"]["commit"] = "0" * 40
    assert vendors.vendor_release_id(repinned, "ascend") != base


def test_an_overlay_checksum_moves_metaxs_release():
    matrix = example_matrix("metax")
    base = vendors.vendor_release_id(matrix, "metax")
    patched = copy.deepcopy(matrix)
    patched["vllm_overlays"][1]["sha256"] = "e" * 64
    assert vendors.vendor_release_id(patched, "metax") != base


def test_a_pin_added_to_the_matrix_is_a_new_release_and_the_vendor_is_part_of_it():
    matrix = example_matrix("nvidia")
    without = {k: v for k, v in matrix.items() if k != "openai_harmony"}
    assert vendors.vendor_release_id(without, "nvidia") != vendors.vendor_release_id(matrix, "nvidia")
    keys = ["python", "vllm", "torch"]
    assert release.release_id(matrix, keys, "nvidia") != release.release_id(matrix, keys, "cpu")


def test_the_filter_is_the_same_function():
    from filter_plugins.fleet import FilterModule

    filters = FilterModule().filters()
    matrix = example_matrix("cpu")
    assert filters["fleet_release_id"](matrix, ["python", "vllm", "torch"], "cpu") == \
        vendors.vendor_release_id(matrix, "cpu")
    assert filters["fleet_release_inputs"](matrix, ["vllm", "torch", "python"], "cpu") == {
        "vendor": "cpu",
        "matrix": {"python": "3.11", "torch": "2.13.0+cpu", "vllm": {"version": "0.32.0", "isa": "avx2"}}}


@pytest.mark.parametrize("vendor", VERSIONED)
def test_the_node_recognises_the_ids_the_controller_makes(vendor):
    """The node's half (module_utils/vllm_fleet_release.py) prunes an unmarked directory only
    when it is spelled as release_id spells ids; any other directory is someone else's."""
    rid = vendors.vendor_release_id(example_matrix(vendor), vendor)
    assert node.is_release_id(rid)
    assert not node.is_release_id(rid[:-1]) and not node.is_release_id(rid.upper())


# ---------------------------------------------------------------- what a node's releases say

def test_a_fresh_node_has_nothing_to_roll_back_to():
    state = node.release_state([], [], "", [], wanted="a1")
    assert state == {"current": "", "wanted": "a1", "installed": [], "incomplete": [], "wanted_complete": False,
                     "previous": "", "prune": [], "history": []}


def test_previous_is_the_release_current_before_and_a_second_rollback_goes_forward():
    # A converged, then B: B current, A previous.
    state = node.release_state(["A", "B"], ["A", "B"], "B", ["A", "B"], wanted="B")
    assert state["previous"] == "A" and state["installed"] == ["A", "B"] and state["prune"] == []
    # Rolled back to A: B is now the previous one.
    history = node.history_after_switch(["A", "B"], "A")
    assert history == ["B", "A"]
    assert node.release_state(["A", "B"], ["A", "B"], "A", history, wanted="B")["previous"] == "B"


def test_prune_keeps_the_current_and_keep_minus_one_most_recent_others():
    dirs = ["A", "B", "C", "D"]
    state = node.release_state(dirs, dirs, "D", ["A", "B", "C", "D"], wanted="D", keep=2)
    assert state["previous"] == "C" and state["prune"] == ["A", "B"]
    state = node.release_state(dirs, dirs, "D", ["A", "B", "C", "D"], wanted="D", keep=3)
    assert state["prune"] == ["A"]
    # keep 1: only the current one stays; nothing to roll back to after the prune.
    state = node.release_state(dirs, dirs, "D", ["A", "B", "C", "D"], wanted="D", keep=1)
    assert state["prune"] == ["A", "B", "C"]
    with pytest.raises(ValueError, match="at least 1"):
        node.release_state(dirs, dirs, "D", [], keep=0)


def test_an_incomplete_release_is_never_previous_and_is_pruned_unless_wanted():
    half = "0123456789ab"  # no marker: only its name, a release id, says it is the fleet's
    # B's install was interrupted (no marker): A stays the one to go back to.
    state = node.release_state(["A", half], ["A"], "A", ["A"], wanted=half)
    assert state["incomplete"] == [half] and not state["wanted_complete"]
    assert state["previous"] == "" and half not in state["prune"]
    # Once the matrix moved on to C, the half-installed B goes.
    state = node.release_state(["A", half, "C"], ["A", "C"], "C", ["A", "C"], wanted="C")
    assert state["previous"] == "A" and state["prune"] == [half]


def test_a_directory_neither_marked_nor_named_as_a_release_is_never_pruned():
    state = node.release_state(["A", "C", "backup", "0123456789AB"], ["A", "C"], "C", ["A", "C"], wanted="C",
                                  keep=1)
    assert state["prune"] == ["A"] and state["incomplete"] == []


def test_a_history_entry_without_its_directory_is_forgotten_and_a_never_current_release_counts_oldest():
    state = node.release_state(["B", "C"], ["B", "C"], "C", ["A", "C"], wanted="C")
    assert state["history"] == ["B", "C"] and state["previous"] == "B"


# ---------------------------------------------------------------- the role and the playbook

def load(path: str):
    return yaml.safe_load((ROOT / path).read_text())


def test_paths_have_one_home_and_units_run_the_stable_current_link():
    fleet = load("roles/stages/fleet/vars/main.yml")
    assert fleet["_fleet_current"] == "{{ fleet_base_dir }}/current"
    assert fleet["_fleet_venv"] == "{{ _fleet_current }}/venv"
    assert fleet["_fleet_release_venv"] == "{{ _fleet_release_dir }}/venv"
    assert "fleet_release_id" in fleet["_fleet_release_id"]
    # Installers write into the matrix's release, never into current.
    assert load("roles/blocks/python_env/defaults/main.yml")["python_env_path"] == "{{ _fleet_release_venv }}"
    assert load("roles/blocks/vllm_source/defaults/main.yml")["vllm_source_venv"] == "{{ _fleet_release_venv }}"
    assert load("roles/blocks/vllm_source/defaults/main.yml")["vllm_source_dir"] == "{{ _fleet_release_src_dir }}"
    assert load("roles/blocks/vllm_overlay/defaults/main.yml")["vllm_overlay_state_dir"] \
        == "{{ _fleet_release_overlay_dir }}"
    # What runs reads current: every versioned vendor's executable is the venv's.
    for vendor in VERSIONED:
        assert vendors.contract(vendor)["runtime"]["executable"] == "{{ _fleet_venv }}/bin/vllm"
    # No role but roles/stages/fleet derives a release path (roles/blocks/fleet_release links current relatively).
    for path in (ROOT / "roles").glob("*/*/*/*.yml"):
        if path.parts[-3] not in ("fleet", "fleet_release") and path.parts[-2] != "meta":
            assert "/releases" not in path.read_text() and "/current" not in path.read_text(), path


def test_converge_switches_release_after_the_models_and_right_before_the_units_restart():
    tasks = load("playbooks/tasks/converge-steps.yml")[:-1]
    steps = [t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role") for t in tasks]
    names = [s["name"].rsplit("/", 1)[-1] for s in steps]
    assert names.index("fleet_release") == names.index("vllm_service") - 1
    assert names.index("fleet_release") > names.index("model_fetch") > names.index("{{ fleet_vendor.role }}")
    assert tasks[names.index("fleet_release")]["when"] == "_fleet_releases_enabled"


def test_each_entry_point_is_one_module_run_on_the_node():
    """converge (main) marks, switches and prunes, switch only switches, read only reads: each
    one call of library/fleet_releases.py, then a set_fact on the controller."""
    main = load("roles/blocks/fleet_release/tasks/main.yml")
    assert [t["ansible.builtin.import_tasks"] for t in main] == ["converge.yml"]
    calls = {}
    for entry in ("converge", "read", "switch"):
        tasks = load(f"roles/blocks/fleet_release/tasks/{entry}.yml")
        assert [next(k for k in t if k not in ("name", "register")) for t in tasks] == [
            "fleet_releases", "ansible.builtin.set_fact"], entry
        calls[entry] = tasks[0]["fleet_releases"]
        published = f"{{{{ {tasks[0]['register']}.state }}}}"
        assert tasks[1]["ansible.builtin.set_fact"] == {"fleet_release_state": published}
    assert {k for k in calls["converge"] if k in ("record", "target", "prune")} == {"record", "target", "prune"}
    assert calls["converge"]["prune"] is True and "fleet_release_inputs" in calls["converge"]["record"]
    assert "target" in calls["switch"] and "record" not in calls["switch"] and "prune" not in calls["switch"]
    assert not {"record", "target", "prune"} & set(calls["read"])
    activate = load("roles/blocks/fleet_release/tasks/activate.yml")
    assert activate[0]["ansible.builtin.import_tasks"] == "switch.yml"
    assert activate[1]["ansible.builtin.include_role"]["name"] == "blocks/vllm_service"
    specs = load("roles/blocks/fleet_release/meta/argument_specs.yml")["argument_specs"]
    assert set(specs) == {"main", "read", "switch", "activate"}
    assert load("roles/blocks/fleet_release/defaults/main.yml") == {"fleet_release_target": ""}
    for entry in ("switch", "activate"):
        assert specs[entry]["options"]["fleet_release_target"]["default"] == ""


def test_rollback_validates_reads_switches_to_previous_and_passes_the_gate():
    plays = load("playbooks/rollback.yml")
    assert plays[0] == {"name": "Validate the inventory", "ansible.builtin.import_playbook": "validate.yml"}
    play = plays[1]
    assert play["hosts"] == "fleet" and [r["role"] for r in play["roles"]] == ["stages/fleet"]
    tasks = play["tasks"]
    includes = [t["ansible.builtin.include_role"].get("tasks_from") for t in tasks
                if "ansible.builtin.include_role" in t]
    assert includes == ["read.yml", "activate.yml"]
    activate = next(t for t in tasks if "ansible.builtin.include_role" in t
                    and t["ansible.builtin.include_role"]["tasks_from"] == "activate.yml")
    assert activate["vars"]["fleet_release_target"] == "{{ fleet_release_rollback_to }}"
    asserts = [t["ansible.builtin.assert"]["that"] for t in tasks if "ansible.builtin.assert" in t]
    assert asserts == ["_fleet_releases_enabled", "fleet_release_state.previous | length > 0"]


def test_the_units_environment_names_the_current_release():
    env = load("roles/blocks/vllm_service/vars/main.yml")["_vllm_service_env"]
    assert "'FLEET_RELEASE': fleet_release_state.current | default(_fleet_release_id, true)" in env
    assert "if _fleet_releases_enabled" in env


def test_the_run_result_says_per_node_from_which_release_to_which():
    from vllm_fleet.api import result_from_events

    def fact(host, state):
        return {"event": "runner_on_ok", "event_data": {"host": host, "task": "Publish",
                                                        "res": {"ansible_facts": {"fleet_release_state": state}}}}
    events = [
        fact("n1", {"current": "bbb", "installed": ["aaa", "bbb"], "previous": "aaa"}),
        fact("n1", {"current": "aaa", "installed": ["bbb", "aaa"], "previous": "bbb", "switched_from": "bbb"}),
        fact("n2", {"current": "ccc", "installed": ["ccc"], "previous": ""}),
        {"event": "playbook_on_stats", "event_data": {"ok": {"n1": 5, "n2": 3}, "changed": {"n1": 2}}},
    ]
    result = result_from_events(events, playbook="playbooks/rollback.yml")
    assert result.releases == {"n1": {"from": "bbb", "to": "aaa", "installed": ["bbb", "aaa"]},
                               "n2": {"from": "ccc", "to": "ccc", "installed": ["ccc"]}}
    text = str(result)
    assert "n1: release bbb -> aaa" in text and "n2: release ccc (unchanged)" in text
    assert result.to_dict()["releases"]["n1"]["to"] == "aaa"
