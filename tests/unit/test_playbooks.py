"""Shape of the playbooks that site.yml imports, and of the vendor contract every vendor keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vllm_fleet import vendors

ROOT = Path(__file__).resolve().parents[2]
#: What every vendor contract (roles/vendors/<vendor>/vars/main.yml) must say;
#: docs/CONTRIBUTING-VENDOR.md explains each.
CONTRACT_KEYS = {"role", "deploy_modes", "visible_devices_env", "device_groups", "shared_devices", "unit_devices",
                 "packages", "apt_sets", "installs", "pins", "release", "runtime", "cluster", "driver", "doctor",
                 "image", "container", "vllm_build"}
RUNTIME_KEYS = {"env_scripts", "conda", "executable", "python", "extra_env"}


def load(path: Path):
    return yaml.safe_load(path.read_text())


def test_site_validates_first_then_converges_every_vendor_in_one_play():
    site = load(ROOT / "site.yml")
    imported = [play["ansible.builtin.import_playbook"] for play in site]
    assert imported[0] == "playbooks/validate.yml"
    # The fleet's own mirror before any node fetches from it; the routers last: their health
    # checks find the engines up.
    # The waves (opt-in) after the mirror they start from and before the converge that finds the
    # models complete.
    assert imported[1:] == ["playbooks/mirror.yml", "playbooks/distribute.yml", "playbooks/converge.yml",
                            "playbooks/router.yml", "playbooks/monitoring.yml"]
    # No playbook per vendor: a run costs the slowest vendor, not the sum of them.
    assert not [p for p in imported if Path(p).stem in vendors.VENDORS]


def test_the_converge_play_targets_the_fleet_and_lets_each_node_run_its_vendors_role():
    """One play over `fleet` under the free strategy: each node goes on at its own pace,
    and a vendor whose nodes all fail does not end the play for the other vendors."""
    in_place, rollout = load(ROOT / "playbooks" / "converge.yml")
    assert in_place["strategy"] == "free"
    assert [r["role"] for r in in_place["roles"]] == ["stages/fleet"]
    assert [t["ansible.builtin.import_tasks"] for t in in_place["tasks"]] == ["tasks/converge-node.yml"]
    node = load(ROOT / "playbooks" / "tasks" / "converge-node.yml")
    # One read of the node's state first; the steps, included as one unit, only where it is needed;
    # the report on every node.
    assert node[0]["fleet_state"]["inputs"] == "{{ hostvars | fleet_inputs_digest(inventory_hostname, groups) }}"
    (include,) = [t for t in node if "ansible.builtin.include_tasks" in t]
    assert include["ansible.builtin.include_tasks"] == "converge-steps.yml"
    assert include["when"] == "_fleet_full_path"
    assert node[-1]["ansible.builtin.import_role"]["name"] == "stages/report"
    steps_file = load(ROOT / "playbooks" / "tasks" / "converge-steps.yml")
    steps = [t.get("ansible.builtin.import_role") or t.get("ansible.builtin.include_role") for t in steps_file[:-1]]
    assert [s["name"] for s in steps] == ["stages/preflight", "stages/node_base", "{{ fleet_vendor.role }}",
                                          "blocks/tiktoken_cache", "blocks/model_fetch", "blocks/fleet_release",
                                          "blocks/vllm_service", "blocks/health_agent", "services/monitoring"]
    # The vendor's role is chosen per node, at run time.
    assert "ansible.builtin.include_role" in steps_file[2]
    # Last, the record the next run's read compares with.
    assert steps_file[-1]["fleet_state"]["state"] == "record"
    # Exactly one of the two plays has hosts, decided from extra vars before any host's variables
    # are read (as `serial` is): the in-place one unless a rollout was asked for.
    assert in_place["hosts"] == "{{ 'fleet' if fleet_rollout_serial is not defined else 'fleet:!fleet' }}"
    assert rollout["hosts"] == "{{ 'fleet' if fleet_rollout_serial is defined else 'fleet:!fleet' }}"


def test_a_rollout_drains_converges_and_readies_each_node_in_batches_and_rescues_a_failed_one():
    _, rollout = load(ROOT / "playbooks" / "converge.yml")
    # max_fail_percentage needs the linear strategy (the free one ignores it, with a warning).
    assert "strategy" not in rollout
    assert rollout["serial"] == "{{ fleet_rollout_serial | default('100%') }}"
    assert rollout["max_fail_percentage"] == "{{ fleet_rollout_max_fail_percentage | default(0) }}"
    (turn,) = [t for t in rollout["tasks"] if "ansible.builtin.include_role" in t]
    assert turn["ansible.builtin.include_role"]["name"] == "services/fleet_rollout"
    # The in-place play's steps, one file for both plays.
    assert turn["vars"]["fleet_rollout_steps"] == "{{ playbook_dir }}/tasks/converge-node.yml"
    (block,) = load(ROOT / "roles" / "services" / "fleet_rollout" / "tasks" / "turn.yml")
    assert [t["ansible.builtin.include_tasks"] for t in block["block"]] == [
        "drain.yml", "{{ fleet_rollout_steps }}", "ready.yml"]
    assert [t["ansible.builtin.include_tasks"] for t in block["rescue"]] == ["rescue.yml"]
    # The rescue goes back to the release the node came from, readies it, then fails the node.
    steps = load(ROOT / "roles" / "services" / "fleet_rollout" / "tasks" / "rescue.yml")
    kinds = [next(k for k in t if k.startswith("ansible.builtin.")) for t in steps]
    assert kinds == ["ansible.builtin.set_fact", "ansible.builtin.include_role", "ansible.builtin.include_tasks",
                     "ansible.builtin.fail"]
    assert steps[1]["ansible.builtin.include_role"]["tasks_from"] == "activate.yml"


def test_validation_runs_before_the_fleet_role_loads_any_vendor():
    play, verdict = load(ROOT / "playbooks" / "validate.yml")
    assert [r["role"] for r in play["roles"]] == ["stages/validate_inventory"]
    # The verdict stops the run at the next play's `hosts:`, before any task of it (exit 4).
    assert verdict["hosts"] == "{{ 'fleet:router:monitoring:mirror' | fleet_validation_verdict }}"
    assert verdict["tasks"] == [] and "roles" not in verdict
    assert play["any_errors_fatal"] is True
    # Router and monitoring hosts are validated too (against every fleet node), though they are no fleet nodes.
    # ... and no selection of tasks skips it: the pattern goes through the guard of the command line.
    assert play["hosts"].startswith("{{ 'fleet:router:monitoring:mirror' | fleet_validation_not_skipped(groups,")


def test_the_router_play_runs_on_the_router_group_only():
    (play,) = load(ROOT / "playbooks" / "router.yml")
    assert play["hosts"] == "router"
    assert [r["role"] for r in play["roles"]] == ["services/router"]


def test_the_vendor_list_is_the_facts_modules():
    spec = load(ROOT / "vllm_fleet" / "data" / "inventory.schema.yml")
    # The schema file names no vendor itself: validation fills the enum from vllm_fleet.vendors,
    # and takes each vendor's matrix from its role.
    assert "enum" not in spec["$defs"]["accelerator"]["properties"]["vendor"]
    assert not [key for key in spec["$defs"] if key.startswith("matrix_")]
    from vllm_fleet import validation
    assert validation.schema()["$defs"]["accelerator"]["properties"]["vendor"]["enum"] == list(vendors.VENDORS)
    # The vendors are the hardware table's, and each is one stack under roles/vendors/ (its
    # contract in vars/main.yml); the other folders there are building blocks of a stack.
    stacks = {p.name for p in (ROOT / "roles" / "vendors").iterdir()
              if (p / "vars" / "main.yml").is_file() and f"{p.name}_contract" in load(p / "vars" / "main.yml")}
    assert set(vendors.VENDORS) == stacks


@pytest.mark.parametrize("vendor", vendors.VENDORS)
def test_each_vendor_is_one_role_with_its_contract(vendor):
    role = ROOT / "roles" / "vendors" / vendor
    written = load(role / "vars" / "main.yml")[f"{vendor}_contract"]
    defaults = vendors.contract_defaults()
    where = f"roles/vendors/{vendor}/vars/main.yml"
    assert set(written) <= CONTRACT_KEYS, f"{where}: unknown {sorted(set(written) - CONTRACT_KEYS)}"
    missing = sorted(CONTRACT_KEYS - set(defaults) - set(written))
    assert not missing, f"{where} lacks {missing}, which have no default"
    # A contract writes only where its vendor differs: a key equal to its default is a second home.
    assert not [k for k in written if k in defaults and written[k] == defaults[k]], where
    contract = vendors.contract(vendor)
    assert set(contract) == CONTRACT_KEYS and contract["role"] == f"vendors/{vendor}"
    assert set(contract["runtime"]) == RUNTIME_KEYS
    assert set(contract["deploy_modes"]) <= {"host", "container"} and "host" in contract["deploy_modes"]
    assert contract["driver"]["healthy"] and "Critical" not in contract["driver"]["healthy"]
    assert {"checks", "driver"} <= set(contract["doctor"])
    assert {"tag", "pulled"} == set(contract["image"])
    from vllm_fleet import validation
    assert vendors.matrix_schema(vendor), \
        f"the vendor's matrix needs a schema: roles/vendors/{vendor}/meta/matrix.schema.yml"
    assert validation.schema()["$defs"][f"matrix_{vendor}"] == vendors.matrix_schema(vendor)
    # roles/stages/fleet includes tasks/contract.yml publicly in every play: it must change nothing.
    (task,) = load(role / "tasks" / "contract.yml")
    assert task["ansible.builtin.meta"] == "noop"


@pytest.mark.parametrize("vendor", vendors.VENDORS)
def test_each_vendor_has_example_group_vars_and_a_lab(vendor):
    example = ROOT / "inventories" / "example" / "group_vars" / vendors.group(vendor)
    assert (example / "accelerator.yml").exists() and (example / "matrix.yml").exists()
    assert load(example / "accelerator.yml")["fleet_accelerator"]["vendor"] == vendor
    assert (ROOT / "lab" / "inventory" / "group_vars" / vendors.group(vendor) / "matrix.yml.j2").exists()
    assert (ROOT / "lab" / "fixtures" / "hardware" / "profiles" / f"{vendor}.json").exists()


def test_no_role_keeps_a_per_vendor_copy_of_the_contract():
    """A shared role reads fleet_vendor; a vars/<vendor>.yml there would be a second home."""
    for vendor in vendors.VENDORS:
        copies = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "roles").glob(f"*/*/vars/{vendor}.yml"))
        assert not copies, copies


def test_the_monitoring_play_runs_on_the_monitoring_group_and_fleet_nodes_get_exporters_only_with_it():
    (play,) = load(ROOT / "playbooks" / "monitoring.yml")
    assert play["hosts"] == "monitoring"
    assert [r["role"] for r in play["roles"]] == ["services/monitoring"]
    steps = load(ROOT / "playbooks" / "tasks" / "converge-steps.yml")
    # Included, so that without monitoring hosts the whole step is one skipped task.
    (step,) = [t for t in steps if (t.get("ansible.builtin.include_role") or {}).get("name") == "services/monitoring"]
    assert step["ansible.builtin.include_role"]["tasks_from"] == "node_exporter.yml"
    assert "groups['monitoring']" in step["when"]
