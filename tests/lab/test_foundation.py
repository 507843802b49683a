"""The foundation against real lab nodes: validation touches nothing, preflight names
the mismatch, nodes survive a reboot. That site.yml converges every node and a second run
changes nothing is test_drift's first step (it runs last, on all four nodes)."""

from __future__ import annotations

import json
import time

from tests.conftest import fleet_groups

from .conftest import INVENTORY, LAB, PROVISIONED, fresh_nodes, recap, run_doc_command, run_playbook


def test_invalid_inventory_stops_before_any_node_is_contacted(lab):
    # A stopped node would show up as UNREACHABLE if anything tried to reach it.
    lab.stop(LAB, "nvidia-01")
    try:
        # docs/lab.md's status line, as written, on this lab (its name in VLLM_FLEET_LAB_NAME): the stopped
        # node is said to be, every other one runs, each with its SSH port.
        listed = run_doc_command("docs/lab.md", "vllm-fleet lab status", lab=LAB)
        proc = run_playbook("-l", "ascend-01,nvidia-01", "-e", '{"fleet_matrix": {"python": 3.11}}')
    finally:
        lab.start(LAB, "nvidia-01")
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()[1:]}
    assert rows == {row["node"]: [row["vendor"], row["ssh"], "stopped" if row["node"] == "nvidia-01" else "running"]
                    for row in lab.status(LAB)} and len(rows) == 4, listed.stdout
    ports = {host: str(host_vars["ansible_port"]) for hosts in fleet_groups(INVENTORY).values()
             for host, host_vars in hosts.items()}
    assert {node: row[1].rsplit(":", 1)[1] for node, row in rows.items()} == ports, (listed.stdout, ports)
    # The refusal is ansible-playbook's error at the verdict play's `hosts:` (stderr), exit 4.
    said = proc.stdout + proc.stderr
    assert proc.returncode == 4, said[-3000:]
    assert "The inventory is invalid; nothing was changed on any host:" in said
    assert "host ascend-01: fleet_matrix.python = 3.11 (a number)" in said
    assert "host nvidia-01: fleet_matrix.python = 3.11 (a number)" in said
    assert "UNREACHABLE" not in proc.stdout
    assert all(c["unreachable"] == 0 for c in recap(proc.stdout).values())


def test_preflight_names_a_count_mismatch(lab):
    # Without models, so that validation (devices 0-7 of a 4-device node) has nothing to object to.
    proc = run_playbook("-l", "ascend-01", "-e",
                        '{"fleet_accelerator": {"vendor": "ascend", "model": "910B3", "count": 4}, "fleet_models": []}')
    assert proc.returncode != 0
    assert "ascend-01: fleet_accelerator.count is 4 but the PCI bus shows 8 ascend device(s)" in proc.stdout


def test_preflight_names_missing_disk_space(lab):
    proc = run_playbook("-l", "nvidia-01", "-e", '{"fleet_min_free_disk_gb": 100000}')
    assert proc.returncode != 0
    assert "nvidia-01: /home/models (filesystem /) has" in proc.stdout
    assert "needs 100000.0 GB" in proc.stdout


def test_missing_device_node_is_reported(lab):
    lab.run(LAB, "ascend-01", "rm -f /dev/davinci_manager")
    try:
        facts = run_playbook("-l", "ascend-01", playbook="playbooks/report.yml", check=True)
        assert "8 x ascend 910B3" in facts.stdout
        out = lab.run(LAB, "ascend-01",
                      "python3 - <<'EOF'\nimport os\nprint(os.path.exists('/dev/davinci_manager'))\nEOF")
        assert out.strip() == "False"
    finally:
        lab.run(LAB, "ascend-01", "systemctl restart vllm-fleet-lab-devices.service")


def test_node_reboots_like_a_machine(lab):
    before = lab.run(LAB, "ascend-01", "cat /proc/sys/kernel/random/boot_id").strip()
    lab.run(LAB, "ascend-01", "systemctl reboot", timeout=10)
    deadline = time.monotonic() + 90
    after = before
    while time.monotonic() < deadline:
        try:
            after = lab.run(LAB, "ascend-01", "systemctl is-system-running --wait >/dev/null; "
                                              "cat /proc/sys/kernel/random/boot_id").strip()
            if after and after != before:
                break
        except Exception:  # noqa: BLE001 - the node is down while it reboots
            pass
        time.sleep(1)
    assert after != before, "the node did not come back from its reboot"
    devices = lab.run(LAB, "ascend-01", "ls /dev | grep -c '^davinci[0-9]'").strip()
    assert devices == "8"


def test_status_lists_the_nodes(lab):
    rows = lab.status(LAB)
    assert [(r["node"], r["vendor"], r["state"]) for r in rows] == [
        ("ascend-01", "ascend", "running"), ("ascend-02", "ascend", "running"),
        ("nvidia-01", "nvidia", "running"), ("nvidia-02", "nvidia", "running")]
    assert json.dumps(rows)


def test_a_reset_node_is_never_provisioned_and_reachable_with_its_new_keys(lab):
    """fresh_nodes, which lets tests that need never-provisioned nodes run in any order: a node
    with leftovers gets a fresh root and new host keys, and Ansible reaches it through the
    rewritten known_hosts. nvidia-02, which no test before this one provisioned, costs no converge."""
    lab.run(LAB, "nvidia-02", "mkdir -p /opt/vllm-fleet && touch /opt/vllm-fleet/left-by-a-test")
    keys = lab.run(LAB, "nvidia-02", "cat /etc/ssh/ssh_host_ed25519_key.pub")
    assert fresh_nodes(lab, ["ascend-01", "nvidia-02"], leftovers=("/opt/vllm-fleet/left-by-a-test",)) == ["nvidia-02"]
    assert lab.run(LAB, "nvidia-02", "ls -d " + " ".join(PROVISIONED) + " 2>/dev/null || true").strip() == ""
    assert lab.run(LAB, "nvidia-02", "cat /etc/ssh/ssh_host_ed25519_key.pub") != keys
    assert fresh_nodes(lab, ["nvidia-02"]) == []
    facts = run_playbook("-l", "nvidia-02", playbook="playbooks/report.yml", check=True)
    assert "UNREACHABLE" not in facts.stdout and " x nvidia " in facts.stdout
