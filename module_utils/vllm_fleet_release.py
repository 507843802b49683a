# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""A node's releases (host mode): what its release directories say, and the one call that
marks, switches and prunes them (``library/fleet_releases.py``).

A release is a directory ``<releases_dir>/<id>/`` (the id: ``vllm_fleet/release.py``'s
``release_id``, ``ID_LENGTH`` lowercase hex digits); it was installed completely once it
holds ``MARKER``; ``current`` is a relative link to one of them; ``<releases_dir>/HISTORY``
lists the ids in the order they were made current, the current one last.

- :func:`release_state` and :func:`history_after_switch` decide (pure, unit-tested here);
- :func:`read` reads a node's releases; :func:`apply` marks, switches and prunes them.

Nothing here needs Ansible: tests/unit run it on a temporary tree, and vllm_fleet/release.py
loads it for the id's length.
"""

from __future__ import annotations

import os
import shutil

# The file in a release directory that says the release was installed completely; it holds
# what the release was built from.
MARKER = '.vllm-fleet-release.json'
# The node's activation history (one release id a line, the current one last), in releases_dir.
HISTORY = 'history'
ID_LENGTH = 12
_ID_CHARS = frozenset('0123456789abcdef')


def is_release_id(name):
    """Whether `name` is spelled as release ids are (the fleet's own naming)."""
    return len(name) == ID_LENGTH and set(name) <= _ID_CHARS


def release_state(dirs, complete, current, history, wanted='', keep=2):
    """What a node holds and what follows from it.

    dirs: release ids with a directory; complete: those with a completion marker;
    current: the id `current` points at ("" = none); history: ids in the order they were
    made current (oldest first); wanted: the release a converge installs ("" = none);
    keep: releases kept, the current one included.

    previous: the most recently current complete release other than the current one
    ("" = none, nothing to roll back to); prune: the directories to remove (complete
    releases beyond `keep`, in the history's order, and incomplete ones, which only a
    release id names), never the current, the wanted or the previous one.
    """
    if keep < 1:
        raise ValueError('fleet_releases_keep must be at least 1, got %s' % keep)
    # A release is a directory that holds the marker or that is named as the fleet names
    # releases (an install interrupted before its marker); anything else in the directory
    # is someone else's and is never pruned.
    present = set(d for d in dirs if d in complete or is_release_id(d))
    done = [r for r in complete if r in present]
    # Each id once, most recently current last; complete releases that were never current
    # (installed, then the run stopped before the switch) count as oldest.
    order = []
    for rid in [r for r in sorted(done) if r not in history] + list(history):
        if rid in order:
            order.remove(rid)
        order.append(rid)
    order = [r for r in order if r in done]
    previous = next((r for r in reversed(order) if r != current), '')
    # Kept: the current release and the keep-1 most recently current others (with keep 1,
    # only the current one: no rollback target is kept).
    kept = set([current, wanted]) | set([r for r in reversed(order) if r != current][:keep - 1])
    prune = sorted(r for r in present if r not in kept)
    return {
        'current': current,
        'wanted': wanted,
        'installed': order,
        'incomplete': sorted(present - set(done)),
        'wanted_complete': bool(wanted) and wanted in done,
        'previous': previous,
        'prune': prune,
        'history': [r for r in order if r in present],
    }


def history_after_switch(history, target):
    """The activation history once `target` is made current."""
    return [r for r in history if r != target] + [target]


def read(releases_dir, current):
    """(dirs, complete, current id, history) of a node: release directories (hidden ones left
    out), those holding MARKER, the base name `current` links to ("" when it is no link) and
    the history's ids. Missing things read as empty."""
    try:
        dirs = sorted(entry.name for entry in os.scandir(releases_dir)
                      if entry.is_dir(follow_symlinks=False) and not entry.name.startswith('.'))
    except FileNotFoundError:
        dirs = []
    complete = [d for d in dirs if os.path.isfile(os.path.join(releases_dir, d, MARKER))]
    target = os.readlink(current) if os.path.islink(current) else ''
    try:
        with open(os.path.join(releases_dir, HISTORY), encoding='utf-8') as handle:
            history = handle.read().split()
    except FileNotFoundError:
        history = []
    return dirs, complete, os.path.basename(target.rstrip('/')), history


class ReleaseError(Exception):
    """A request the node's releases cannot satisfy (the message says why)."""


def _write(path, text, check):
    """Write `text` to `path` (root's, 0644) unless it already holds it, through a temporary
    file renamed over it, so a reader never sees half of it. True when it (would have) changed."""
    try:
        with open(path, encoding='utf-8') as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    if not check:
        tmp = '%s.%d.tmp' % (path, os.getpid())
        with open(tmp, 'w', encoding='utf-8') as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return True


def apply(releases_dir, current, wanted='', keep=2, record=None, target='', prune=False, check=False):
    """Read the node's releases and act on them in one go; returns (changed, state).

    record: when given, the text of the wanted release's marker, written into its directory
    (which its install made) before anything is decided: the release is then complete.
    target: when given, the release `current` is made to point at (relative,
    ``releases/<id>``-style, through a link renamed over the old one, so it always names a
    whole release) and that is recorded in the history; refused (ReleaseError) when the
    target is not complete. prune: remove the directories state['prune'] names afterwards.
    check: decide and report, change nothing (a record counts as written).

    state is release_state's after the actions, with ``switched_from`` (the id current named
    before them, "" for none: the same as ``current`` when it did not move) and ``pruned``.
    """
    changed = False
    if record is not None:
        if not wanted:
            raise ReleaseError('a release record needs the wanted release')
        release_dir = os.path.join(releases_dir, wanted)
        if not os.path.isdir(release_dir) and not check:
            raise ReleaseError('release %s was never installed: %s is not a directory' % (wanted, release_dir))
        changed |= _write(os.path.join(release_dir, MARKER), record, check)
    dirs, complete, now, history = read(releases_dir, current)
    if record is not None and wanted not in complete:  # check mode: the record was not written
        dirs, complete = sorted(set(dirs) | {wanted}), sorted(set(complete) | {wanted})
    switched_from = now
    before = release_state(dirs, complete, now, history, wanted, keep)
    # The history as release_state orders it (complete releases present, each once), so a
    # pruned release leaves it with its directory.
    history = before['history']
    if target:
        if target not in complete:
            raise ReleaseError('release %s is not installed completely in %s (installed: %s)'
                               % (target, releases_dir, ', '.join(before['installed']) or 'none'))
        if now != target:
            changed = True
            if not check:
                # Relative (releases/<id>), so the releases move with their parent directory.
                link = os.path.relpath(os.path.join(releases_dir, target), os.path.dirname(current))
                tmp = '%s.%d.tmp' % (current, os.getpid())
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                os.symlink(link, tmp)
                os.replace(tmp, current)
            now = target
        history = history_after_switch(history, target)
    state = release_state(dirs, complete, now, history, wanted, keep)
    pruned = state['prune'] if prune else []
    for rid in pruned:
        changed = True
        if not check:
            shutil.rmtree(os.path.join(releases_dir, rid))
    if pruned:
        dirs = [d for d in dirs if d not in pruned]
        complete = [c for c in complete if c not in pruned]
        history = [h for h in history if h not in pruned]
        state = release_state(dirs, complete, now, history, wanted, keep)
    if target:
        changed |= _write(os.path.join(releases_dir, HISTORY), '\n'.join(history) + '\n', check)
    state['switched_from'] = switched_from
    state['pruned'] = pruned
    return changed, state
