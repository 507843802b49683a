"""roles/blocks/driver_gate's settle window, on this machine (no lab): just after a reboot the SMI tool
is read again until it answers with every device (SSH answers before a rebooted node's device nodes
and management daemons do), at most _driver_gate_settle_retries more times; without a reboot it is
read once. The tool is a stand-in on PATH that says "No devices were found" for its first calls,
then lists two GPUs as nvidia-smi's query does; the gate's own check then judges what was read
last (this machine has no /dev/nvidia*, so it stops on the device nodes, after the devices)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import ansible_playbook

pytestmark = pytest.mark.ansible

SMI = """#!/bin/sh
n=$(cat "$COUNTER" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$COUNTER"
if [ "$n" -le "$SETTLE_AFTER" ]; then echo "No devices were found"; exit 6; fi
echo "0, NVIDIA A100-SXM4-80GB, GPU-0, 00000000:07:00.0, 535.161.08, 81920, 4, 31, 0"
echo "1, NVIDIA A100-SXM4-80GB, GPU-1, 00000000:0F:00.0, 535.161.08, 81920, 4, 31, 0"
"""
PLAY = """- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    fleet_accelerator: {vendor: nvidia, count: 2}
    fleet_vendor: {driver: {expected: {}, healthy: [OK]}}
    driver_gate_changed: true
  tasks:
    - ansible.builtin.include_role:
        name: blocks/driver_gate
        tasks_from: health.yml
"""


@pytest.fixture
def gate(tmp_path):
    if any(os.path.exists(p) for p in ("/usr/bin/nvidia-smi", "/dev/nvidia0")):
        pytest.skip("a real NVIDIA driver is on this machine")
    (tmp_path / "nvidia-smi").write_text(SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAY)
    counter = tmp_path / "calls"

    def run(settle_after: int, rebooted: bool):
        counter.write_text("0")
        extra = {"ansible_python_interpreter": sys.executable, "_driver_gate_settle_delay": 0}
        if rebooted:
            extra["driver_gate_rebooted"] = {"changed": True}
        proc = ansible_playbook("-i", "localhost,", "-e", json.dumps(extra), str(tmp_path / "play.yml"),
                                env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "COUNTER": str(counter),
                                     "SETTLE_AFTER": str(settle_after)})
        return int(counter.read_text()), proc.stdout + proc.stderr

    return run


def test_after_a_reboot_the_tool_is_read_until_every_device_answers(gate):
    calls, out = gate(3, rebooted=True)
    assert calls == 4, out
    assert "nvidia-smi reports the expected versions; 2 of 2 devices, health OK" in out, out


def test_without_a_reboot_the_tool_is_read_once(gate):
    calls, out = gate(3, rebooted=False)
    assert calls == 1, out
    assert "nvidia-smi fails: No devices were found" in out, out


def test_a_tool_that_never_answers_is_judged_after_the_window(gate):
    calls, out = gate(1000, rebooted=True)
    assert calls == 21, out  # the first read and _driver_gate_settle_retries (20) more
    assert "nvidia-smi fails: No devices were found" in out, out
