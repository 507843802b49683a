# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Pure functions behind ``library/fleet_versions.py``.

The module gathers facts on a node (a probe run by the target Python, ``git``, version
files) and everything that decides what those facts mean lives here, so it can be
unit-tested without Ansible, a node or a vLLM install:

- :func:`parse_version` and :func:`versions_match`: PEP 440 versions and the ``==``
  rule pip uses (a local label such as ``+cpu`` on the installed version is ignored
  unless the expected version has one);
- :func:`canonical_name`: PEP 503 names (``torch-npu``, ``torch_npu`` and ``Torch.NPU``
  are the same distribution);
- :data:`PROBE`: the script the target interpreter runs, once, to list the wanted
  distributions with ``importlib.metadata``; :func:`editable_location`,
  :func:`vcs_commit` and :func:`scm_commit` read its entries;
- :func:`parse_keyvalue`: ``key=value`` and ``key : value`` version files (Huawei's
  ``version.info`` and ``*_install.info``);
- :func:`python_version_matches`: the interpreter's version as a dotted prefix;
- :func:`validate_options`: the option checks the module makes before it reads anything;
- ``check_*``: one row of the result table and, when it differs, one sentence for it.

Every ``check_*`` returns ``(row, mismatch)``: ``row`` is
``{component, kind, expected, installed, ok, detail}`` and ``mismatch`` a sentence that
names the component, what was expected and what was found, or ``None``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

# ---------------------------------------------------------------------------
# PEP 440 versions
# ---------------------------------------------------------------------------
# The regular expression of PEP 440, appendix B (the PEP is in the public domain). Nodes
# run this module with the standard library only, so `packaging` is not available.
_VERSION_PATTERN = r"""
    v?
    (?:
        (?:(?P<epoch>[0-9]+)!)?                           # epoch
        (?P<release>[0-9]+(?:\.[0-9]+)*)                  # release segment
        (?P<pre>                                          # pre-release
            [-_\.]?
            (?P<pre_l>(a|b|c|rc|alpha|beta|pre|preview))
            [-_\.]?
            (?P<pre_n>[0-9]+)?
        )?
        (?P<post>                                         # post release
            (?:-(?P<post_n1>[0-9]+))
            |
            (?:
                [-_\.]?
                (?P<post_l>post|rev|r)
                [-_\.]?
                (?P<post_n2>[0-9]+)?
            )
        )?
        (?P<dev>                                          # dev release
            [-_\.]?
            (?P<dev_l>dev)
            [-_\.]?
            (?P<dev_n>[0-9]+)?
        )?
    )
    (?:\+(?P<local>[a-z0-9]+(?:[-_\.][a-z0-9]+)*))?       # local version
"""
_VERSION_RE = re.compile(r'^\s*' + _VERSION_PATTERN + r'\s*$', re.VERBOSE | re.IGNORECASE)

# PEP 440's normal spellings of the pre-release letters.
_PRE_LETTERS = {'a': 'a', 'alpha': 'a', 'b': 'b', 'beta': 'b',
                'c': 'rc', 'rc': 'rc', 'pre': 'rc', 'preview': 'rc'}


def parse_version(text):
    """Return the normalised parts of a PEP 440 version, or None when it is not one.

    The result is a dict with ``epoch`` (int), ``release`` (tuple of ints), ``pre``
    (``(letter, n)`` or None), ``post`` and ``dev`` (int or None) and ``local`` (tuple of
    lower-case strings and ints, or None), normalised as PEP 440 says: ``1.0-1`` is
    ``1.0.post1``, ``1.0RC`` is ``1.0rc0``, ``+Ubuntu.01`` is ``+ubuntu.1``.
    """
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.match(text)
    if not match:
        return None
    pre = None
    if match.group('pre_l'):
        pre = (_PRE_LETTERS[match.group('pre_l').lower()], int(match.group('pre_n') or 0))
    post = None
    if match.group('post_n1'):
        post = int(match.group('post_n1'))
    elif match.group('post_l'):
        post = int(match.group('post_n2') or 0)
    dev = int(match.group('dev_n') or 0) if match.group('dev_l') else None
    local = None
    if match.group('local'):
        local = tuple(int(part) if part.isdigit() else part.lower()
                      for part in re.split(r'[-_.]', match.group('local')))
    return {
        'epoch': int(match.group('epoch') or 0),
        'release': tuple(int(part) for part in match.group('release').split('.')),
        'pre': pre,
        'post': post,
        'dev': dev,
        'local': local,
    }


def _public_key(parsed):
    """What PEP 440 compares besides the local label; ``2.7`` and ``2.7.0`` are equal."""
    release = list(parsed['release'])
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    return parsed['epoch'], tuple(release), parsed['pre'], parsed['post'], parsed['dev']


def versions_match(installed, expected):
    """Whether ``installed`` satisfies ``==expected`` as pip understands it (PEP 440).

    - a local label on the installed version is ignored when ``expected`` has none, so
      ``2.7.1+cpu`` matches ``2.7.1`` (PyTorch's wheels carry ``+cpu``, ``+cu121``...);
    - pre-, post- and dev-releases are distinct versions: ``0.11.3.dev0+g275de3417``
      matches neither ``0.11.2`` nor ``0.11.3``, only ``0.11.3.dev0``;
    - with a local label in ``expected``, the labels must be equal too.

    A version that is not PEP 440 (``expected`` is checked before, so ``installed``)
    only matches the same text.
    """
    want = parse_version(expected)
    have = parse_version(installed)
    if want is None or have is None:
        return (installed or '').strip() == (expected or '').strip()
    if _public_key(have) != _public_key(want):
        return False
    return want['local'] is None or have['local'] == want['local']


def canonical_name(name):
    """PEP 503 name: runs of ``-``, ``_`` and ``.`` become ``-``, lower case."""
    return re.sub(r'[-_.]+', '-', name).lower()


# setuptools-scm writes the commit into the local label: 0.11.3.dev0+g275de3417.d20251210.
_SCM_COMMIT_RE = re.compile(r'^g([0-9a-f]{7,64})$')


def scm_commit(version):
    """The abbreviated commit that setuptools-scm put in a version's local label, or None."""
    parsed = parse_version(version)
    if parsed is None or parsed['local'] is None:
        return None
    for part in parsed['local']:
        match = _SCM_COMMIT_RE.match(str(part))
        if match:
            return match.group(1)
    return None


# ---------------------------------------------------------------------------
# The probe: run once by the interpreter of the vLLM environment
# ---------------------------------------------------------------------------
# It must run on whatever Python the environment has (3.8 brought importlib.metadata), so it
# stays plain. The wanted names come as arguments, already canonical. Every distribution
# of a wanted name is listed in sys.path order: the first is the one `import` and
# `importlib.metadata.version()` see, the others are shadowed copies worth reporting.
# '' (the working directory, which `python -c` puts first) is dropped so that a stray
# *.egg-info where Ansible happens to run cannot pose as an installed package.
PROBE = r'''
import json, platform, re, sys
sys.path[:] = [p for p in sys.path if p]
from importlib import metadata
wanted = set(sys.argv[1:])
found = {}
for dist in metadata.distributions():
    try:
        name = dist.metadata.get('Name')
        if not name:
            continue
        key = re.sub(r'[-_.]+', '-', name).lower()
        if key not in wanted:
            continue
        path = getattr(dist, '_path', None)
        entry = {'name': name, 'version': dist.version,
                 'location': str(dist.locate_file('')),
                 'metadata_dir': str(path) if path is not None else None,
                 'direct_url': None}
        text = dist.read_text('direct_url.json')
        if text:
            try:
                entry['direct_url'] = json.loads(text)
            except ValueError:
                pass
    except Exception:
        # A distribution whose metadata cannot be read is skipped, not fatal: the
        # others still answer, and a wanted one then reads as not installed.
        continue
    found.setdefault(key, []).append(entry)
json.dump({'python_version': platform.python_version(), 'executable': sys.executable,
           'packages': found}, sys.stdout)
'''

# Directories where installers put distributions; an *.egg-info anywhere else is a
# source checkout on sys.path, i.e. a `setup.py develop` (legacy editable) install.
_SITE_DIRS = ('site-packages', 'dist-packages')


def _basename(path):
    return path.rstrip('/').rsplit('/', 1)[-1]


def editable_location(entry):
    """The project directory of an editable install, or None.

    PEP 660 installs (``pip install -e`` with a modern build backend) record it in
    ``direct_url.json`` (``dir_info.editable``), as ``pip show`` reads it. Legacy ones
    (``setup.py develop``, as seed 001's vLLM: ``Location: /usr/local/Ascend/vllm``) leave
    ``<project>/<name>.egg-info`` on sys.path, so the project is where the metadata is.
    """
    direct = entry.get('direct_url') or {}
    if (direct.get('dir_info') or {}).get('editable'):
        url = urlsplit(direct.get('url') or '')
        if url.scheme == 'file':
            return unquote(url.path)
    metadata_dir = entry.get('metadata_dir') or ''
    location = entry.get('location') or ''
    if metadata_dir.endswith('.egg-info') and _basename(location) not in _SITE_DIRS:
        return location.rstrip('/') or None
    return None


def vcs_commit(entry):
    """The commit pip recorded for a ``pip install git+URL@rev`` install, or None."""
    vcs = (entry.get('direct_url') or {}).get('vcs_info') or {}
    if vcs.get('vcs') == 'git' and vcs.get('commit_id'):
        return vcs['commit_id']
    return None


# ---------------------------------------------------------------------------
# Version files
# ---------------------------------------------------------------------------
def parse_keyvalue(text):
    """Read a version file into a dict.

    Huawei writes two layouts: ``Version=25.2.0`` (driver, firmware, CANN components,
    ``ascend_toolkit_install.info``) and ``Ascend-cann-atb : 8.3.RC1`` (NNAL). A line is
    split at its first ``=`` or ``:``, whichever comes first; keys and values are
    stripped, a value in double or single quotes loses them, the last occurrence of a
    key wins (as the installers' own ``grep | cut`` reads them), and blank lines, ``#``
    comments and lines without a separator are skipped.
    """
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        match = re.match(r'([^=:]*)[=:](.*)$', line)
        if not match or not match.group(1).strip():
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        values[match.group(1).strip()] = value
    return values


def file_versions_match(installed, expected):
    """Version files are compared as text, ignoring case and surrounding blanks.

    Huawei's versions are not PEP 440 (``7.7.0.6.236``, ``8.3.RC1``) and its own
    documents spell the same release ``8.3.RC1`` and ``8.3.rc1``, so only case is forgiven.
    """
    return installed.strip().lower() == expected.strip().lower()


def python_version_matches(installed, expected):
    """``3.11`` matches every 3.11.x, ``3.11.2`` only 3.11.2: a prefix on dotted parts."""
    want = expected.strip().split('.')
    return installed.strip().split('.')[:len(want)] == want


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------
_COMMIT_RE = re.compile(r'^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$')
_PYTHON_VERSION_RE = re.compile(r'^[0-9]+(?:\.[0-9]+){0,2}$')
GIT_KEYS = {'commit': True, 'path': False}
FILE_KEYS = {'path': True, 'key': True, 'expected': True}
OVERLAY_KEYS = {'manifest': True, 'sha256': True}
_SHA256_RE = re.compile(r'^[0-9a-f]{64}$')


def _check_keys(option, component, value, keys, errors):
    if not isinstance(value, dict):
        errors.append('%s.%s must be a dict with %s, got %r'
                      % (option, component, ', '.join(sorted(keys)), value))
        return False
    unknown = sorted(set(value) - set(keys))
    if unknown:
        errors.append('%s.%s: unknown key(s) %s; accepted: %s'
                      % (option, component, ', '.join(unknown), ', '.join(sorted(keys))))
    for key, required in sorted(keys.items()):
        if required and key not in value:
            errors.append('%s.%s: %s is required' % (option, component, key))
    return True


def validate_options(packages, git, files, python_version, overlays=None):
    """Every problem with the options, as sentences naming the option, value and rule."""
    errors = []
    for component, spec in (overlays or {}).items():
        if not _check_keys('overlays', component, spec, OVERLAY_KEYS, errors):
            continue
        if 'sha256' in spec and not (isinstance(spec['sha256'], str) and _SHA256_RE.match(spec['sha256'])):
            errors.append('overlays.%s.sha256: %r is not 64 lowercase hex digits' % (component, spec['sha256']))
        if 'manifest' in spec and not (isinstance(spec['manifest'], str) and spec['manifest'].startswith(('/', '~'))):
            errors.append('overlays.%s.manifest must be an absolute path, got %r' % (component, spec['manifest']))
    seen = {}
    for name, expected in packages.items():
        if expected is not None and not isinstance(expected, str):
            # YAML reads 3.10 as the float 3.1: refuse rather than compare a wrong version.
            errors.append('packages.%s: give the version as a quoted string, got %r (%s)'
                          % (name, expected, type(expected).__name__))
        elif expected is not None and parse_version(expected) is None:
            errors.append('packages.%s: %r is not a PEP 440 version' % (name, expected))
        canonical = canonical_name(name)
        if canonical in seen:
            errors.append('packages.%s and packages.%s name the same distribution (%s)'
                          % (seen[canonical], name, canonical))
        seen[canonical] = name
    for component, spec in git.items():
        if not _check_keys('git', component, spec, GIT_KEYS, errors):
            continue
        commit = spec.get('commit')
        if 'commit' in spec and not (isinstance(commit, str) and _COMMIT_RE.match(commit)):
            errors.append('git.%s.commit: %r is not a full commit hash (40 or 64 hex digits)'
                          % (component, commit))
        if spec.get('path') is not None and not isinstance(spec['path'], str):
            errors.append('git.%s.path must be a string, got %r' % (component, spec['path']))
    for component, spec in files.items():
        if not _check_keys('files', component, spec, FILE_KEYS, errors):
            continue
        for key in ('path', 'key'):
            if key in spec and not (isinstance(spec[key], str) and spec[key].strip()):
                errors.append('files.%s.%s must be a non-empty string, got %r'
                              % (component, key, spec[key]))
        expected = spec.get('expected')
        if expected is not None and not isinstance(expected, str):
            errors.append('files.%s.expected: give the version as a quoted string, got %r (%s)'
                          % (component, expected, type(expected).__name__))
    if python_version is not None and not _PYTHON_VERSION_RE.match(python_version):
        errors.append('python_version: %r is not a dotted version such as 3.11 or 3.11.13'
                      % python_version)
    return errors


# ---------------------------------------------------------------------------
# Rows and mismatch sentences
# ---------------------------------------------------------------------------
def row(component, kind, expected, installed, ok, detail):
    return {'component': component, 'kind': kind, 'expected': expected,
            'installed': installed, 'ok': ok, 'detail': detail}


def _shown(expected):
    return 'any version' if expected is None else expected


def check_package(component, expected, probe):
    """Compare one distribution with what the probe found.

    ``probe`` is the probe's decoded output, or ``{'error': sentence}`` when it could
    not run (no interpreter, a broken one): then every package is a mismatch saying why.
    """
    if 'error' in probe:
        return (row(component, 'package', expected, None, False, probe['error']),
                '%s: expected %s, not checked: %s' % (component, _shown(expected), probe['error']))
    entries = probe['packages'].get(canonical_name(component)) or []
    if not entries:
        detail = 'not found by %s' % probe['executable']
        return (row(component, 'package', expected, None, False, detail),
                '%s: expected %s, not installed (%s)' % (component, _shown(expected), detail))
    first = entries[0]
    installed = first['version']
    editable = editable_location(first)
    if editable:
        detail = 'editable install from %s' % editable
    else:
        detail = 'installed in %s' % first['location']
    if len(entries) > 1:
        detail += '; shadowed copies: %s' % ', '.join(
            '%s in %s' % (other['version'], other['location']) for other in entries[1:])
    if expected is None:
        return row(component, 'package', expected, installed, True, detail), None
    if parse_version(installed) is None:
        detail += '; not a PEP 440 version, compared as text'
    if versions_match(installed, expected):
        return row(component, 'package', expected, installed, True, detail), None
    return (row(component, 'package', expected, installed, False, detail),
            '%s: expected %s, installed %s' % (component, expected, installed))


def check_python(expected, probe):
    if 'error' in probe:
        return (row('python', 'python', expected, None, False, probe['error']),
                'python: expected %s, %s' % (expected, probe['error']))
    installed = probe['python_version']
    detail = 'interpreter %s' % probe['executable']
    if python_version_matches(installed, expected):
        return row('python', 'python', expected, installed, True, detail), None
    return (row('python', 'python', expected, installed, False, detail),
            'python: expected %s, installed %s (%s)' % (expected, installed, probe['executable']))


def check_file(component, spec, read):
    """Compare one version file.

    ``read`` is ``{'text': str}``, or ``{'error': str, 'missing': bool}`` when the file
    could not be read (``missing`` when it does not exist).
    """
    path, key, expected = spec['path'], spec['key'], spec.get('expected')
    if 'error' in read:
        if read.get('missing'):
            detail = 'no %s' % path
            sentence = 'not installed (%s)' % detail
        else:
            detail = 'cannot read %s: %s' % (path, read['error'])
            sentence = detail
        return (row(component, 'file', expected, None, False, detail),
                '%s: expected %s, %s' % (component, _shown(expected), sentence))
    values = parse_keyvalue(read['text'])
    if key not in values:
        detail = 'no %s in %s' % (key, path)
        return (row(component, 'file', expected, None, False, detail),
                '%s: expected %s, %s' % (component, _shown(expected), detail))
    installed = values[key]
    detail = '%s in %s' % (key, path)
    if expected is None or file_versions_match(installed, expected):
        return row(component, 'file', expected, installed, True, detail), None
    return (row(component, 'file', expected, installed, False, detail),
            '%s: expected %s, installed %s (%s)' % (component, expected, installed, detail))


def dirty_detail(changed_files):
    """Informational: our roles rewrite GitHub URLs in build files, so dirt is expected.

    ``changed_files`` lists the modified tracked files, or is None when ``git status``
    failed; untracked files (build outputs) do not count.
    """
    if changed_files is None:
        return 'dirty state unknown (git status failed)'
    if not changed_files:
        return 'clean'
    shown = ', '.join(changed_files[:5])
    more = len(changed_files) - 5
    if more > 0:
        shown += ' and %d more' % more
    return 'dirty: %d modified (%s)' % (len(changed_files), shown)


def check_git(component, expected, found):
    """Compare one commit.

    ``found`` says where the commit was read and what came out:
    - ``{'checkout': path, 'head': sha, 'dirty': [files], 'toplevel': path}`` from
      ``git rev-parse`` in a checkout;
    - ``{'source': sentence, 'head': sha}`` from an install's metadata (``head`` may be
      an abbreviation, from a setuptools-scm version, and then matches as a prefix);
    - ``{'error': sentence}`` when there is nothing to compare.
    """
    expected_l = expected.lower()
    if 'error' in found:
        return (row(component, 'git', expected, None, False, found['error']),
                '%s commit: expected %s, %s' % (component, expected, found['error']))
    head = found['head'].lower()
    if 'checkout' in found:
        detail = 'checkout %s' % found['checkout']
        if found.get('toplevel') and found['toplevel'].rstrip('/') != found['checkout'].rstrip('/'):
            detail += ' (inside the repository %s)' % found['toplevel']
        detail += ', %s' % dirty_detail(found.get('dirty'))
        where = 'in %s' % found['checkout']
    else:
        detail = found['source']
        where = '(%s)' % found['source']
    ok = expected_l.startswith(head) if len(head) < len(expected_l) else head == expected_l
    if ok:
        return row(component, 'git', expected, found['head'], True, detail), None
    return (row(component, 'git', expected, found['head'], False, detail),
            '%s commit: expected %s, found %s %s' % (component, expected, found['head'], where))


def commit_from_install(component, probe):
    """Where to look for a component's commit when no checkout path is given.

    Returns ``{'checkout': path}`` for an editable install (its project is the checkout),
    a ``check_git`` ``found`` dict when the install's metadata names the commit, or
    ``{'error': sentence}``.
    """
    if 'error' in probe:
        return {'error': 'no path given and the installed %s could not be read: %s'
                         % (component, probe['error'])}
    entries = probe['packages'].get(canonical_name(component)) or []
    if not entries:
        return {'error': 'no path given and %s is not installed in %s'
                         % (component, probe['executable'])}
    entry = entries[0]
    location = editable_location(entry)
    if location:
        return {'checkout': location}
    commit = vcs_commit(entry)
    if commit:
        return {'source': 'installed from git, per direct_url.json of %s %s'
                          % (entry['name'], entry['version']),
                'head': commit}
    commit = scm_commit(entry['version'])
    if commit:
        return {'source': 'abbreviated, from the version %s of the installed %s'
                          % (entry['version'], entry['name']),
                'head': commit}
    return {'error': 'no path given and the installed %s %s (in %s) is neither an editable '
                     'install nor names its commit' % (entry['name'], entry['version'],
                                                       entry['location'])}


# ---------------------------------------------------------------------------
# Vendor overlays (module_utils/vllm_fleet_overlay.py)
# ---------------------------------------------------------------------------
def check_overlay(component, expected, found):
    """Compare one applied overlay with the matrix's sha256.

    ``found`` is what ``vllm_fleet_overlay.inspect`` returns for its manifest, or
    ``{'error': sentence, 'manifest': path}`` when the manifest could not be read. The
    overlay matches when its manifest records the expected artifact and every file it
    wrote still holds what it wrote.
    """
    if 'error' in found:
        return (row(component, 'overlay', expected, None, False, found['error']),
                '%s overlay: expected sha256 %s, %s' % (component, expected, found['error']))
    if not found['applied']:
        detail = 'not applied (no %s)' % found['manifest']
        return (row(component, 'overlay', expected, None, False, detail),
                '%s overlay: expected sha256 %s, %s' % (component, expected, detail))
    installed = found['sha256']
    detail = '%d file(s) of %s in %s, version %s' % (found['files'], found['target'], found['root'],
                                                     found.get('version') or 'unknown')
    problems = []
    if installed != expected:
        problems.append('applied sha256 %s' % installed)
    for key, what in (('differing', 'changed'), ('missing', 'missing')):
        paths = found.get(key) or []
        if paths:
            shown = ', '.join(paths[:5]) + (' and %d more' % (len(paths) - 5) if len(paths) > 5 else '')
            problems.append('%d file(s) %s since it was applied: %s' % (len(paths), what, shown))
    if not problems:
        return row(component, 'overlay', expected, installed, True, detail), None
    detail += '; ' + '; '.join(problems)
    return (row(component, 'overlay', expected, installed, False, detail),
            '%s overlay: expected sha256 %s, %s' % (component, expected, '; '.join(problems)))
