#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: a node's releases in one round trip: read them, and mark, switch and prune.

Why it exists: roles/blocks/fleet_release needs, on every run and in check mode, the release
directories, which of them hold their completion marker, where the current link points
and the release history; a converge then writes the new release's marker, switches the
link, records the history and prunes old releases. With ansible.builtin modules that is
at least seven module runs per node (find twice, stat, slurp, copy, file, copy, and one
file per pruned release), each a Python start on the node; this module does it in one.
The decisions are module_utils/vllm_fleet_release.py's pure functions.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_releases
short_description: Read a node's releases; mark the wanted one complete, make one current, prune old ones
description:
  - Lists the release directories of O(releases_dir) (hidden ones left out), which of them
    hold the completion marker C(.vllm-fleet-release.json), where the link O(current) points
    and the history file C(history) in O(releases_dir) (one id a line, the current one last).
  - With O(record), first writes the marker of the O(wanted) release (its directory must exist,
    made by its install), so that release is complete.
  - With O(target), makes O(current) a relative link to that release (a new link under a
    temporary name renamed over the old one, so it always names a whole release) and moves
    the release to the end of the history; fails when the release is not complete.
  - With O(prune=true), then removes the release directories the state's RV(state.prune) names
    (complete releases beyond O(keep) and incomplete ones; never the current, wanted or previous one,
    never a directory neither marked nor named as a release).
  - Without O(record), O(target) and O(prune) it only reads.
version_added: "0.6.0"
author:
  - vllm-fleet contributors
options:
  releases_dir:
    description: Absolute path of the directory that holds one directory per release and the history.
    type: path
    required: true
  current:
    description: Absolute path of the link that names the current release.
    type: path
    required: true
  wanted:
    description: Id of the release the matrix names ("" = none); never pruned.
    type: str
    default: ""
  keep:
    description: Complete releases kept, the current one included (at least 1).
    type: int
    default: 2
  record:
    description: Text of the O(wanted) release's completion marker (what it was built from); written when given.
    type: str
  target:
    description: Id of the release to make current ("" = leave current as it is).
    type: str
    default: ""
  prune:
    description: Remove the release directories beyond O(keep) and incomplete ones after the switch.
    type: bool
    default: false
notes:
  - Supports check mode; then it reports what it would change and changes nothing (a O(record) counts
    as written).
"""

EXAMPLES = r"""
- name: Read the node's releases
  fleet_releases:
    releases_dir: /opt/vllm-fleet/releases
    current: /opt/vllm-fleet/current
    wanted: 1a2b3c4d5e6f
  register: releases

- name: Mark the matrix's release complete, make it current, prune old ones
  fleet_releases:
    releases_dir: /opt/vllm-fleet/releases
    current: /opt/vllm-fleet/current
    wanted: 1a2b3c4d5e6f
    record: '{"vendor": "cpu", "matrix": {"python": "3.11"}}'
    target: 1a2b3c4d5e6f
    keep: 2
    prune: true
"""

RETURN = r"""
state:
  description:
    - The node's releases after the module's actions.
    - current (the id current points at, "" for none), wanted, installed (complete releases, the most
      recently current last), incomplete, wanted_complete, previous (what a rollback goes back to, "" for
      none), prune (what O(prune=true) removes), history, switched_from (the id current named before,
      the same as current when it did not move), pruned (what this call removed).
  returned: success
  type: dict
  sample:
    current: 1a2b3c4d5e6f
    wanted: 1a2b3c4d5e6f
    installed: [0f0e0d0c0b0a, 1a2b3c4d5e6f]
    incomplete: []
    wanted_complete: true
    previous: 0f0e0d0c0b0a
    prune: []
    history: [0f0e0d0c0b0a, 1a2b3c4d5e6f]
    switched_from: 0f0e0d0c0b0a
    pruned: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_release import ReleaseError, apply


def main():
    module = AnsibleModule(
        argument_spec=dict(
            releases_dir=dict(type='path', required=True),
            current=dict(type='path', required=True),
            wanted=dict(type='str', default=''),
            keep=dict(type='int', default=2),
            record=dict(type='str'),
            target=dict(type='str', default=''),
            prune=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        changed, state = apply(p['releases_dir'], p['current'], wanted=p['wanted'], keep=p['keep'],
                               record=p['record'], target=p['target'], prune=p['prune'], check=module.check_mode)
    except (ReleaseError, ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, state=state)


if __name__ == '__main__':
    main()
