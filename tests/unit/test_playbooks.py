"""Shape of the playbooks that site.yml imports."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENDORS = {"ascend": "ascend-nodes", "metax": "metax-nodes", "musa": "musa-nodes", "nvidia": "nvidia-nodes"}


def test_site_imports_validation_first_and_every_vendor():
    site = yaml.safe_load((ROOT / "site.yml").read_text())
    imported = [play["ansible.builtin.import_playbook"] for play in site]
    assert imported[0] == "playbooks/validate.yml"
    assert {f"playbooks/{v}.yml" for v in VENDORS} <= set(imported)


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_vendor_plays_target_the_fleet_and_keep_to_their_group(vendor):
    """A play whose hosts were one vendor's nodes alone would end the whole run (every
    other vendor included) once all of them had failed; so each play targets `fleet`,
    and its first role, `fleet`, sends the other nodes away."""
    plays = yaml.safe_load((ROOT / "playbooks" / f"{vendor}.yml").read_text())
    assert plays
    for play in plays:
        assert play["hosts"] == "fleet", play["name"]
        first = play["roles"][0]
        assert first["role"] == "fleet", play["name"]
        assert first["vars"]["fleet_play_group"] == VENDORS[vendor], play["name"]
        assert not play.get("pre_tasks"), f"{play['name']}: pre_tasks would run before the fleet role sends other nodes away"
