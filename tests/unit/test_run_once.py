"""No host sees another host's facts after a run_once task (ansible/ansible#87415).

ansible-core 2.21.5 stores the one same dict for every host whose fact cache is still empty
when a run_once task's result reaches them (VariableManager.set_host_facts keeps the caller's
dict): once the validation play's run_once tasks had read every host's variables, a later fact
of one host was merged into that dict in place and showed on every host. On a two-node lab
under 2.21 a MetaX node's preflight read the NVIDIA node's accelerators. The validation play
gives each host a fact cache of its own first (roles/stages/validate_inventory/tasks/facts.yml),
and our run_once tasks register nothing and set facts on the controller only (delegate_facts).
The first test holds every playbook and role to the second rule; the second runs the validation
play, then a play in which each host sets a fact, on whichever ansible-core runs the tests (CI:
both), and fails on 2.21.5 without the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

ROOT = Path(__file__).resolve().parents[2]
#: Actions that set no variable (or whose included tasks are checked in their own files).
NO_VARIABLES = {f"ansible.builtin.{a}" for a in ("debug", "assert", "fail", "meta", "include_role", "import_role",
                                                 "include_tasks", "import_tasks", "import_playbook")}
KEYWORDS = {"name", "when", "tags", "vars", "run_once", "delegate_to", "delegate_facts", "loop", "loop_control",
            "check_mode", "changed_when", "failed_when", "no_log", "become", "become_user", "environment",
            "register", "notify", "any_errors_fatal", "ignore_errors", "throttle", "until", "retries", "delay",
            "args", "listen", "module_defaults", "timeout", "diff", "ignore_unreachable", "rescue", "always", "block"}


def tasks_of(doc) -> list[dict]:
    """The task lists of a playbook (each play's pre_tasks, tasks, post_tasks, handlers) or a tasks file."""
    if not isinstance(doc, list):
        return []
    if any(isinstance(d, dict) and "hosts" in d for d in doc):
        return [t for play in doc if isinstance(play, dict)
                for key in ("pre_tasks", "tasks", "post_tasks", "handlers") for t in play.get(key) or []]
    return [t for t in doc if isinstance(t, dict)]


def offenders(tasks: list[dict], where: str, inherited: dict | None = None) -> list[str]:
    found = []
    for task in tasks:
        scope = {**(inherited or {}), **{k: task[k] for k in ("run_once", "delegate_facts") if k in task}}
        if "block" in task:
            for key in ("block", "rescue", "always"):
                found += offenders(task.get(key) or [], where, scope)
            continue
        if scope.get("run_once") is not True:
            continue
        action = next((k for k in task if k not in KEYWORDS), "")
        name = f"{where}: {task.get('name', action)!r}"
        if "register" in task:
            found.append(f"{name} registers under run_once (every host gets one shared dict)")
        elif action not in NO_VARIABLES and scope.get("delegate_facts") is not True:
            found.append(f"{name} sets facts under run_once without delegate_facts: true")
    return found


def test_no_run_once_task_hands_every_host_one_dict():
    files = [*ROOT.glob("*.yml"), *(ROOT / "playbooks").rglob("*.yml"), *(ROOT / "roles").glob("*/*/tasks/*.yml")]
    found = [o for path in sorted(files)
             for o in offenders(tasks_of(yaml.safe_load(path.read_text())), str(path.relative_to(ROOT)))]
    assert found == []


@pytest.mark.ansible
def test_after_the_validation_play_each_host_keeps_its_own_variables(tmp_path):
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": str(ROOT / "playbooks" / "validate.yml")},
        {"name": "Each host its own fact", "hosts": "nvidia-01,metax-01,musa-01", "gather_facts": False,
         "connection": "local",
         "tasks": [{"name": "Mine",
                    "ansible.builtin.set_fact": {"mine": "{{ inventory_hostname }}", "cacheable": True}},
                   {"name": "Still mine", "ansible.builtin.assert": {
                       "that": ["hostvars[item].ansible_facts.mine == item"], "quiet": True},
                    "loop": "{{ ansible_play_hosts_all }}"}]}]))
    proc = ansible_playbook("-i", str(ROOT / "inventories" / "example"), "-l", "nvidia-01,metax-01,musa-01",
                            str(book))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "failed=0" in proc.stdout
