"""The key of the fleet's mirror's apt repository, trusted on first use: a warning (`--strict` refuses it).

With a host in the group `mirror` and fleet_mirror_apt (the default), each host's apt reads the mirror's
apt repository only, signed by the key roles/blocks/apt_mirror reads from the mirror. With
fleet_mirror_apt_key_fingerprint the role refuses any other key before it writes one; without it, the
key the mirror serves when the role first runs is the key apt trusts, whoever served it.
"""

from __future__ import annotations

#: The groups whose hosts' apt reads the mirror's apt repository (playbooks/mirror.yml, roles/services/mirror).
APT_GROUPS = {"fleet", "router", "monitoring", "mirror"}


def _groups(host_vars: dict) -> set[str]:
    groups = host_vars.get("group_names")
    return set(groups) if isinstance(groups, list) else set()


def mirror_key_warnings(all_hosts: dict[str, dict], run_hosts: list[str]) -> list[str]:
    """One warning naming the hosts of the run whose apt would trust the mirror's key on first use: a
    mirror in the inventory, fleet_mirror_apt not false, and no fleet_mirror_apt_key_fingerprint; []
    when there is none."""
    if not any("mirror" in _groups(v) for v in all_hosts.values()):
        return []
    trusting = sorted(h for h in run_hosts if h in all_hosts and _groups(all_hosts[h]) & APT_GROUPS
                      and all_hosts[h].get("fleet_mirror_apt", True) is not False
                      and not all_hosts[h].get("fleet_mirror_apt_key_fingerprint"))
    if not trusting:
        return []
    return [f"the key that signs the fleet's mirror's apt repository is trusted on first use (on {', '.join(trusting)}): "
            "fleet_mirror_apt_key_fingerprint is not set, so these hosts' apt trusts whatever key the mirror serves "
            "when they first read it. Pin it: set fleet_mirror_apt_key_fingerprint to the fingerprint `vllm-fleet "
            "mirror sync` printed (its line \"pin it: fleet_mirror_apt_key_fingerprint: ...\", also "
            "items[\"apt:repository\"].fingerprint in the mirror's mirror.json); each host then refuses any other key "
            "before it writes one"]
