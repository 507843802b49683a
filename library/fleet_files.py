#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: put a set of small files and directories in place in one round trip.

Why it exists: ansible.builtin.template, copy and file cost one round trip to the node
per path (and template/copy two). A node serving six models has eighteen unit and
environment files, and a converged node must still compare every one of them on each
run, which made a no-op run of the fleet dozens of times slower than Ansible's floor.
This module compares and writes them all in one call, with the same semantics as
copy: content compared byte for byte, an atomic move into place, owner, group and mode
set when they differ, check mode and diff.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_files
short_description: Put many small files and directories in place in one call
description:
  - Ensures every directory of O(directories) exists with its owner, group and mode, then
    every file of O(files) holds exactly its content (compared byte for byte and written
    with an atomic move in the file's directory) with its owner, group and mode, or is
    absent with O(files[].state=absent).
  - Does for a whole set of paths, in one round trip, what M(ansible.builtin.copy) with
    O(ansible.builtin.copy#module:content) and M(ansible.builtin.file) do for one path each.
  - Returns the paths it changed, so a caller can restart exactly the services whose files
    changed.
version_added: "0.2.0"
author:
  - vllm-fleet contributors
options:
  directories:
    description:
      - Directories to create (with their parents) when missing; each is created before
        the files.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: path
        required: true
      owner:
        description: Owner; unchanged when not given.
        type: str
      group:
        description: Group; unchanged when not given.
        type: str
      mode:
        description: Mode as an octal string such as C("0755"); unchanged when not given.
        type: raw
  files:
    description:
      - Files to write or remove, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file. Its directory must exist (or be in O(directories)).
        type: path
        required: true
      content:
        description:
          - The whole content of the file, as text (written as UTF-8). Required with
            O(files[].state=present).
          - Never shown in logs, since environment files hold secrets; O(files[].path)
            and the diff (when asked for and the task is not C(no_log)) are.
        type: str
      owner:
        description: Owner; root when not given.
        type: str
      group:
        description: Group; root when not given.
        type: str
      mode:
        description: Mode as an octal string such as C("0644"); C(0644) when not given.
        type: raw
      state:
        description: V(present) writes the file, V(absent) removes it.
        type: str
        choices: [present, absent]
        default: present
attributes:
  check_mode:
    support: full
    details: Reports which paths would change and writes nothing.
  diff_mode:
    support: full
    details: A before and after of each changed file; set C(no_log) on tasks whose files hold secrets.
notes:
  - Meant for configuration files (units, environment files, small scripts). Large files
    belong to M(ansible.builtin.copy) or M(ansible.builtin.get_url).
"""

EXAMPLES = r"""
- name: Write a unit and its environment, and remove one no longer wanted
  fleet_files:
    directories:
      - {path: /etc/vllm-fleet, mode: "0755"}
    files:
      - path: /etc/systemd/system/vllm-qwen.service
        content: "{{ lookup('ansible.builtin.template', 'vllm-model.service.j2') }}"
      - path: /etc/vllm-fleet/vllm-qwen.env
        content: "VLLM_USE_MODELSCOPE=true\n"
        group: vllm
        mode: "0640"
      - path: /etc/systemd/system/vllm-old.service
        state: absent
  register: units

- name: Restart what changed
  ansible.builtin.systemd_service:
    name: vllm-qwen.service
    state: restarted
  when: "'/etc/systemd/system/vllm-qwen.service' in units.changed_paths"
"""

RETURN = r"""
changed_paths:
  description: The paths created, rewritten, removed or given another owner, group or mode, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/vllm-fleet/vllm-qwen.env]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

_DEFAULT_FILE = {'owner': 'root', 'group': 'root', 'mode': '0644'}


def _read(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _attributes(module, spec, defaults):
    """The file_args of AnsibleModule.set_fs_attributes_if_different, defaults filled in."""
    params = {'path': spec['path']}
    for key in ('owner', 'group', 'mode'):
        value = spec.get(key)
        params[key] = value if value is not None else defaults.get(key)
    return module.load_file_common_arguments(params)


def ensure_directory(module, spec):
    path = spec['path']
    changed = False
    if not os.path.isdir(path):
        if os.path.exists(path):
            module.fail_json(msg='%s exists and is not a directory' % path)
        changed = True
        if not module.check_mode:
            os.makedirs(path)
    if not module.check_mode or not changed:
        changed = module.set_fs_attributes_if_different(_attributes(module, spec, {}), changed)
    return changed


def ensure_file(module, spec, diffs):
    path = spec['path']
    before = _read(path)
    if spec['state'] == 'absent':
        if before is None:
            return False
        if not module.check_mode:
            os.remove(path)
        if module._diff:
            diffs.append({'before_header': path, 'after_header': path,
                          'before': before.decode('utf-8', 'replace'), 'after': ''})
        return True
    if spec.get('content') is None:
        module.fail_json(msg='files: %s has no content (state present)' % path)
    content = to_bytes(spec['content'], errors='surrogate_or_strict')
    changed = before != content
    if changed:
        if module._diff:
            diffs.append({'before_header': path, 'after_header': path,
                          'before': (before or b'').decode('utf-8', 'replace'),
                          'after': content.decode('utf-8', 'replace')})
        if not module.check_mode:
            directory = os.path.dirname(path)
            if not os.path.isdir(directory):
                module.fail_json(msg='files: the directory of %s does not exist' % path)
            fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=directory)
            try:
                with os.fdopen(fd, 'wb') as handle:
                    handle.write(content)
                module.atomic_move(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
    if module.check_mode and before is None:
        return True
    return module.set_fs_attributes_if_different(_attributes(module, spec, _DEFAULT_FILE), changed)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='raw'),
            )),
            files=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                content=dict(type='str', no_log=True),
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='raw'),
                state=dict(type='str', choices=['present', 'absent'], default='present'),
            )),
        ),
        supports_check_mode=True,
    )
    for spec in module.params['directories'] + module.params['files']:
        if not os.path.isabs(spec['path']):
            module.fail_json(msg='%s is not an absolute path' % spec['path'])
    changed_paths = []
    diffs = []
    for spec in module.params['directories']:
        if ensure_directory(module, spec):
            changed_paths.append(spec['path'])
    for spec in module.params['files']:
        if ensure_file(module, spec, diffs):
            changed_paths.append(spec['path'])
    result = dict(changed=bool(changed_paths), changed_paths=changed_paths)
    if module._diff:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
