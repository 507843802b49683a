#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: read a node's releases in one round trip.

Why it exists: roles/fleet_release needs, on every run and in check mode, the release
directories, which of them hold their completion marker, where the current link points
and the release history. With ansible.builtin.find (twice), stat and slurp that is four
module runs per node and run; this module reads the same in one. It changes nothing.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_releases
short_description: Read the release directories, their completion markers, the current link and the history
description:
  - Lists the directories of O(releases_dir) (hidden ones left out), names those that hold
    the completion marker O(marker), reads where the link O(current) points and reads the
    history file O(history).
  - Read only; a missing directory, link or history file reads as empty.
version_added: "0.6.0"
author:
  - vllm-fleet contributors
options:
  releases_dir:
    description: Absolute path of the directory that holds one directory per release.
    type: path
    required: true
  marker:
    description: File name of the completion marker inside a release directory.
    type: str
    required: true
  current:
    description: Absolute path of the link that names the current release.
    type: path
    required: true
  history:
    description: Absolute path of the history file (one release per line, oldest first).
    type: path
    required: true
notes:
  - Supports check mode (it never changes anything).
"""

EXAMPLES = r"""
- name: Read the node's releases
  fleet_releases:
    releases_dir: /opt/vllm-fleet/releases
    marker: .complete
    current: /opt/vllm-fleet/current
    history: /opt/vllm-fleet/releases/history
  register: releases
"""

RETURN = r"""
releases:
  description: Absolute paths of the release directories, sorted.
  returned: always
  type: list
  elements: str
  sample: [/opt/vllm-fleet/releases/nvidia-0.11.2-1a2b3c4d]
complete:
  description: The release directories (absolute paths, sorted) that hold the completion marker.
  returned: always
  type: list
  elements: str
current:
  description: The base name of what O(current) points to; empty when it is not a link.
  returned: always
  type: str
  sample: nvidia-0.11.2-1a2b3c4d
history:
  description: The history file's text; empty when there is none.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule


def read(releases_dir, marker, current, history):
    try:
        names = sorted(entry.name for entry in os.scandir(releases_dir)
                       if entry.is_dir(follow_symlinks=False) and not entry.name.startswith('.'))
    except FileNotFoundError:
        names = []
    releases = [os.path.join(releases_dir, name) for name in names]
    complete = [path for path in releases if os.path.isfile(os.path.join(path, marker))]
    target = os.readlink(current) if os.path.islink(current) else ''
    try:
        with open(history, encoding='utf-8') as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ''
    return {'releases': releases, 'complete': complete, 'current': os.path.basename(target.rstrip('/')),
            'history': text}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            releases_dir=dict(type='path', required=True),
            marker=dict(type='str', required=True),
            current=dict(type='path', required=True),
            history=dict(type='path', required=True),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **read(module.params['releases_dir'], module.params['marker'],
                                           module.params['current'], module.params['history']))


if __name__ == '__main__':
    main()
