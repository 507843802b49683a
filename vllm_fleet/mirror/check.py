"""An inventory against its mirror: what the hosts would fetch that the mirror's manifest does not
hold, each a refusal naming host and variable (playbooks/mirror.yml runs it before any fleet node is
touched)."""

from __future__ import annotations

from vllm_fleet.mirror import bom
from vllm_fleet.mirror.layout import SOURCE_PATHS, source_default

KEYS = bom.KEYS


def missing(hosts: dict[str, dict], manifest: dict, url: str, inventory: str = "") -> list[str]:
    """Refusals for `hosts` (name -> rendered variables, KEYS) against the mirror at `url`."""
    problems = []
    held = (manifest or {}).get("items") or {}
    sync = f"vllm-fleet mirror sync -i {inventory or 'INVENTORY'} -o DIR"
    # The sources a host does not set are the mirror's (roles/stages/fleet): what the nodes need does not
    # depend on where it comes from, but the bill reads a file's place from them.
    with_defaults = {h: {**{n: source_default(url, n) for n in SOURCE_PATHS}, **own} for h, own in hosts.items()}
    try:
        bill = bom.bill_of_materials(with_defaults)
    except bom.BillError as exc:
        return [str(exc)]
    for key, item in sorted(bill.items.items()):
        if key in held and not (item.kind == "image" and item.sha256
                                and held[key].get("digest") != f"sha256:{item.sha256}"):
            continue  # (an image the matrix pins by digest: held at that digest)
        if item.kind == "pip":
            what = f"pip's resolution of {', '.join(item.specs)}"
        elif item.kind == "deb":
            names = [*item.specs, *item.index.get("without_recommends", [])]
            what = f"the apt packages {', '.join(names)} with their dependencies ({item.key})"
        elif item.kind == "image":
            what = f"the container image {item.key}" + (f"@sha256:{item.sha256}" if item.sha256 else "")
        else:
            what = f"{item.kind} {item.key}"
        problems.append(f"{'; '.join(item.wanted_by)}: needs {what}, which the fleet's mirror at {url} does not "
                        f"hold; accepted: what the mirror's mirror.json lists: fetch it on a connected machine "
                        f"({sync}), carry it across (mirror pack, mirror unpack) and run again")
    return problems
