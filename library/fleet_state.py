#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: is this node still what its last converge made it? One read of its whole state.

Why it exists: a converged node used to run every step of the converge to learn that nothing
was to do (about 20 module runs, each a Python start on the node and a forked worker on the
controller: a no-op run cost ten times Ansible's floor). This module answers in one call,
from a record the last successful full converge left on the node; anything in doubt sends
the node down the full path, which repairs every drift.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_state
short_description: Record a converged node's state, or tell whether the node still has it
description:
  - With O(state=record) (the last step of a successful full converge) writes O(path), which holds the
    run's O(inputs) digest, a snapshot of everything under O(roots) (see
    C(module_utils/vllm_fleet_state.py) for what is compared and how Python environments,
    git checkouts and model directories fold), the enabled units of the snapshot's
    O(unit_dir) with their state, the O(health) URLs and the accelerators' facts.
  - With O(state=check) reads the node again against that record and returns
    RV(converged) true only when the inputs are the same, every path of the snapshot is
    the same, every unit active then is active now, every health URL answers 200 and the
    accelerators show the same count, versions and health. RV(reasons) says what differs.
  - Both return the accelerators' facts (as M(accelerator_facts) does) when O(vendor) is given.
  - Never changes anything but O(path); check mode writes nothing.
version_added: "0.3.0"
author:
  - vllm-fleet contributors
options:
  state:
    description: C(check) reads the node against the record; C(record) writes the record.
    type: str
    choices: [check, record]
    default: check
  path:
    description: The record.
    type: path
    default: /var/lib/vllm-fleet/state.json
  inputs:
    description: A digest of everything the run's steps read on the controller (the
      host's variables and vllm-fleet's own files; filter C(fleet_inputs_digest)).
    type: str
    required: true
  roots:
    description: Paths whose every file, link and directory the record holds (O(state=record)).
    type: list
    elements: path
    default: []
  installs:
    description: Paths read like O(roots) but their files by size and modification time, not
      content (a vendor's installation, tens of thousands of files).
    type: list
    elements: path
    default: []
  dirs:
    description: Directories recorded themselves (owner, group, mode), not what they hold
      (a service fills them while it runs).
    type: list
    elements: path
    default: []
  skip:
    description: Paths under O(roots) not recorded (a service's home, where it writes at run time).
    type: list
    elements: path
    default: []
  markers:
    description: File names that make a directory a model's (it folds into the marker).
    type: list
    elements: str
    default: []
  health:
    description: URLs that must answer 200 (O(state=record); the check reads the record's).
    type: list
    elements: str
    default: []
  unit_dir:
    description: Where the units the record holds are enabled (their links in C(*.wants)); it
      must be under one of O(roots).
    type: path
    default: /etc/systemd/system
  timeout:
    description: Seconds each health URL has to answer.
    type: float
    default: 3
  vendor:
    description: The accelerator vendor, as for M(accelerator_facts); none reads no accelerator.
    type: str
  accelerators:
    description: With O(state=record), the accelerators' facts as the run read them last
      (C(ansible_facts.accelerators), preflight's or the driver gate's after a change), recorded
      instead of reading the devices again; O(vendor) is then not read.
    type: dict
"""

EXAMPLES = r"""
- name: Read the node's whole state against its last converge
  fleet_state:
    inputs: "{{ hostvars | fleet_inputs_digest(inventory_hostname, groups) }}"
    vendor: ascend
  register: _fleet_state

- name: Record what the node now is, at the end of a successful full converge
  fleet_state:
    state: record
    inputs: "{{ _fleet_state.inputs }}"
    roots: [/opt/vllm-fleet, /etc/systemd/system/vllm-fleet-qwen.service]
    skip: [/var/lib/vllm-fleet/home]
    markers: [.fleet-complete]
    health: ["http://127.0.0.1:8000/health"]
    accelerators: "{{ ansible_facts['accelerators'] }}"
  changed_when: false
"""

RETURN = r"""
converged:
  description: O(state=check) only. The node is what the record says.
  returned: always
  type: bool
reasons:
  description: What differs (the first twelve differences of the snapshot, then units, health
    and accelerators); empty when converged.
  returned: always
  type: list
  elements: str
inputs:
  description: O(inputs), for the record at the end of the same run.
  returned: always
  type: str
checked:
  description: How much the check or the record covered.
  returned: always
  type: dict
  sample: {entries: 412, units: 5, health: 2}
"""

import json
import os
import tempfile
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_accel import gather
from ansible.module_utils.vllm_fleet_state import (
    REASONS_SHOWN,
    compare,
    enabled_units,
    parse_show,
    record,
    snapshot,
)

ACCEL_DEFAULTS = {'pci_path': '/sys/bus/pci/devices', 'dev_path': '/dev', 'smi_path': None,
                  'proc_path': '/proc', 'node_path': '/sys/devices/system/node'}


def unit_states(module, units):
    if not units:
        return {}
    rc, out, _err = module.run_command(['systemctl', 'show', '--property=Id,ActiveState'] + list(units))
    return parse_show(out) if rc == 0 else {}


def health_errors(urls, timeout):
    """{url: why} of the URLs that do not answer 200 (no proxy: these are the node's own)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    errors = {}
    for url in urls:
        try:
            with opener.open(url, timeout=timeout) as answer:
                if answer.status != 200:
                    errors[url] = 'answered %s' % answer.status
        except urllib.error.HTTPError as exc:
            errors[url] = 'answered %s' % exc.code
        except (OSError, ValueError) as exc:
            errors[url] = 'no answer (%s)' % getattr(exc, 'reason', exc)
    return errors


def write_atomic(path, text):
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.state-')
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', choices=['check', 'record'], default='check'),
            path=dict(type='path', default='/var/lib/vllm-fleet/state.json'),
            inputs=dict(type='str', required=True),
            roots=dict(type='list', elements='path', default=[]),
            installs=dict(type='list', elements='path', default=[]),
            dirs=dict(type='list', elements='path', default=[]),
            skip=dict(type='list', elements='path', default=[]),
            markers=dict(type='list', elements='str', default=[]),
            health=dict(type='list', elements='str', default=[]),
            unit_dir=dict(type='path', default='/etc/systemd/system'),
            timeout=dict(type='float', default=3),
            vendor=dict(type='str'),  # gather() checks it against VENDORS
            accelerators=dict(type='dict'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['accelerators'] is not None:
        accelerators, facts = params['accelerators'], {}
    else:
        accelerators = gather(module, dict(ACCEL_DEFAULTS, vendor=params['vendor'])) if params['vendor'] else {}
        facts = {'accelerators': accelerators} if params['vendor'] else {}

    if params['state'] == 'record':
        for option in ('roots', 'installs', 'dirs', 'skip'):
            for root in params[option]:
                if not os.path.isabs(root):
                    module.fail_json(msg='%s: %s is not an absolute path' % (option, root))
        entries = snapshot(params['roots'], params['skip'], params['markers'], params['installs'], params['dirs'])
        enabled = enabled_units(entries, params['unit_dir'])
        states = unit_states(module, enabled)
        settings = {key: params[key] for key in ('roots', 'installs', 'dirs', 'skip', 'markers', 'timeout')}
        text = record(params['inputs'], entries, {u: states.get(u, '') for u in enabled}, params['health'],
                      accelerators, settings)
        try:
            with open(params['path']) as handle:
                same = handle.read() == text
        except OSError:
            same = False
        if not same and not module.check_mode:
            write_atomic(params['path'], text)
        module.exit_json(changed=not same, converged=True, reasons=[], inputs=params['inputs'], ansible_facts=facts,
                         checked={'entries': len(entries), 'units': len(enabled), 'health': len(params['health'])})

    try:
        with open(params['path']) as handle:
            saved = json.load(handle)
    except (OSError, ValueError) as exc:
        module.exit_json(changed=False, converged=False, inputs=params['inputs'], ansible_facts=facts, checked={},
                         reasons=['no record of a converge at %s (%s)' % (params['path'], getattr(exc, 'strerror', None) or exc)])
    if saved.get('inputs') != params['inputs']:
        reasons = compare(saved, params['inputs'], {}, {}, {}, accelerators)
        module.exit_json(changed=False, converged=False, reasons=reasons, inputs=params['inputs'], ansible_facts=facts, checked={})
    entries = snapshot(saved.get('roots') or [], saved.get('skip') or [], saved.get('markers') or [],
                       saved.get('installs') or [], saved.get('dirs') or [])
    units = sorted(u for u, s in (saved.get('units') or {}).items() if s == 'active')
    reasons = compare(saved, params['inputs'], entries, unit_states(module, units),
                      health_errors(saved.get('health') or [], saved.get('timeout') or params['timeout']), accelerators)
    module.exit_json(changed=False, converged=not reasons, inputs=params['inputs'], reasons=reasons[:REASONS_SHOWN] + (
        ['... and %d more' % (len(reasons) - REASONS_SHOWN)] if len(reasons) > REASONS_SHOWN else []),
        ansible_facts=facts, checked={'entries': len(entries), 'units': len(units), 'health': len(saved.get('health') or [])})


if __name__ == '__main__':
    main()
