"""A fuzzer over the whole inventory (issue 19, part 3): hostile values for every leaf of the
example's variables, every role variable and every unset `fleet_*` property must be refused by
validation with a problem that names the variable, and no problem may show a secret. Every
mutation is judged twice (issue 33, item 7): as a value of the host's variables, and delivered
by a second route through Ansible's own loading and rendering (fz.ROUTES, in turn: a host_vars
file, the inventory file, extra vars, a secrets file, a template, a `!vault` value).

The machinery (base inventory, generator, judging, plan checks) is tests/fuzz_inventory.py.
Environment knobs, for a local hunt: FUZZ_BUDGET (mutations judged, default 2100, sampled
with a fixed seed from all of them; 0 = all), FUZZ_PLAN_RUNS (plan.yml runs for got-through
mutations, default 2: one takes 10-15 s while CI runs; up to 10 in a quiet run), FUZZ_EXAMPLES
(got-through examples printed, default 40).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests import fuzz_inventory as fz

BUDGET = int(os.environ.get("FUZZ_BUDGET", "2100"))
PLAN_RUNS = int(os.environ.get("FUZZ_PLAN_RUNS", "2"))
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def base_inventory(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The example inventory (plus a router and a monitoring host), written once and loaded
    once as validation sees it."""
    path = fz.write_base_inventory(tmp_path_factory.mktemp("fuzz") / "base")
    return path, fz.load_inventory(path)


@pytest.fixture(scope="module")
def mutations(base_inventory) -> list[fz.Mutation]:
    _, base = base_inventory
    return fz.sample(fz.generate(base), BUDGET or 10**9)


@pytest.fixture(scope="module")
def verdicts(base_inventory, mutations) -> list[fz.Verdict]:
    _, base = base_inventory
    with fz.memory_cap():
        return [fz.judge(base, m) for m in mutations]


@pytest.fixture(scope="module")
def route_verdicts(base_inventory, mutations, tmp_path_factory) -> list[fz.Verdict]:
    """Each mutation delivered by its second route (fz.Routes: ~30 ms each)."""
    base_dir, base = base_inventory
    routes = fz.Routes(base_dir, base, tmp_path_factory.mktemp("routes"))
    with fz.memory_cap():
        return [routes.judge(m, routes.route_of(i, m)) for i, m in enumerate(mutations)]


def test_base_inventory_is_valid(base_inventory):
    from vllm_fleet import validation

    _, base = base_inventory
    assert validation.validate_inventory(base, sorted(base)) == []
    assert {fz.ROUTER, fz.MONITOR, fz.MIRROR} < set(base) and len(base) == 8


def _plan_candidates(verdicts: list[fz.Verdict], limit: int) -> list[fz.Verdict]:
    """Got-through mutations of fleet nodes, of a class a plan can show harmless
    (fz.PLAN_CLASSES), that validation did not crash on, one per class in turn (a fixed
    order), at most `limit`."""
    by_class: dict[str, list[fz.Verdict]] = {}
    for v in verdicts:
        if v.verdict == "got_through" and v.mutation.cls in fz.PLAN_CLASSES and not v.why.startswith(
                "validation crashed") and all(
                h not in (fz.ROUTER, fz.MONITOR, fz.MIRROR) for h in v.mutation.hosts()):
            by_class.setdefault(v.mutation.cls, []).append(v)
    for group in by_class.values():
        # first those the plan renders (the node's fleet_* settings and vllm_service's), so that a
        # plan run can show one harmless; a connection or task option it never shows
        group.sort(key=lambda v: not (v.mutation.path[0].startswith(("fleet_", "vllm_service_"))
                                      and isinstance(v.mutation.value, (str, int))))
    chosen: list[fz.Verdict] = []
    while len(chosen) < limit and any(by_class.values()):
        for cls in fz.CLASSES:
            if by_class.get(cls) and len(chosen) < limit:
                chosen.append(by_class[cls].pop(0))
    return chosen


@pytest.mark.ansible  # plan.yml for the mutations that got through
def test_fuzz_every_variable(base_inventory, verdicts, tmp_path, capsys):
    base_dir, base = base_inventory
    started = time.monotonic()
    # Got through validation: harmless only if its plan passes every checker.
    candidates = _plan_candidates(verdicts, PLAN_RUNS)
    if candidates:
        baseline_plan = tmp_path / "baseline-plan"
        hosts = sorted({h for v in candidates for h in v.mutation.hosts()})
        proc = fz.run_plan(base_dir, baseline_plan, ",".join(hosts))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        for i, v in enumerate(candidates):
            findings = fz.plan_verdict(base_dir, base, v.mutation, baseline_plan, tmp_path / f"m{i}")
            if findings:
                v.why = "plan: " + findings[0]
            else:
                v.verdict = "harmless"
    tried = len(verdicts)
    through = sum(v.verdict == "got_through" for v in verdicts)
    leaked = sum(bool(v.leaked) for v in verdicts)
    with capsys.disabled():
        print()
        print(fz.summary(verdicts, EXAMPLES))
        print(f"(plan runs: {len(candidates)} of at most {PLAN_RUNS}, {time.monotonic() - started:.0f} s)")
    assert tried >= 2000
    assert through == 0, f"{through} of {tried} hostile values got through validation (summary above)"
    assert leaked == 0, f"{leaked} mutations had a secret shown in a problem (summary above)"


def test_every_mutation_is_refused_by_a_second_route(route_verdicts, capsys):
    tried = len(route_verdicts)
    through = [v for v in route_verdicts if v.verdict == "got_through"]
    leaked = [v for v in route_verdicts if v.leaked]
    with capsys.disabled():
        print()
        print("second routes: " + ", ".join(f"{route} {sum(v.route == route for v in route_verdicts)}"
                                            for route in fz.ROUTES))
        print(fz.summary(route_verdicts, EXAMPLES))
    assert {v.route for v in route_verdicts} == set(fz.ROUTES)
    assert tried >= 2000
    assert not through, [f"{v.route}: {v.mutation.label}: {v.why}" for v in through[:EXAMPLES]]
    assert not leaked, [f"{v.route}: {v.mutation.label}" for v in leaked[:EXAMPLES]]


#: One stopped mutation per class, end to end through the CLI (about 15 s each while CI runs).
CLI_CLASSES = ("paths", "ports", "secrets", "accounts", "control_chars")


@pytest.mark.ansible  # vllm-fleet provision, and plain ansible-playbook site.yml
def test_stopped_mutations_stop_provision(base_inventory, verdicts, tmp_path):
    """A few stopped mutations, written as real inventories: `vllm-fleet provision --json`
    exits 4 (invalid inventory, nothing changed) and its problems name the variable; plain
    `ansible-playbook site.yml` refuses the same inventory with the same sentences."""
    base_dir, base = base_inventory
    picked = []
    for cls in CLI_CLASSES:
        stopped = [v for v in verdicts if v.mutation.cls == cls and v.verdict == "stopped" and not v.leaked
                   and all(h not in (fz.ROUTER, fz.MONITOR, fz.MIRROR) for h in v.mutation.hosts())]
        if stopped:
            picked.append(stopped[len(stopped) // 2])  # a fixed pick from the middle of the list
    assert len(picked) >= 4, "too few stopped mutations to run through the CLI"
    for i, v in enumerate(picked):
        inventory = fz.write_mutated_inventory(base_dir, base, v.mutation, tmp_path / f"inv{i}")
        code, result = fz.provision_json(inventory)
        assert code == 4, (v.mutation.label, code, result)
        problems = result.get("problems") or []
        assert any(fz.names_variable(p, v.mutation.accepted_names()) for p in problems), (v.mutation.label, problems)
        # Plain ansible-playbook site.yml refuses it after its validation play, with the same sentences
        # and the same exit, 4 (docs/usage.md); should validation let it through, its first
        # connection goes to a closed port on loopback.
        proc = fz.site_playbook(inventory)
        played = fz.refusal_lines(proc.stdout + proc.stderr)
        assert proc.returncode == 4 and proc.stdout.count("PLAY [") == 1, (v.mutation.label, proc.stdout[-2000:])
        assert set(problems) <= set(played), (v.mutation.label, set(problems) - set(played))
