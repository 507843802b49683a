#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: lay a vendor overlay over an installed package, or take it off again."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_overlay
short_description: Apply or undo a vendor overlay over files of an installed Python package
description:
  - Copies a vendor's patched files over an installed package, as vendor recipes do by
    hand (MetaX copies a patched C(vllm/) directory over C(site-packages/vllm) and a patched
    C(code_generator.py) over C(site-packages/triton/compiler/code_generator.py)), but keeps
    every file it replaces so that the overlay can be undone.
  - Each overlay has its own directory O(state_dir)/O(name) holding C(original/) (the
    replaced files with their mode and times) and C(manifest.json) (the artifact's sha256
    and version, the target, and for every file written its path, whether it was
    C(replaced) or C(added), the sha256 written and the original's sha256).
  - O(state=present) does nothing when the manifest records this very artifact at this
    target and every file still holds what was written. Otherwise an earlier state of the
    overlay is undone first, then the artifact is laid down. A file changed by someone
    else since (a package reinstall, an upgrade) is not restored over; its new content
    becomes the original the next application saves.
  - O(state=absent) restores every replaced file byte for byte (content, mode, times and,
    as root, owner), removes the files and directories the overlay added, and removes
    O(state_dir)/O(name). Files changed by someone else since are left alone and reported
    as warnings.
  - A C(directory) overlay is a tar archive (gzip, bzip2, xz or none) whose members all
    lie under one top-level directory named like the last component of O(target); only
    regular files and directories are accepted, and the whole archive is checked before
    anything is written.
version_added: "0.1.0"
author:
  - vllm-fleet contributors
options:
  name:
    description:
      - Name of the overlay; names its state directory, so it must be unique per O(state_dir).
    type: str
    required: true
  state:
    description:
      - V(present) applies the overlay, V(absent) undoes it.
    type: str
    choices: [present, absent]
    default: present
  root:
    description:
      - Directory the target is relative to, usually the environment's C(site-packages).
      - Required with O(state=present); with O(state=absent) the root recorded in the
        manifest is used.
    type: path
  target:
    description:
      - Path inside O(root) that the overlay covers, such as C(vllm) or
        C(triton/compiler/code_generator.py).
      - Required with O(state=present).
    type: str
  type:
    description:
      - V(directory) for a tar archive of a directory, V(file) for a single file.
    type: str
    choices: [directory, file]
    default: directory
  src:
    description:
      - The artifact on the node (already fetched and verified, for example by the
        C(download) role). Required with O(state=present).
    type: path
  sha256:
    description:
      - Expected sha256 of O(src), checked again before anything is written and recorded
        in the manifest. Required with O(state=present).
    type: str
  version:
    description:
      - Version of the overlay, recorded in the manifest for people and checks.
    type: str
  state_dir:
    description:
      - Directory holding one state directory per overlay.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    details: Reports whether the overlay would be applied or undone, and changes nothing.
  diff_mode:
    support: none
notes:
  - Overlays must not cover the same files; apply them in order and undo them in reverse.
  - Written files replace the old ones atomically (a temporary file in the same directory,
    then a rename), so a running process never reads half a file.
  - The logic lives in C(module_utils/vllm_fleet_overlay.py), which C(fleet_versions) also
    uses to check applied overlays.
seealso:
  - module: fleet_versions
    description: Checks that applied overlays still match their checksums (option C(overlays)).
"""

EXAMPLES = r"""
- name: Lay MetaX's patched vllm/ over the venv's site-packages
  fleet_overlay:
    name: vllm
    root: /opt/vllm-fleet/venv/lib/python3.10/site-packages
    target: vllm
    type: directory
    src: /var/cache/vllm-fleet/downloads/vllm-0.10.2-metax-overlay.tar.gz
    sha256: "{{ fleet_matrix['vllm_overlays'][0]['sha256'] }}"
    version: "{{ fleet_matrix['vllm_overlays'][0]['version'] }}"
    state_dir: /opt/vllm-fleet/overlays

- name: Replace triton's code generator with MetaX's
  fleet_overlay:
    name: triton-code-generator
    root: /opt/vllm-fleet/venv/lib/python3.10/site-packages
    target: triton/compiler/code_generator.py
    type: file
    src: /var/cache/vllm-fleet/downloads/triton-code_generator-3.0.0-metax.py
    sha256: "{{ fleet_matrix['vllm_overlays'][1]['sha256'] }}"
    state_dir: /opt/vllm-fleet/overlays

- name: Put the original vllm files back
  fleet_overlay:
    name: vllm
    state: absent
    state_dir: /opt/vllm-fleet/overlays
"""

RETURN = r"""
manifest:
  description: Path of the overlay's manifest (absent after O(state=absent)).
  returned: always
  type: str
  sample: /opt/vllm-fleet/overlays/vllm/manifest.json
files:
  description: Number of files the overlay wrote (applied) or had written (undone);
    V(null) in check mode before an application.
  returned: always
  type: int
  sample: 37
restored:
  description: Files (relative to the root) restored from the saved originals.
  returned: always
  type: list
  elements: str
  sample: [vllm/platforms/__init__.py]
removed:
  description: Files the overlay had added and that were removed.
  returned: always
  type: list
  elements: str
  sample: [vllm/platforms/maca.py]
left:
  description: Files left alone because someone changed them since the overlay wrote
    them, one sentence each (also given as warnings).
  returned: always
  type: list
  elements: str
  sample: ["vllm/config.py: changed since the overlay was applied; left as it is"]
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_overlay import OverlayError, apply, remove

_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')
_SHA256_RE = re.compile(r'^[0-9a-f]{64}$')


ARGUMENT_SPEC = dict(
    name=dict(type='str', required=True),
    state=dict(type='str', choices=['present', 'absent'], default='present'),
    root=dict(type='path'),
    target=dict(type='str'),
    type=dict(type='str', choices=['directory', 'file'], default='directory'),
    src=dict(type='path'),
    sha256=dict(type='str'),
    version=dict(type='str'),
    state_dir=dict(type='path', required=True),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[('state', 'present', ('root', 'target', 'src', 'sha256'))],
        supports_check_mode=True,
    )
    params = module.params
    if not _NAME_RE.match(params['name']):
        module.fail_json(msg='name=%r: use letters, digits, ".", "_" and "-" (it names a directory)'
                             % params['name'])
    if params['sha256'] is not None and not _SHA256_RE.match(params['sha256']):
        module.fail_json(msg='sha256=%r is not 64 lowercase hexadecimal digits' % params['sha256'])
    try:
        if params['state'] == 'present':
            result = apply(params['name'], params['src'], params['type'], params['target'],
                           params['root'], params['state_dir'], params['sha256'],
                           version=params['version'], check_mode=module.check_mode)
        else:
            result = remove(params['name'], params['state_dir'], check_mode=module.check_mode)
    except (OverlayError, OSError) as exc:
        module.fail_json(msg='overlay %s: %s' % (params['name'], exc))
    for sentence in result['left']:
        module.warn('overlay %s: %s' % (params['name'], sentence))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
