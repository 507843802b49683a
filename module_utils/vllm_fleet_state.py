# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Pure functions behind ``library/fleet_state.py``: a node's state as one comparable snapshot.

A converged node is recorded at the end of a successful full converge: every path under the
roots the run manages, with what a later run would compare (a file's owner, group, mode and
content; a directory's owner, group and mode; a link's target). Trees whose files the roles
never compare one by one are folded into what the roles do compare:

- a Python environment (``pyvenv.cfg``, or a conda environment's ``conda-meta``) into the
  distributions it holds (their ``*.dist-info`` names, which carry the versions), so a
  moved pinned package shows, not each of its thousands of files;
- a git checkout's history (``.git``) into the commit its HEAD names (its files are walked);
- a model's directory (it holds the completion marker of roles/blocks/model_fetch) into the marker.

``__pycache__`` directories (written by whoever imports the code) and the paths given as
``skip`` (a service's own home, where the engine writes its caches) are not recorded.

Everything here reads only; nothing needs Ansible, so tests/unit run it on a temporary tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

# A file up to this size is compared by content; a larger one (a tokenizer file, an
# installer) by size and modification time, which every writer of it changes.
HASH_LIMIT = 1 << 20
IGNORED_NAMES = ('__pycache__',)
# What names a distribution in site-packages (with its version), and the .pth files of editable installs.
DISTRIBUTION_SUFFIXES = ('.dist-info', '.egg-info', '.egg-link', '.pth')
# How many differences a check names (the first ones, in path order).
REASONS_SHOWN = 12


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 16), b''):
            digest.update(block)
    return digest.hexdigest()


def _owner(st):
    return '%o %d:%d' % (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def _distributions(env):
    """The ``name-version.dist-info`` names of every site-packages directory of an environment."""
    found = []
    for lib in ('lib', 'lib64'):
        base = os.path.join(env, lib)
        try:
            pythons = sorted(os.listdir(base))
        except OSError:
            continue
        for python in pythons:
            site = os.path.join(base, python, 'site-packages')
            try:
                found.extend(sorted(n for n in os.listdir(site) if n.endswith(DISTRIBUTION_SUFFIXES)))
            except OSError:
                continue
    return found


def _git_head(checkout):
    """The commit a checkout's HEAD names (a detached HEAD, a loose ref or a packed one)."""
    git_dir = os.path.join(checkout, '.git')
    if os.path.isfile(git_dir):  # a worktree or submodule: "gitdir: <path>"
        with open(git_dir) as handle:
            git_dir = os.path.join(checkout, handle.read().split(':', 1)[1].strip())
    try:
        with open(os.path.join(git_dir, 'HEAD')) as handle:
            head = handle.read().strip()
    except OSError as exc:
        return 'unreadable HEAD: %s' % exc.strerror
    if not head.startswith('ref: '):
        return head
    ref = head[5:]
    try:
        with open(os.path.join(git_dir, ref)) as handle:
            return handle.read().strip()
    except OSError:
        pass
    try:
        with open(os.path.join(git_dir, 'packed-refs')) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        pass
    return 'unresolved %s' % ref


def _folded(path, names, markers):
    """What a directory folds into (a string), or None when it is walked file by file."""
    if 'conda-meta' in names and os.path.isdir(os.path.join(path, 'conda-meta')):
        meta = sorted(n for n in os.listdir(os.path.join(path, 'conda-meta')) if n.endswith('.json'))
        return 'conda %s %s' % (' '.join(meta), ' '.join(_distributions(path)))
    if 'pyvenv.cfg' in names:
        return 'venv %s %s' % (_sha256(os.path.join(path, 'pyvenv.cfg')), ' '.join(_distributions(path)))
    for marker in markers:
        if marker in names:
            return 'model %s %s' % (marker, _sha256(os.path.join(path, marker)))
    return None


def _describe(path, st, hashed=True):
    """One entry: kind, owner and mode, and what identifies the content."""
    if stat.S_ISLNK(st.st_mode):
        return 'link %s' % os.readlink(path)
    if stat.S_ISREG(st.st_mode):
        if hashed and st.st_size <= HASH_LIMIT:
            return 'file %s %s' % (_owner(st), _sha256(path))
        return 'file %s size=%d mtime=%d' % (_owner(st), st.st_size, st.st_mtime_ns)
    if stat.S_ISDIR(st.st_mode):
        return 'dir %s' % _owner(st)
    return 'other %o' % stat.S_IFMT(st.st_mode)


def snapshot(roots, skip=(), markers=(), installs=(), dirs=()):
    """{absolute path: entry} of everything under ``roots`` and ``installs`` (files, links,
    directories, folds); the files of ``installs`` (vendors' installations, tens of thousands
    of files) by size and modification time instead of content; of ``dirs`` (directories that
    services fill while they run) the directory alone.

    A root that does not exist is recorded as ``absent``: its appearing is a change too.
    """
    skip = {os.path.normpath(p) for p in skip}
    entries = {}
    hashed_roots = {os.path.normpath(r): True for r in roots}
    hashed_roots.update({os.path.normpath(r): False for r in installs if os.path.normpath(r) not in hashed_roots})
    for root, hashed in sorted(hashed_roots.items()):
        entries.update(_walk(root, hashed, skip, markers))
    for directory in dirs:
        directory = os.path.normpath(directory)
        try:
            entries[directory] = _describe(directory, os.lstat(directory))
        except OSError:
            entries[directory] = 'absent'
    return entries


def _walk(root, hashed, skip, markers):
    """Entries of one root (see snapshot)."""
    entries = {}
    try:
        st = os.lstat(root)
    except OSError:
        entries[root] = 'absent'
        return entries
    if not stat.S_ISDIR(st.st_mode):
        entries[root] = _describe(root, st, hashed)
        return entries
    for top, dirs, files in os.walk(root):
        if top in skip:
            dirs[:] = []
            continue
        here = os.lstat(top)
        folded = _folded(top, set(dirs) | set(files), markers)
        if folded is not None:
            entries[top] = '%s %s' % (_owner(here), folded)
            # A conda installation's own environments are environments of their own.
            dirs[:] = ['envs'] if folded.startswith('conda ') and 'envs' in dirs else []
            continue
        entries[top] = _describe(top, here)
        if '.git' in dirs or '.git' in files:  # the checkout's files are walked, its history folds
            entries[os.path.join(top, '.git')] = 'git %s' % _git_head(top)
            dirs[:] = [d for d in dirs if d != '.git']
            files = [f for f in files if f != '.git']
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_NAMES
                         and os.path.join(top, d) not in skip)
        for name in files:
            path = os.path.join(top, name)
            if path in skip:
                continue
            try:
                entries[path] = _describe(path, os.lstat(path), hashed)
            except OSError as exc:  # gone while walking: its absence is the change
                entries[path] = 'unreadable %s' % exc.strerror
        # A link to a directory is listed by os.walk among dirs and never followed.
        for name in dirs:
            path = os.path.join(top, name)
            if os.path.islink(path):
                entries[path] = _describe(path, os.lstat(path))
    return entries


def differences(recorded, now):
    """Sentences naming each path that differs between two snapshots, in path order."""
    found = []
    for path in sorted(set(recorded) | set(now)):
        before, after = recorded.get(path), now.get(path)
        if before == after:
            continue
        if before is None:
            found.append('%s is new' % path)
        elif after is None:
            found.append('%s is gone' % path)
        else:
            found.append('%s changed (%s)' % (path, _what_changed(before, after)))
    return found


def _what_changed(before, after):
    kind_before, kind_after = before.split(' ', 1)[0], after.split(' ', 1)[0]
    if kind_before != kind_after:
        return 'was a %s, is a %s' % (kind_before, kind_after)
    if before.split(' ')[1:2] != after.split(' ')[1:2] and kind_before in ('file', 'dir'):
        return 'mode or owner'
    return 'content'


def enabled_units(entries, unit_dir='/etc/systemd/system'):
    """Units enabled in ``unit_dir`` (a link in one of its ``*.wants`` directories), as the snapshot shows."""
    units = set()
    prefix = unit_dir.rstrip('/') + '/'
    for path, entry in entries.items():
        if not (path.startswith(prefix) and entry.startswith('link ')):
            continue
        parent, name = os.path.split(path[len(prefix):])
        if parent.endswith(('.wants', '.requires')) and '/' not in parent:
            units.add(name)
    return sorted(units)


def parse_show(text):
    """{unit: ActiveState} from ``systemctl show --property=Id,ActiveState U...``."""
    states = {}
    for block in text.strip().split('\n\n'):
        props = dict(line.split('=', 1) for line in block.splitlines() if '=' in line)
        if props.get('Id'):
            states[props['Id']] = props.get('ActiveState', '')
    return states


# What of the accelerators a converged node must still show: a change sends it down the full
# path, whose preflight and driver gate then say what it means.
ACCELERATOR_KEYS = ('vendor', 'count', 'device_node_count', 'driver_version', 'firmware_version', 'health')


def accelerator_summary(facts):
    return {key: (facts or {}).get(key) for key in ACCELERATOR_KEYS}


def record(inputs, entries, units, health, accelerators, settings):
    """The record a full converge leaves, as text (keys sorted: the same state, the same text).

    ``settings`` are how the snapshot was taken (roots, skip, markers, timeout): the check
    takes it again the same way.
    """
    return json.dumps(dict(settings, version=1, inputs=inputs, entries=entries, units=units,
                           health=sorted(health), accelerators=accelerator_summary(accelerators)),
                      sort_keys=True, indent=0)


def compare(saved, inputs, entries, unit_states, health_errors, accelerators):
    """Why the node is not what the record says (sentences; [] when it is).

    ``saved`` is the parsed record; the rest is what the node shows now: ``entries`` a snapshot
    of the record's roots, ``unit_states`` {unit: ActiveState} of the record's active units,
    ``health_errors`` {url: error} of the record's health URLs that did not answer 200.
    """
    if saved.get('version') != 1:
        return ['the record is of another version of vllm-fleet']
    if saved.get('inputs') != inputs:
        return ['the inputs differ from those of the last converge (inventory, matrix or vllm-fleet itself)']
    reasons = differences(saved.get('entries') or {}, entries)
    for unit, state in sorted((saved.get('units') or {}).items()):
        if state == 'active' and unit_states.get(unit) != 'active':
            reasons.append('unit %s is %s' % (unit, unit_states.get(unit) or 'unknown'))
    for url, error in sorted(health_errors.items()):
        reasons.append('%s: %s' % (url, error))
    was, now = saved.get('accelerators') or {}, accelerator_summary(accelerators)
    for key in ACCELERATOR_KEYS:
        if was.get(key) != now.get(key):
            reasons.append('accelerators: %s was %s, is %s' % (key, was.get(key), now.get(key)))
    return reasons
