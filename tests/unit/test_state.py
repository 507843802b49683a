"""vllm_fleet/state.py: what roles conclude from what a node reports."""

from __future__ import annotations

import pytest

from vllm_fleet import state

SHOW = """Id=vllm-a.service
UnitFileState=enabled
ActiveState=active

Id=vllm-b.service
UnitFileState=enabled
ActiveState=inactive

Id=vllm-c.service
UnitFileState=disabled
ActiveState=active

Id=vllm-d.service
UnitFileState=
ActiveState=inactive
"""


def test_units_to_start_are_those_not_enabled_or_not_running():
    assert state.units_to_start(SHOW) == ["vllm-b.service", "vllm-c.service", "vllm-d.service"]
    assert state.units_to_start("Id=vllm-a.service\nUnitFileState=enabled\nActiveState=active\n") == []
    assert state.units_to_start("") == []


@pytest.mark.parametrize("row, expected", [
    ({"ok": True, "installed": "25.2.0"}, "none"),
    ({"ok": False, "installed": "24.1.0"}, "upgrade"),
    ({"ok": False, "installed": None}, "full"),
    ({"ok": False, "installed": ""}, "full"),
])
def test_install_action_follows_the_doctor_row(row, expected):
    assert state.install_action(row, "upgrade", "full") == expected


def test_doctor_lines_and_driver_sentences():
    ok = {"component": "vllm", "kind": "package", "expected": None, "installed": "0.11.3.dev0", "ok": True,
          "detail": "editable install from /opt/vllm-fleet/src/vllm"}
    assert state.doctor_line(ok) == ("vllm (package): expected any, installed 0.11.3.dev0: ok - editable install "
                                     "from /opt/vllm-fleet/src/vllm")
    loaded = {"component": "driver", "kind": "smi", "expected": "570.195.03", "installed": "570.172.08", "ok": False}
    assert state.driver_mismatch(loaded) == "driver: expected 570.195.03, loaded 570.172.08"
    broken = {**loaded, "installed": None, "detail": "nvidia-smi fails: Driver/library version mismatch"}
    assert state.driver_mismatch(broken) == ("driver: expected 570.195.03, nvidia-smi fails: Driver/library "
                                             "version mismatch")
