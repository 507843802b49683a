#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: compare what a node has installed with the inventory's version matrix."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_versions
short_description: Check a node's installed versions against the version matrix
description:
  - Compares what is installed on a node with the versions the inventory expects
    (C(fleet_matrix)) and returns one row per component - Python distributions of the
    environment that runs vLLM, commits of source checkouts, versions recorded in
    C(key=value) files (Huawei's driver, firmware and CANN C(version.info)), and the
    interpreter's own version.
  - Fails listing B(every) mismatch, one per line, unless O(fail_on_mismatch=false); the
    table and the list are returned either way.
  - Never changes anything, so it runs the same in check mode. The distributions are read
    by one run of O(python) with C(importlib.metadata); C(git) runs with
    C(--no-optional-locks), so not even the index of a checkout is refreshed.
  - Commands run with C(LC_ALL=C).
version_added: "0.1.0"
author:
  - vllm-fleet contributors
options:
  python:
    description:
      - Interpreter of the virtual environment or conda environment that runs vLLM, such
        as C(/opt/vllm-fleet/venv/bin/python).
      - A name without a slash is looked up on E(PATH).
      - Defaults to the interpreter that runs this module (C(ansible_python_interpreter)).
      - When it does not exist, every package, O(python_version) and every O(git) entry
        that relies on an installed distribution is reported as a mismatch naming it.
      - Only used with O(packages), O(python_version) or a O(git) entry without C(path).
    type: path
  packages:
    description:
      - Python distributions that must be installed in O(python), mapping
        each name to a version, or to V(null) for "any version, but installed".
      - Names are compared as PEP 503 names, so C(torch_npu), C(torch-npu) and
        C(Torch.NPU) are one distribution.
      - Versions are compared as pip's C(==) does (PEP 440). A local label on the installed
        version is ignored when the expected one has none (C(2.7.1+cpu) matches C(2.7.1)).
        Pre-, post- and development releases are distinct versions
        (C(0.11.3.dev0+g275de3417) matches neither C(0.11.2) nor C(0.11.3)).
      - A version must be a quoted string; YAML would read C(3.10) as the number C(3.1).
    type: dict
    default: {}
  git:
    description:
      - Source checkouts that must be at a commit, as C(component) mapped to a dict with
        C(commit) (required; the full hash, 40 hexadecimal digits or 64 for SHA-256
        repositories) and C(path) (optional; the directory of the checkout). The
        component names are the caller's, so these keys are checked by the module
        rather than declared as suboptions.
      - The checkout's C(HEAD) is read with C(git -C <path> rev-parse HEAD). Whether the
        tree has modified tracked files is reported in C(detail) and never fails, as the
        roles rewrite GitHub URLs in build files, so a dirty tree is expected.
      - Without C(path), the distribution named like the component is looked up in
        O(python). An editable install (PEP 660 C(direct_url.json), or a C(setup.py
        develop) C(*.egg-info) inside the project) gives its project directory as the
        checkout. Otherwise the commit C(pip) recorded for a C(git+URL) install, or
        the abbreviated one setuptools-scm put in the version (C(+g275de3417)), is
        compared.
    type: dict
    default: {}
  files:
    description:
      - Version files, as C(component) mapped to a dict with C(path) (the file), C(key)
        (the key holding the version - C(Version), C(version), C(version_dir), ...) and
        C(expected) (the expected value, or V(null) to only require the key); all three
        are required.
      - "Lines are C(key=value) or C(key : value) (Huawei's NNAL C(version.info)); the
        last occurrence of a key wins, quotes around a value are dropped."
      - Values are compared as text, ignoring case (Huawei spells one release C(8.3.RC1)
        and C(8.3.rc1)).
      - A missing file reads as "not installed".
    type: dict
    default: {}
  overlays:
    description:
      - Vendor overlays applied by the C(fleet_overlay) module (MetaX's patched C(vllm/) and
        triton C(code_generator.py)), as C(component) mapped to a dict with C(manifest) (the
        overlay's C(manifest.json)) and C(sha256) (the artifact the matrix pins); both are
        required.
      - An overlay matches when its manifest records that sha256 and every file it wrote
        still holds what it wrote (each is hashed), so a package reinstall that silently
        replaced a patched file is reported.
    type: dict
    default: {}
  python_version:
    description:
      - Expected version of O(python), compared on dotted parts as a prefix;
        C(3.11) matches every 3.11.x, C(3.11.13) only 3.11.13.
    type: str
  fail_on_mismatch:
    description:
      - Fail when a component differs from what is expected.
      - With V(false) the module succeeds and the caller decides from RV(mismatches).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: The module only reads; it behaves the same in check mode.
  diff_mode:
    support: none
notes:
  - At least one of O(packages), O(git), O(files), O(overlays) or O(python_version) must be given.
  - O(python) runs with the environment of the task, so set C(environment) (for example
    C(PYTHONPATH)) as the vLLM service has it when that changes what is importable.
  - Git refuses to read a checkout owned by another user (C(safe.directory)); the module
    does not override that protection. Run the task as the checkout's owner
    (C(become_user)) or add the path to C(safe.directory) in the system's git config.
  - Version file formats are those of the Huawei Ascend installers; see
    C(lab/fixtures/installers/ascend/README.md).
seealso:
  - name: PEP 440 version matching
    description: The C(==) rule used for O(packages), local labels included.
    link: https://peps.python.org/pep-0440/#version-matching
  - name: Recording the direct URL origin of installed distributions
    description: C(direct_url.json), where pip records editable and VCS installs.
    link: https://packaging.python.org/en/latest/specifications/direct-url/
"""

EXAMPLES = r"""
- name: Check the Ascend stack of a node against the matrix
  fleet_versions:
    python: /opt/vllm-fleet/venv/bin/python
    python_version: "{{ fleet_matrix['python'] }}"
    packages:
      torch: "{{ fleet_matrix['torch'] }}"
      torch_npu: "{{ fleet_matrix['torch_npu'] }}"
      transformers: "{{ fleet_matrix['transformers'] }}"
      openai_harmony: "{{ fleet_matrix['openai_harmony'] }}"
      vllm: null
      vllm_ascend: null
    git:
      vllm:
        commit: "{{ fleet_matrix['vllm']['commit'] }}"
      vllm_ascend:
        commit: "{{ fleet_matrix['vllm_ascend']['commit'] }}"
        path: /usr/local/Ascend/vllm-ascend
    files:
      npu_driver:
        path: /usr/local/Ascend/driver/version.info
        key: Version
        expected: "{{ fleet_matrix['npu_driver']['version'] }}"
      npu_firmware:
        path: /usr/local/Ascend/firmware/version.info
        key: Version
        expected: "{{ fleet_matrix['npu_firmware']['version'] }}"
      cann_toolkit:
        path: /usr/local/Ascend/ascend-toolkit/latest/{{ ansible_facts['architecture'] }}-linux/ascend_toolkit_install.info
        key: version
        expected: "{{ fleet_matrix['cann_toolkit']['version'] }}"
      cann_kernels:
        path: /usr/local/Ascend/ascend-toolkit/{{ fleet_matrix['cann_kernels']['version'] }}/opp_kernel/version.info
        key: version_dir
        expected: "{{ fleet_matrix['cann_kernels']['version'] }}"
      cann_nnal:
        path: /usr/local/Ascend/nnal/atb/latest/version.info
        key: Ascend-cann-atb
        expected: "{{ fleet_matrix['cann_nnal']['version'] }}"

- name: Check a MetaX node - MACA, the packages and MetaX's overlays
  fleet_versions:
    python: /opt/vllm-fleet/venv/bin/python
    packages:
      vllm: "{{ fleet_matrix['vllm']['version'] }}"
      torch: "{{ fleet_matrix['torch'] }}"
      triton: "{{ fleet_matrix['triton'] }}"
    files:
      maca_sdk:
        path: /opt/maca/Version.txt
        key: Version
        expected: "{{ fleet_matrix['maca_sdk']['version'] }}"
    overlays:
      vllm:
        manifest: /opt/vllm-fleet/overlays/vllm/manifest.json
        sha256: "{{ fleet_matrix['vllm_overlays'][0]['sha256'] }}"

- name: Report without failing, then show what differs
  fleet_versions:
    packages:
      transformers: "4.57.1"
    fail_on_mismatch: false
  register: fleet_versions_report

- name: Show the mismatches
  ansible.builtin.debug:
    var: fleet_versions_report['mismatches']
  when: fleet_versions_report['mismatches'] | length > 0
"""

RETURN = r"""
versions:
  description:
    - One row per component, in this order - O(files), O(python_version), O(packages),
      O(git), O(overlays) (the stack from the bottom up), each in the order given.
  returned: when the options are valid, also when the module fails for mismatches
  type: list
  elements: dict
  contains:
    component:
      description: The name given in the option (C(python) for O(python_version)).
      type: str
      sample: torch_npu
    kind:
      description: Which option the row comes from.
      type: str
      choices: [file, python, package, git, overlay]
      sample: package
    expected:
      description: The expected version or commit; V(null) for "any version".
      type: str
      sample: "2.7.1"
    installed:
      description: What was found; V(null) when nothing was (not installed, no checkout).
        An abbreviated commit when it comes from a setuptools-scm version.
      type: str
      sample: "2.7.1+cpu"
    ok:
      description: Whether the installed version matches.
      type: bool
      sample: true
    detail:
      description: Where the value was read, or why nothing was; for checkouts also
        whether the tree is clean or which tracked files are modified.
      type: str
      sample: "editable install from /usr/local/Ascend/vllm-ascend"
mismatches:
  description: One sentence per component that differs, naming it, the expected and the
    installed version.
  returned: when the options are valid, also when the module fails for mismatches
  type: list
  elements: str
  sample:
    - "transformers: expected 4.57.1, installed 4.56.0"
    - "vllm commit: expected 275de34170654274616082721348b7edd9741d32, found
      1234abc5d6e7f8091a2b3c4d5e6f708192a3b4c5 in /opt/vllm-fleet/src/vllm"
    - "cann_toolkit: expected 8.3.RC1, not installed (no
      /usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info)"
msg:
  description: How many components were checked, and on failure every mismatch, one per line.
  returned: always
  type: str
  sample: "9 components match the expected versions"
interpreter:
  description:
    - The interpreter that was asked (for O(packages), O(python_version) or a O(git) entry
      without C(path)); V(null) when none was.
    - Install roles read C(found) to tell a missing environment from one with other versions.
  returned: success
  type: dict
  contains:
    found:
      description: Whether the interpreter exists and listed its packages.
      type: bool
    error:
      description: Why it could not be asked, or V(null).
      type: str
    executable:
      description: The interpreter's C(sys.executable).
      type: str
    version:
      description: Its Python version.
      type: str
"""

import json
import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_fleet_overlay import OverlayError
from ansible.module_utils.vllm_fleet_overlay import inspect as inspect_overlay
from ansible.module_utils.vllm_fleet_versions import (
    PROBE,
    canonical_name,
    check_file,
    check_git,
    check_overlay,
    check_package,
    check_python,
    commit_from_install,
    validate_options,
)

C_LOCALE = {'LC_ALL': 'C'}


def reason(text):
    """The line of an error output that says why.

    Git's ``fatal:``/``error:`` line (advice follows it, such as the ``safe.directory``
    command for a checkout owned by another user), else the last line (a traceback's
    exception).
    """
    lines = [line.strip() for line in (text or '').splitlines() if line.strip()]
    for line in lines:
        if line.startswith(('fatal:', 'error:')):
            return line
    return lines[-1] if lines else ''


def run(module, args):
    """Run read-only; an unrunnable command is a fact to report, not a module failure."""
    try:
        return module.run_command(args, environ_update=C_LOCALE, handle_exceptions=False)
    except OSError as exc:
        return None, '', '%s: %s' % (args[0], exc.strerror or exc)


def resolve_python(module, python):
    """Return ``(path, error)``; ``error`` is the sentence every dependent row will carry."""
    if not python:
        return sys.executable, None
    if '/' not in python:
        found = module.get_bin_path(python)
        if not found:
            return python, 'python interpreter %s not found on PATH' % python
        python = found
    if not os.path.exists(python):
        return python, 'python interpreter %s not found' % python
    if os.path.isdir(python) or not os.access(python, os.X_OK):
        return python, 'python interpreter %s is not an executable file' % python
    return python, None


def probe_python(module, python, names):
    """One run of the interpreter: its version and the wanted distributions."""
    path, error = resolve_python(module, python)
    if error:
        return {'error': error}
    rc, out, err = run(module, [path, '-c', PROBE] + sorted(names))
    if rc != 0:
        return {'error': '%s could not list its packages: %s'
                         % (path, reason(err) or 'exit status %s' % rc)}
    try:
        return json.loads(out)
    except ValueError:
        return {'error': '%s printed something other than the package list: %s'
                         % (path, reason(out))}


def read_checkout(module, path):
    """HEAD and modified tracked files of a checkout, as ``check_git`` reads them."""
    if not os.path.isdir(path):
        return {'error': 'not checked out (no directory %s)' % path}
    git = module.get_bin_path('git')
    if not git:
        return {'error': 'git is not installed, so %s cannot be read' % path}
    rc, out, err = run(module, [git, '-C', path, 'rev-parse', '--show-toplevel', 'HEAD'])
    # Two lines, in argument order; a path may hold spaces, so split on lines only.
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if rc != 0 or len(lines) != 2:
        return {'error': '%s is not a readable git checkout: %s'
                         % (path, reason(err) or reason(out))}
    toplevel, head = lines
    # --no-optional-locks: a plain `git status` rewrites the index to refresh its stat
    # cache, which this read-only module must not do (and which, run as root, would leave
    # a root-owned index in the service user's checkout). Untracked files are build
    # outputs, not changes.
    rc, out, _err = run(module, [git, '--no-optional-locks', '-C', path, 'status',
                                 '--porcelain', '--untracked-files=no'])
    dirty = [line[3:] for line in out.splitlines() if line.strip()] if rc == 0 else None
    return {'checkout': path, 'toplevel': toplevel, 'head': head, 'dirty': dirty}


def read_file(path):
    try:
        with open(path, 'rb') as handle:
            return {'text': handle.read().decode('utf-8', 'replace')}
    except (FileNotFoundError, NotADirectoryError):
        return {'error': 'missing', 'missing': True}
    except OSError as exc:
        return {'error': exc.strerror or str(exc)}


def check(module):
    """Build the table and the mismatch sentences; the only side effects are reads."""
    params = module.params
    packages, git, files = params['packages'], params['git'], params['files']
    results = []

    for component, spec in files.items():
        spec = dict(spec, path=os.path.expanduser(spec['path']))
        results.append(check_file(component, spec, read_file(spec['path'])))

    # One probe for every question asked of the interpreter.
    names = {canonical_name(name) for name in packages}
    names.update(canonical_name(name) for name, spec in git.items() if not spec.get('path'))
    probe = None
    if names or params['python_version'] is not None:
        probe = probe_python(module, params['python'], names)

    if params['python_version'] is not None:
        results.append(check_python(params['python_version'], probe))
    for name, expected in packages.items():
        results.append(check_package(name, expected, probe))
    for component, spec in git.items():
        path = spec.get('path')
        if path:
            found = read_checkout(module, os.path.expanduser(path))
        else:
            found = commit_from_install(component, probe)
            if 'checkout' in found:
                found = read_checkout(module, found['checkout'])
        results.append(check_git(component, spec['commit'], found))

    for component, spec in params['overlays'].items():
        manifest = os.path.expanduser(spec['manifest'])
        try:
            found = dict(inspect_overlay(manifest), manifest=manifest)
        except (OverlayError, OSError) as exc:
            found = {'error': str(exc), 'manifest': manifest}
        results.append(check_overlay(component, spec['sha256'], found))

    versions = [entry for entry, _mismatch in results]
    mismatches = [mismatch for _entry, mismatch in results if mismatch]
    interpreter = None
    if probe is not None:
        interpreter = {'found': 'error' not in probe, 'error': probe.get('error'),
                       'executable': probe.get('executable'), 'version': probe.get('python_version')}
    return versions, mismatches, interpreter


# Keys of packages, git and files are component names chosen by the caller, so their
# entries are checked by validate_options rather than by suboptions (which need fixed keys).
ARGUMENT_SPEC = dict(
    python=dict(type='path'),
    packages=dict(type='dict', default={}),
    git=dict(type='dict', default={}),
    files=dict(type='dict', default={}),
    overlays=dict(type='dict', default={}),
    python_version=dict(type='str'),
    fail_on_mismatch=dict(type='bool', default=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    if not (params['packages'] or params['git'] or params['files'] or params['overlays']
            or params['python_version'] is not None):
        module.fail_json(msg='nothing to check: give packages, git, files, overlays or python_version')
    errors = validate_options(params['packages'], params['git'], params['files'],
                              params['python_version'], params['overlays'])
    if errors:
        module.fail_json(msg='invalid options:\n' + '\n'.join(errors))

    versions, mismatches, interpreter = check(module)
    if mismatches and params['fail_on_mismatch']:
        module.fail_json(
            msg='%d of %d components differ from the expected versions:\n%s'
                % (len(mismatches), len(versions), '\n'.join(mismatches)),
            versions=versions, mismatches=mismatches, interpreter=interpreter, changed=False)
    if mismatches:
        msg = '%d of %d components differ from the expected versions' % (
            len(mismatches), len(versions))
    else:
        msg = '%d components match the expected versions' % len(versions)
    module.exit_json(changed=False, msg=msg, versions=versions, mismatches=mismatches, interpreter=interpreter)


if __name__ == '__main__':
    main()
