# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Lay vendor overlays over an installed Python package, and take them off again.

Vendor recipes patch an installed package by copying files over it (MetaX, seed 000:
a patched ``vllm/`` directory over ``site-packages/vllm`` and a patched
``code_generator.py`` over ``site-packages/triton/compiler/code_generator.py``). Done by
hand, the original files are lost. Here every overlay keeps, in its own state directory:

- ``original/<path>``: a copy (content, mode, times) of every file it replaced;
- ``manifest.json``: what it applied - the artifact's sha256 and version, the target, and
  per file its path relative to the root, ``action`` (``replaced`` or ``added``), the
  ``sha256`` it wrote and, for replaced files, the original's ``sha256``, mode and owner;
  plus the directories it had to create.

So an overlay can be checked (:func:`inspect`: does every file still hold what was
applied?), applied idempotently (:func:`apply`: nothing happens when the same artifact is
in place and intact) and undone byte for byte (:func:`remove`). A file that someone else
changed since (a ``pip install --force-reinstall``, an upgrade) is never overwritten by
an undo: it is left alone and reported, and a later :func:`apply` takes its new content
as the original.

Two kinds of overlay:

- ``directory``: a tar archive (any compression ``tarfile`` reads) whose members all lie
  under one top-level directory named like the target's last component, as made by
  ``tar czf vllm-overlay.tar.gz vllm``. Its files are copied over the target directory
  the way ``cp -r`` does: files of the same name are replaced, new ones added, files the
  archive does not have are left alone. Only regular files and directories are accepted.
- ``file``: the artifact is the file that replaces the target.

Everything here is plain Python (standard library only), so the module and the unit
tests use the same code. Errors raise :class:`OverlayError` with a sentence naming the
path and the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile

MANIFEST_NAME = 'manifest.json'
ORIGINALS_DIR = 'original'
FORMAT = 1
KINDS = ('directory', 'file')
_CHUNK = 1 << 20


class OverlayError(Exception):
    """The overlay cannot be applied, removed or read; the message says why."""


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------
def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b''):
            digest.update(chunk)
    return digest.hexdigest()


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def _safe_relpath(name, what):
    """A member or target path as a clean relative path, or OverlayError."""
    cleaned = name.replace('\\', '/')
    while cleaned.startswith('./'):
        cleaned = cleaned[2:]
    cleaned = cleaned.rstrip('/')
    parts = cleaned.split('/')
    if not cleaned or cleaned.startswith('/') or any(part in ('', '.', '..') for part in parts):
        raise OverlayError('%s %r is not a plain relative path (no leading /, no . or .. parts)'
                           % (what, name))
    return '/'.join(parts)


def _write_atomically(dest, source_stream, mode):
    """Copy ``source_stream`` into ``dest`` through a temporary file in the same
    directory (so a reader never sees half a file); return the sha256 written."""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix='.vllm-fleet-overlay-', dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, 'wb') as out:
            for chunk in iter(lambda: source_stream.read(_CHUNK), b''):
                digest.update(chunk)
                out.write(chunk)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return digest.hexdigest()


def _copy_preserving(src, dest):
    """Copy content, mode and times (and the owner, when allowed) through a temporary file."""
    fd, tmp = tempfile.mkstemp(prefix='.vllm-fleet-overlay-', dir=os.path.dirname(dest))
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        info = os.stat(src)
        try:
            os.chown(tmp, info.st_uid, info.st_gid)
        except PermissionError:
            pass
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _remove_bytecode(path):
    """Remove the ``__pycache__`` entries of a module file this overlay added."""
    directory, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    cache = os.path.join(directory, '__pycache__')
    if ext != '.py' or not os.path.isdir(cache):
        return
    for entry in os.listdir(cache):
        if entry.startswith(stem + '.') and entry.endswith('.pyc'):
            os.unlink(os.path.join(cache, entry))
    if not os.listdir(cache):
        os.rmdir(cache)


# ---------------------------------------------------------------------------
# The artifact
# ---------------------------------------------------------------------------
def _target(target):
    return _safe_relpath(target, 'target')


def iter_entries(src, kind, target):
    """Yield ``(relpath, is_dir, mode, stream_opener)`` for what the artifact lays down.

    ``relpath`` is relative to the root the overlay is applied to; ``stream_opener()``
    returns a readable binary stream (None for directories). Every member is checked
    before anything is yielded, so a bad archive changes nothing.
    """
    target = _target(target)
    if kind == 'file':
        if not os.path.isfile(src):
            raise OverlayError('overlay file %s does not exist' % src)
        yield target, False, 0o644, lambda: open(src, 'rb')
        return
    if kind != 'directory':
        raise OverlayError('overlay type %r is not one of %s' % (kind, ', '.join(KINDS)))
    parent, top = os.path.split(target)
    try:
        archive = tarfile.open(src, 'r:*')
    except (OSError, tarfile.TarError) as exc:
        raise OverlayError('overlay archive %s cannot be read: %s' % (src, exc)) from exc
    with archive:
        members = archive.getmembers()
        checked = []
        for member in members:
            name = _safe_relpath(member.name, 'archive member')
            if name.split('/')[0] != top:
                raise OverlayError('archive member %r of %s is not under %s/: a directory overlay holds '
                                   'one top-level directory named like its target (%s)'
                                   % (member.name, src, top, target))
            if not (member.isfile() or member.isdir()):
                raise OverlayError('archive member %r of %s is a link or special file; overlays hold '
                                   'regular files and directories only' % (member.name, src))
            checked.append((name, member))
        if not checked:
            raise OverlayError('overlay archive %s is empty' % src)
        for name, member in checked:
            relpath = '/'.join(filter(None, [parent, name]))
            if member.isdir():
                yield relpath, True, (member.mode & 0o7777) or 0o755, None
            else:
                yield relpath, False, (member.mode & 0o7777) or 0o644, \
                    (lambda m=member: archive.extractfile(m))


# ---------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------
def state_paths(state_dir, name):
    base = os.path.join(state_dir, name)
    return base, os.path.join(base, MANIFEST_NAME), os.path.join(base, ORIGINALS_DIR)


def load_manifest(path):
    """The manifest at ``path``, or None when there is none."""
    try:
        with open(path, encoding='utf-8') as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OverlayError('overlay manifest %s cannot be read: %s' % (path, exc)) from exc
    if (not isinstance(manifest, dict) or manifest.get('format') != FORMAT
            or not isinstance(manifest.get('files'), list)):
        raise OverlayError('%s is not an overlay manifest of format %d' % (path, FORMAT))
    return manifest


def _write_manifest(path, manifest):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix='.manifest-', dir=os.path.dirname(path))
    with os.fdopen(fd, 'w', encoding='utf-8') as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def inspect(manifest_path):
    """What an applied overlay looks like now, for checks (read only).

    Returns ``{'applied': False}`` without a manifest, else ``{'applied': True, 'name',
    'version', 'sha256', 'target', 'root', 'files': <count>, 'differing': [relpaths whose
    content is not what was applied], 'missing': [relpaths that are gone]}``.
    """
    manifest = load_manifest(manifest_path)
    if manifest is None:
        return {'applied': False}
    result = {'applied': True, 'name': manifest.get('name'), 'version': manifest.get('version'),
              'sha256': manifest.get('sha256'), 'target': manifest.get('target'),
              'root': manifest.get('root'), 'files': len(manifest['files'])}
    result.update(compare_files(manifest))
    return result


def compare_files(manifest):
    """``{'differing': [...], 'missing': [...]}``: applied files that no longer hold what was written."""
    differing, missing = [], []
    for entry in manifest['files']:
        path = os.path.join(manifest['root'], entry['path'])
        if not os.path.isfile(path):
            missing.append(entry['path'])
        elif sha256_file(path) != entry['sha256']:
            differing.append(entry['path'])
    return {'differing': differing, 'missing': missing}


def is_current(manifest, sha256, kind, target, root):
    """Whether ``manifest`` records this very artifact at this target and root, intact."""
    if manifest is None:
        return False
    if (manifest.get('sha256') != sha256 or manifest.get('type') != kind
            or manifest.get('target') != _target(target) or manifest.get('root') != root):
        return False
    state = compare_files(manifest)
    return not state['differing'] and not state['missing']


# ---------------------------------------------------------------------------
# Undo
# ---------------------------------------------------------------------------
def undo(manifest, originals):
    """Restore what ``manifest`` replaced and remove what it added.

    Returns ``(restored, removed, left)``: relpaths restored from ``originals``, relpaths
    removed, and sentences about files left alone because their content is neither what
    the overlay wrote nor the original (someone changed them since).
    """
    root = manifest['root']
    restored, removed, left = [], [], []
    for entry in reversed(manifest['files']):
        rel = entry['path']
        path = os.path.join(root, rel)
        current = sha256_file(path) if os.path.isfile(path) else None
        if entry['action'] == 'replaced':
            if current == entry.get('original_sha256'):
                continue
            if current != entry['sha256']:
                left.append('%s: %s since the overlay was applied; left as it is'
                            % (rel, 'removed' if current is None else 'changed'))
                continue
            backup = os.path.join(originals, rel)
            if not os.path.isfile(backup) or sha256_file(backup) != entry['original_sha256']:
                raise OverlayError('the saved original of %s (%s) is missing or damaged; it cannot be restored'
                                   % (rel, backup))
            _copy_preserving(backup, path)
            restored.append(rel)
        else:
            if current is None:
                continue
            if current != entry['sha256']:
                left.append('%s: changed since the overlay added it; left as it is' % rel)
                continue
            os.unlink(path)
            _remove_bytecode(path)
            removed.append(rel)
    for rel in sorted(manifest.get('created_dirs', []), key=lambda p: p.count('/'), reverse=True):
        path = os.path.join(root, rel)
        cache = os.path.join(path, '__pycache__')
        if os.path.isdir(cache) and all(name.endswith('.pyc') for name in os.listdir(cache)):
            shutil.rmtree(cache)
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            left.append('%s/: the overlay created it and it is not empty; left as it is' % rel)
    return restored, removed, left


# ---------------------------------------------------------------------------
# Apply
# ---------------------------------------------------------------------------
def _lay(src, kind, target, root, originals):
    """Copy the artifact over ``root``; return (files, created_dirs).

    On any error everything done so far is undone before the error propagates.
    """
    files, created, seen = [], [], set()
    partial = {'root': root, 'files': files, 'created_dirs': created}
    try:
        for relpath, is_dir, mode, opener in iter_entries(src, kind, target):
            dest = os.path.join(root, relpath)
            parent = os.path.dirname(dest)
            # Parents the archive does not list (or a file overlay's) are created too.
            missing_parents = []
            probe = parent
            while not os.path.isdir(probe):
                if os.path.lexists(probe):
                    raise OverlayError('%s is in the way: the overlay needs a directory there' % probe)
                missing_parents.append(probe)
                probe = os.path.dirname(probe)
            for directory in reversed(missing_parents):
                os.mkdir(directory, 0o755)
                created.append(os.path.relpath(directory, root))
            if is_dir:
                if os.path.isdir(dest):
                    continue
                if os.path.lexists(dest):
                    raise OverlayError('%s is a file, the overlay has a directory there' % dest)
                os.mkdir(dest, mode)
                os.chmod(dest, mode)
                created.append(relpath)
                continue
            if os.path.islink(dest) or (os.path.lexists(dest) and not os.path.isfile(dest)):
                raise OverlayError('%s is not a regular file; the overlay replaces regular files only' % dest)
            if relpath in seen:
                raise OverlayError('the overlay lists %s twice' % relpath)
            seen.add(relpath)
            entry = {'path': relpath}
            if os.path.isfile(dest):
                info = os.stat(dest)
                backup = os.path.join(originals, relpath)
                os.makedirs(os.path.dirname(backup), exist_ok=True)
                shutil.copy2(dest, backup)
                entry.update(action='replaced', original_sha256=sha256_file(backup),
                             original_mode='%04o' % stat.S_IMODE(info.st_mode),
                             original_owner=[info.st_uid, info.st_gid])
                # A replaced file keeps its mode and owner, as `cp` over an existing file does.
                mode = stat.S_IMODE(info.st_mode)
            else:
                entry['action'] = 'added'
            stream = opener()
            try:
                entry['sha256'] = _write_atomically(dest, stream, mode)
            finally:
                stream.close()
            if entry['action'] == 'replaced':
                try:
                    os.chown(dest, *entry['original_owner'])
                except PermissionError:
                    pass
            entry['mode'] = '%04o' % mode
            files.append(entry)
    except BaseException:
        undo(partial, originals)
        raise
    return files, created


def apply(name, src, kind, target, root, state_dir, sha256, version=None, check_mode=False):
    """Make the overlay ``name`` present; return a result dict.

    ``changed`` is False when the manifest records this very artifact (``sha256``) at this
    target and root and every file still holds what was applied. Otherwise a previous
    state of the overlay is undone first (see :func:`undo`), then the artifact is laid
    down, saving every file it replaces. ``src`` must already be verified against
    ``sha256`` by the caller; it is checked again here.
    """
    if kind not in KINDS:
        raise OverlayError('overlay type %r is not one of %s' % (kind, ', '.join(KINDS)))
    target = _target(target)
    if not os.path.isdir(root):
        raise OverlayError('the root %s does not exist (is the package installed?)' % root)
    base, manifest_path, originals = state_paths(state_dir, name)
    manifest = load_manifest(manifest_path)
    if is_current(manifest, sha256, kind, target, root):
        return {'changed': False, 'manifest': manifest_path, 'files': len(manifest['files']),
                'restored': [], 'removed': [], 'left': []}
    if check_mode:
        return {'changed': True, 'manifest': manifest_path, 'files': None,
                'restored': [], 'removed': [], 'left': []}
    if sha256_file(src) != sha256:
        raise OverlayError('%s does not have the sha256 %s of overlay %s' % (src, sha256, name))
    restored, removed, left = [], [], []
    if manifest is not None:
        if os.path.isdir(manifest['root']):
            restored, removed, left = undo(manifest, originals)
        os.unlink(manifest_path)
    if os.path.isdir(originals):
        shutil.rmtree(originals)
    os.makedirs(originals, mode=0o700)
    files, created = _lay(src, kind, target, root, originals)
    _write_manifest(manifest_path, {
        'format': FORMAT, 'name': name, 'version': version, 'sha256': sha256, 'type': kind,
        'target': target, 'root': root, 'files': files, 'created_dirs': created,
    })
    return {'changed': True, 'manifest': manifest_path, 'files': len(files),
            'restored': restored, 'removed': removed, 'left': left}


def remove(name, state_dir, check_mode=False):
    """Make the overlay ``name`` absent: restore the originals, drop its state."""
    base, manifest_path, originals = state_paths(state_dir, name)
    manifest = load_manifest(manifest_path)
    if manifest is None:
        changed = os.path.isdir(base)
        if changed and not check_mode:
            shutil.rmtree(base)
        return {'changed': changed, 'manifest': manifest_path, 'files': 0,
                'restored': [], 'removed': [], 'left': []}
    if check_mode:
        return {'changed': True, 'manifest': manifest_path, 'files': len(manifest['files']),
                'restored': [], 'removed': [], 'left': []}
    restored, removed, left = [], [], []
    if os.path.isdir(manifest['root']):
        restored, removed, left = undo(manifest, originals)
    else:
        left.append('%s: the root is gone; nothing to restore' % manifest['root'])
    shutil.rmtree(base)
    return {'changed': True, 'manifest': manifest_path, 'files': len(manifest['files']),
            'restored': restored, 'removed': removed, 'left': left}
