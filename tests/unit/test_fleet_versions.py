"""Tests of the version check: comparison rules, version files, the module end to end.

Three layers:
- the pure rules of ``module_utils/vllm_fleet_versions.py``: PEP 440 matching (checked
  against ``packaging``, the library pip itself uses), names, version files, commits;
- ``library/fleet_versions.py`` in-process against a real virtual environment built here
  from tiny wheels (no network): the seed's versions, a PEP 660 editable install of a git
  checkout, a ``setup.py develop`` style checkout like seed 001's vLLM, and an Ascend
  tree in the installers' formats;
- the same module through the ``ansible`` CLI and ``ansible-doc``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ansible.module_utils
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_BIN = Path(sys.executable).parent
MATRIX = yaml.safe_load((REPO / 'inventories' / 'example' / 'group_vars' / 'ascend-nodes'
                         / 'matrix.yml').read_text())['fleet_matrix']

# Ansible finds module_utils through ansible.cfg when it runs a module; in-process tests
# add the directory to the package path themselves.
if str(REPO / 'module_utils') not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / 'module_utils'))

from ansible.module_utils import vllm_fleet_versions as fv  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402

from tests.conftest import load_module  # noqa: E402

fleet_versions = load_module(REPO / 'library' / 'fleet_versions.py')

# What `pip show` printed on seed 001's node.
SEED_VLLM = '0.11.3.dev0+g275de3417.d20251210'
SEED_VLLM_ASCEND = '0.11.0rc1.dev449+gc9b64052e.d20251209'
ROW_KEYS = {'component', 'kind', 'expected', 'installed', 'ok', 'detail'}


# ---------------------------------------------------------------------------
# PEP 440 matching
# ---------------------------------------------------------------------------
MATCHES = [
    # installed, expected, match
    ('2.7.1+cpu', '2.7.1', True),            # torch from the CPU index (seed 001)
    ('2.7.1', '2.7.1', True),                 # torch_npu
    ('2.7.1+cu121', '2.7.1+cpu', False),      # a local label in expected must be equal
    ('2.7.1+cpu', '2.7.1+cpu', True),
    ('2.7.1', '2.7.1+cpu', False),
    ('2.7.1+CPU', '2.7.1+cpu', True),         # labels are case-insensitive
    ('2.7.0', '2.7.1', False),
    ('2.7', '2.7.0', True),                   # release segments are zero-padded
    ('2.7.0.0', '2.7', True),
    (SEED_VLLM, '0.11.2', False),             # a dev build before 0.11.2 is not 0.11.2
    (SEED_VLLM, '0.11.3', False),             # nor the release it leads to
    (SEED_VLLM, '0.11.3.dev0', True),
    (SEED_VLLM, '0.11.3dev', True),           # dev with no number is dev0
    (SEED_VLLM, '0.11.3.dev0+g275de3417.d20251210', True),
    (SEED_VLLM, '0.11.3.dev0+g275de3417', False),  # the whole label must match
    (SEED_VLLM_ASCEND, '0.11.0rc1', False),
    (SEED_VLLM_ASCEND, '0.11.0rc1.dev449', True),
    ('0.11.0rc1', '0.11.0-rc.1', True),       # normal forms
    ('0.11.0rc1', '0.11.0.RC1', True),
    ('1.0c1', '1.0rc1', True),
    ('1.0alpha2', '1.0a2', True),
    ('1.0-1', '1.0.post1', True),             # implicit post-release
    ('1.0.post1', '1.0', False),
    ('v4.57.1', '4.57.1', True),
    ('1!2.0', '2.0', False),                  # epochs
    ('4.57.1', '4.57.10', False),
    ('4.56.0', '4.57.1', False),
]


class TestVersionRules:
    @pytest.mark.parametrize('installed, expected, match', MATCHES)
    def test_versions_match(self, installed, expected, match):
        assert fv.versions_match(installed, expected) is match

    @pytest.mark.parametrize('installed, expected, match', MATCHES)
    def test_same_answer_as_packaging(self, installed, expected, match):
        """The stdlib implementation agrees with `packaging`, which pip uses for `==`."""
        specifiers = pytest.importorskip('packaging.specifiers')
        version = pytest.importorskip('packaging.version')
        spec = specifiers.Specifier('==' + expected)
        assert spec.contains(version.Version(installed), prereleases=True) is match

    def test_parse_seed_version(self):
        assert fv.parse_version(SEED_VLLM) == {
            'epoch': 0, 'release': (0, 11, 3), 'pre': None, 'post': None, 'dev': 0,
            'local': ('g275de3417', 'd20251210')}
        assert fv.parse_version('1!2.0RC-3.post.dev+Ubuntu-01') == {
            'epoch': 1, 'release': (2, 0), 'pre': ('rc', 3), 'post': 0, 'dev': 0,
            'local': ('ubuntu', 1)}

    @pytest.mark.parametrize('text', ['', '8.3.RC1.alpha003', '2.7.1-cpu-x', 'latest', None, 2.7])
    def test_not_pep440(self, text):
        assert fv.parse_version(text) is None

    def test_non_pep440_installed_compares_as_text(self):
        assert fv.versions_match('1.0-custom', '1.0') is False
        assert fv.versions_match('custom', 'custom') is True

    @pytest.mark.parametrize('name', ['torch-npu', 'torch_npu', 'Torch.NPU', 'torch__npu'])
    def test_canonical_name(self, name):
        assert fv.canonical_name(name) == 'torch-npu'

    def test_canonical_name_vllm_ascend(self):
        assert fv.canonical_name('vllm_ascend') == fv.canonical_name('vllm-ascend') == 'vllm-ascend'

    @pytest.mark.parametrize('version, commit', [
        (SEED_VLLM, '275de3417'),
        (SEED_VLLM_ASCEND, 'c9b64052e'),
        ('2.7.1+cpu', None),
        ('2.7.1', None),
        ('1.0+gfoo', None),
    ])
    def test_scm_commit(self, version, commit):
        assert fv.scm_commit(version) == commit

    @pytest.mark.parametrize('installed, expected, match', [
        ('3.11.13', '3.11', True), ('3.11.13', '3.11.13', True), ('3.11.2', '3.11.13', False),
        ('3.11.13', '3.11.1', False), ('3.1.0', '3.11', False), ('3.11.13', '3', True),
        ('3.13.0rc1', '3.13', True), ('3.10.12', '3.11', False),
    ])
    def test_python_version_prefix(self, installed, expected, match):
        assert fv.python_version_matches(installed, expected) is match


# ---------------------------------------------------------------------------
# Version files
# ---------------------------------------------------------------------------
# The installers' formats (lab/fixtures/installers/ascend/README.md).
DRIVER_VERSION_INFO = (
    'Version=25.2.0\n'
    'ascendhal_version=7.35.23\n'
    'Innerversion=V100R001C23SPC001B201\n'
    'compatible_version=[V100R001C19],[V100R001C20]\n'
    'package_version=25.2.0\n'
)
FIRMWARE_VERSION_INFO = ('Version=7.7.0.6.236\nfirmware_version=1.0\npackage_version=25.2.0\n'
                         'compatible_version_drv=[25.2.0,25.2.0.]\n')
TOOLKIT_INSTALL_INFO = (
    'package_name=Ascend-cann-toolkit\n'
    'version=8.3.RC1\n'
    'innerversion=V100R001C23SPC001B240\n'
    'arch=x86_64\n'
    'os=linux\n'
    'path=/usr/local/Ascend/ascend-toolkit/8.3.RC1/x86_64-linux\n'
)
KERNELS_VERSION_INFO = (
    'Version=8.3.0.1.240\n'
    'version_dir=8.3.RC1\n'
    'timestamp=20250930_000000000\n'
    'required_package_toolkit_version=">=7.6, <=8.3"\n'
)
NNAL_VERSION_INFO = (
    'Ascend-cann-atb : 8.3.RC1\n'
    'Ascend-cann-atb Version : 8.3.RC1.B200\n'
    'Platform : x86_64\n'
    'commit id : f36a6fbdcfd6991d8c223518d7e3bcf71ce90bc3\n'
)


class TestKeyValue:
    def test_driver(self):
        values = fv.parse_keyvalue(DRIVER_VERSION_INFO)
        assert values['Version'] == '25.2.0'
        assert values['compatible_version'] == '[V100R001C19],[V100R001C20]'
        assert len(values) == 5

    def test_keys_are_case_sensitive(self):
        values = fv.parse_keyvalue(TOOLKIT_INSTALL_INFO)
        assert values['version'] == '8.3.RC1'
        assert 'Version' not in values
        assert values['path'] == '/usr/local/Ascend/ascend-toolkit/8.3.RC1/x86_64-linux'

    def test_quotes_are_dropped(self):
        values = fv.parse_keyvalue(KERNELS_VERSION_INFO)
        assert values['required_package_toolkit_version'] == '>=7.6, <=8.3'
        assert (values['Version'], values['version_dir']) == ('8.3.0.1.240', '8.3.RC1')

    def test_colon_layout_of_nnal(self):
        assert fv.parse_keyvalue(NNAL_VERSION_INFO) == {
            'Ascend-cann-atb': '8.3.RC1',
            'Ascend-cann-atb Version': '8.3.RC1.B200',
            'Platform': 'x86_64',
            'commit id': 'f36a6fbdcfd6991d8c223518d7e3bcf71ce90bc3',
        }

    def test_comments_blanks_last_wins(self):
        text = ('# a comment\n\nnot a pair\n=novalue\nVersion=1\n  Version = 2 \n'
                'url=http://x:1/a=b\n')
        assert fv.parse_keyvalue(text) == {'Version': '2', 'url': 'http://x:1/a=b'}

    @pytest.mark.parametrize('installed, expected, match', [
        ('8.3.RC1', '8.3.RC1', True), ('8.3.rc1', '8.3.RC1', True), (' 25.2.0 ', '25.2.0', True),
        ('8.3.RC1', '8.3.RC2', False), ('25.2', '25.2.0', False),
    ])
    def test_file_versions_are_text(self, installed, expected, match):
        assert fv.file_versions_match(installed, expected) is match


# ---------------------------------------------------------------------------
# Rows, sentences and where commits come from (pure)
# ---------------------------------------------------------------------------
COMMIT = MATRIX['vllm']['commit']
PROBE_OK = {'python_version': '3.11.13', 'executable': '/venv/bin/python', 'packages': {}}


def probe_with(key, **entry):
    base = {'name': key, 'version': '1.0', 'location': '/venv/lib/python3.11/site-packages',
            'metadata_dir': '/venv/lib/python3.11/site-packages/%s-1.0.dist-info' % key,
            'direct_url': None}
    base.update(entry)
    return dict(PROBE_OK, packages={key: [base]})


class TestPureChecks:
    def test_editable_from_direct_url(self):
        entry = {'direct_url': {'url': 'file:///usr/local/Ascend/vllm%20ascend',
                                'dir_info': {'editable': True}},
                 'location': '/venv/lib/python3.11/site-packages',
                 'metadata_dir': '/venv/lib/python3.11/site-packages/x-1.dist-info'}
        assert fv.editable_location(entry) == '/usr/local/Ascend/vllm ascend'

    def test_legacy_develop_checkout_like_seed_001(self):
        entry = {'direct_url': None, 'location': '/usr/local/Ascend/vllm',
                 'metadata_dir': '/usr/local/Ascend/vllm/vllm.egg-info'}
        assert fv.editable_location(entry) == '/usr/local/Ascend/vllm'

    @pytest.mark.parametrize('entry', [
        {'location': '/usr/lib/python3/dist-packages',
         'metadata_dir': '/usr/lib/python3/dist-packages/x.egg-info'},
        {'location': '/v/lib/python3.11/site-packages',
         'metadata_dir': '/v/lib/python3.11/site-packages/x-1.dist-info'},
        {'location': '/v/site-packages', 'metadata_dir': '/v/site-packages/x.dist-info',
         'direct_url': {'url': 'file:///tmp/x.whl', 'archive_info': {}}},
    ])
    def test_not_editable(self, entry):
        assert fv.editable_location(entry) is None

    def test_commit_from_vcs_install(self):
        probe = probe_with('vllm', version='0.11.2', direct_url={
            'url': 'https://github.com/vllm-project/vllm.git',
            'vcs_info': {'vcs': 'git', 'commit_id': COMMIT}})
        found = fv.commit_from_install('vllm', probe)
        assert found == {'source': 'installed from git, per direct_url.json of vllm 0.11.2',
                         'head': COMMIT}
        row, mismatch = fv.check_git('vllm', COMMIT, found)
        assert (row['ok'], row['installed'], mismatch) == (True, COMMIT, None)

    def test_commit_from_scm_version(self):
        found = fv.commit_from_install('vllm', probe_with('vllm', version=SEED_VLLM))
        assert found['head'] == '275de3417'
        assert fv.check_git('vllm', COMMIT, found)[1] is None
        row, mismatch = fv.check_git('vllm', 'ab' * 20, found)
        assert row['ok'] is False
        assert mismatch == ('vllm commit: expected %s, found 275de3417 (abbreviated, from the '
                            'version %s of the installed vllm)' % ('ab' * 20, SEED_VLLM))

    def test_commit_cannot_be_told(self):
        found = fv.commit_from_install('vllm', probe_with('vllm', version='0.11.2'))
        assert found == {'error': 'no path given and the installed vllm 0.11.2 (in '
                                  '/venv/lib/python3.11/site-packages) is neither an editable '
                                  'install nor names its commit'}
        assert fv.commit_from_install('vllm', PROBE_OK) == {
            'error': 'no path given and vllm is not installed in /venv/bin/python'}

    def test_shadowed_copies_are_reported(self):
        probe = probe_with('torch', version='2.7.1+cpu')
        probe['packages']['torch'].append({'name': 'torch', 'version': '2.6.0',
                                           'location': '/usr/lib/python3/dist-packages'})
        row, mismatch = fv.check_package('torch', '2.7.1', probe)
        assert mismatch is None
        assert row['detail'] == ('installed in /venv/lib/python3.11/site-packages; shadowed '
                                 'copies: 2.6.0 in /usr/lib/python3/dist-packages')

    def test_dirty_detail(self):
        assert fv.dirty_detail([]) == 'clean'
        assert fv.dirty_detail(None) == 'dirty state unknown (git status failed)'
        assert fv.dirty_detail(['a', 'b', 'c', 'd', 'e', 'f', 'g']) == (
            'dirty: 7 modified (a, b, c, d, e and 2 more)')

    def test_file_rows(self):
        spec = {'path': '/x/version.info', 'key': 'Version', 'expected': '25.2.0'}
        assert fv.check_file('npu_driver', spec, {'text': 'Version=25.3.rc1\n'}) == (
            {'component': 'npu_driver', 'kind': 'file', 'expected': '25.2.0',
             'installed': '25.3.rc1', 'ok': False, 'detail': 'Version in /x/version.info'},
            'npu_driver: expected 25.2.0, installed 25.3.rc1 (Version in /x/version.info)')
        assert fv.check_file('npu_driver', spec, {'text': 'version=25.2.0\n'})[1] == (
            'npu_driver: expected 25.2.0, no Version in /x/version.info')
        assert fv.check_file('npu_driver', spec, {'error': 'Permission denied'})[1] == (
            'npu_driver: expected 25.2.0, cannot read /x/version.info: Permission denied')
        any_version = dict(spec, expected=None)
        assert fv.check_file('npu_driver', any_version, {'text': 'Version=9\n'})[0]['ok'] is True


class TestValidation:
    def test_good_options(self):
        assert fv.validate_options({'torch': '2.7.1', 'vllm': None},
                                   {'vllm': {'commit': COMMIT, 'path': '/src/vllm'}},
                                   {'d': {'path': '/p', 'key': 'Version', 'expected': None}},
                                   '3.11') == []

    def test_every_problem_is_named(self):
        errors = fv.validate_options(
            {'python_x': 3.1, 'torch_npu': 'latest', 'torch-npu': '2.7.1'},
            {'vllm': {'commit': '275de34'}, 'vllm_ascend': {'path': '/x', 'branch': 'main'},
             'other': 'abc'},
            {'npu_driver': {'path': '/d/version.info', 'expected': 25.2}},
            '3.11.x')
        assert errors == [
            'packages.python_x: give the version as a quoted string, got 3.1 (float)',
            "packages.torch_npu: 'latest' is not a PEP 440 version",
            'packages.torch_npu and packages.torch-npu name the same distribution (torch-npu)',
            "git.vllm.commit: '275de34' is not a full commit hash (40 or 64 hex digits)",
            'git.vllm_ascend: unknown key(s) branch; accepted: commit, path',
            'git.vllm_ascend: commit is required',
            "git.other must be a dict with commit, path, got 'abc'",
            'files.npu_driver: key is required',
            'files.npu_driver.expected: give the version as a quoted string, got 25.2 (float)',
            "python_version: '3.11.x' is not a dotted version such as 3.11 or 3.11.13",
        ]


# ---------------------------------------------------------------------------
# A real environment: tiny wheels, an editable git checkout, a develop-style checkout
# ---------------------------------------------------------------------------
GIT_ENV = {'GIT_AUTHOR_NAME': 'fleet', 'GIT_AUTHOR_EMAIL': 'fleet@example.invalid',
           'GIT_COMMITTER_NAME': 'fleet', 'GIT_COMMITTER_EMAIL': 'fleet@example.invalid',
           'GIT_CONFIG_GLOBAL': os.devnull, 'GIT_CONFIG_NOSYSTEM': '1'}

# A minimal PEP 517/660 backend, so that `pip install -e` runs for real without the
# network and without setuptools or wheel in the environment.
BACKEND = r'''
import base64, hashlib, os, zipfile

NAME, VERSION = "vllm_ascend", "0.11.0rc1.dev449+gc9b64052e"


def _wheel(directory, files):
    dist_info = "%s-%s.dist-info" % (NAME, VERSION)
    files = dict(files)
    files[dist_info + "/METADATA"] = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
                                      % (NAME, VERSION))
    files[dist_info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: fleet-tests\n"
                                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (path, digest.decode(), len(text.encode())))
    files[dist_info + "/RECORD"] = "\n".join(record + [dist_info + "/RECORD,,"]) + "\n"
    name = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"__editable__.%s.pth" % NAME: os.path.abspath(".") + "\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"vllm_ascend/__init__.py": ""})
'''
PYPROJECT = '''[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "vllm_ascend"
version = "0.11.0rc1.dev449+gc9b64052e"
'''


def build_wheel(directory, name, version):
    """A wheel holding one empty module, as pip expects it (METADATA, WHEEL, RECORD)."""
    dist = name.replace('-', '_')
    dist_info = '%s-%s.dist-info' % (dist, version)
    files = {
        '%s/__init__.py' % dist: '',
        dist_info + '/METADATA': 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version),
        dist_info + '/WHEEL': ('Wheel-Version: 1.0\nGenerator: fleet-tests\nRoot-Is-Purelib: true\n'
                               'Tag: py3-none-any\n'),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=')
        record.append('%s,sha256=%s,%d' % (path, digest.decode(), len(text.encode())))
    files[dist_info + '/RECORD'] = '\n'.join(record + [dist_info + '/RECORD,,']) + '\n'
    path = directory / ('%s-%s-py3-none-any.whl' % (dist, version))
    with zipfile.ZipFile(path, 'w') as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def git(path, *args):
    return subprocess.run(['git', '-C', str(path), *args], env=dict(os.environ, **GIT_ENV),
                          capture_output=True, text=True, check=True).stdout.strip()


def make_repo(path, files):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, 'init', '-q')
    git(path, 'add', '.')
    git(path, 'commit', '-q', '-m', 'stand-in')
    return git(path, 'rev-parse', 'HEAD')


# The node's Python environment, and what the matrix of this test expects of it.
INSTALLED = {'torch': '2.7.1+cpu', 'torch_npu': '2.7.1', 'transformers': '4.56.0',
             'openai-harmony': '0.0.8'}


class Env:
    def __init__(self, root):
        self.root = root
        self.python = str(root / 'venv' / 'bin' / 'python')
        self.site = next((root / 'venv' / 'lib').glob('python3*/site-packages'))


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp('node')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(root / 'venv')], check=True)
    node = Env(root)
    wheels = root / 'wheels'
    wheels.mkdir()
    paths = [str(build_wheel(wheels, name, version)) for name, version in INSTALLED.items()]

    # vllm-ascend: `pip install -e` of a git checkout (PEP 660, direct_url.json).
    node.ascend_src = root / 'src' / 'vllm-ascend'
    node.ascend_head = make_repo(node.ascend_src, {'pyproject.toml': PYPROJECT,
                                                   'backend.py': BACKEND,
                                                   '.gitignore': '__pycache__/\n'})
    # The host's pip drives the venv's interpreter (--python), so the venv needs no pip.
    subprocess.run([sys.executable, '-m', 'pip', '--python', node.python, 'install', '-q',
                    '--no-index', '--no-deps', '--disable-pip-version-check', *paths,
                    '-e', str(node.ascend_src)], check=True, capture_output=True)

    # vllm: a checkout on sys.path with its *.egg-info inside, as `setup.py develop` leaves
    # it (seed 001: `Location: /usr/local/Ascend/vllm`, no "Editable project location").
    node.vllm_src = root / 'src' / 'vllm'
    node.vllm_head = make_repo(node.vllm_src, {'setup.py': 'URL = "https://github.com/x"\n',
                                               '.gitignore': '*.egg-info/\n'})
    egg_info = node.vllm_src / 'vllm.egg-info'
    egg_info.mkdir()
    (egg_info / 'PKG-INFO').write_text('Metadata-Version: 2.1\nName: vllm\nVersion: %s\n'
                                       % SEED_VLLM)
    (node.site / 'easy-install.pth').write_text(str(node.vllm_src) + '\n')
    return node


def run_module(args, capsys):
    """Run fleet_versions in-process; return (exit code, result dict)."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            fleet_versions.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def matching_args(node):
    """Options under which the environment is exactly as expected."""
    return {
        'python': node.python,
        'python_version': '3.%d' % sys.version_info.minor,
        'packages': {'torch': MATRIX['torch'], 'torch-npu': MATRIX['torch_npu'],
                     'transformers': '4.56.0', 'openai_harmony': MATRIX['openai_harmony'],
                     'vllm': None, 'vllm_ascend': None},
        'git': {'vllm': {'commit': node.vllm_head},
                'vllm_ascend': {'commit': node.ascend_head, 'path': str(node.ascend_src)}},
    }


class TestEnvironment:
    def test_pip_sees_the_same_installs(self, env):
        """The fixtures are what pip reports on a real node, not what the module assumes."""
        out = subprocess.run([sys.executable, '-m', 'pip', '--python', env.python, 'show',
                              'vllm', 'vllm-ascend', 'torch'],
                             capture_output=True, text=True, check=True).stdout
        blocks = [dict(line.split(': ', 1) for line in block.splitlines() if ': ' in line)
                  for block in out.split('\n---\n')]
        assert [(b['Name'], b['Version'], b['Location']) for b in blocks] == [
            ('vllm', SEED_VLLM, str(env.vllm_src)),
            ('vllm_ascend', '0.11.0rc1.dev449+gc9b64052e', str(env.site)),
            ('torch', '2.7.1+cpu', str(env.site))]
        assert blocks[1]['Editable project location'] == str(env.ascend_src)


class TestModule:
    def test_it_says_whether_the_interpreter_was_found(self, env, tmp_path, capsys):
        """Install roles tell a missing environment from one with other versions by this."""
        code, result = run_module({'python': env.python, 'packages': {'torch': '2.7.1'}}, capsys)
        assert code == 0 and result['interpreter']['found'] is True
        assert result['interpreter']['version'] == '%d.%d.%d' % sys.version_info[:3]
        missing = str(tmp_path / 'no-venv' / 'bin' / 'python')
        code, result = run_module({'python': missing, 'packages': {'torch': '2.7.1'},
                                   'fail_on_mismatch': False}, capsys)
        assert code == 0
        assert result['interpreter'] == {'found': False, 'error': 'python interpreter %s not found' % missing,
                                         'executable': None, 'version': None}
        code, result = run_module({'files': {'x': {'path': str(tmp_path / 'v'), 'key': 'V', 'expected': '1'}},
                                   'fail_on_mismatch': False}, capsys)
        assert result['interpreter'] is None

    def test_everything_matches(self, env, capsys):
        code, result = run_module(matching_args(env), capsys)
        assert code == 0, result
        assert result['changed'] is False
        assert result['mismatches'] == []
        assert result['msg'] == '9 components match the expected versions'
        site = 'installed in %s' % env.site
        minor = '3.%d' % sys.version_info.minor
        assert result['versions'] == [
            {'component': 'python', 'kind': 'python', 'expected': minor,
             'installed': '%d.%d.%d' % sys.version_info[:3], 'ok': True,
             'detail': 'interpreter %s' % env.python},
            {'component': 'torch', 'kind': 'package', 'expected': '2.7.1',
             'installed': '2.7.1+cpu', 'ok': True, 'detail': site},
            {'component': 'torch-npu', 'kind': 'package', 'expected': '2.7.1',
             'installed': '2.7.1', 'ok': True, 'detail': site},
            {'component': 'transformers', 'kind': 'package', 'expected': '4.56.0',
             'installed': '4.56.0', 'ok': True, 'detail': site},
            {'component': 'openai_harmony', 'kind': 'package', 'expected': '0.0.8',
             'installed': '0.0.8', 'ok': True, 'detail': site},
            {'component': 'vllm', 'kind': 'package', 'expected': None, 'installed': SEED_VLLM,
             'ok': True, 'detail': 'editable install from %s' % env.vllm_src},
            {'component': 'vllm_ascend', 'kind': 'package', 'expected': None,
             'installed': '0.11.0rc1.dev449+gc9b64052e', 'ok': True,
             'detail': 'editable install from %s' % env.ascend_src},
            {'component': 'vllm', 'kind': 'git', 'expected': env.vllm_head,
             'installed': env.vllm_head, 'ok': True, 'detail': 'checkout %s, clean' % env.vllm_src},
            {'component': 'vllm_ascend', 'kind': 'git', 'expected': env.ascend_head,
             'installed': env.ascend_head, 'ok': True,
             'detail': 'checkout %s, clean' % env.ascend_src},
        ]

    def test_every_mismatch_is_listed(self, env, capsys):
        args = matching_args(env)
        args['packages'].update({'transformers': MATRIX['transformers'], 'evalscope': '1.2.0'})
        args['git']['vllm']['commit'] = COMMIT
        args['python_version'] = '3.1'
        code, result = run_module(args, capsys)
        expected = [
            'python: expected 3.1, installed %d.%d.%d (%s)' % (*sys.version_info[:3], env.python),
            'transformers: expected 4.57.1, installed 4.56.0',
            'evalscope: expected 1.2.0, not installed (not found by %s)' % env.python,
            'vllm commit: expected %s, found %s in %s' % (COMMIT, env.vllm_head, env.vllm_src),
        ]
        assert code == 1
        assert result['mismatches'] == expected
        assert result['msg'] == ('4 of 10 components differ from the expected versions:\n'
                                 + '\n'.join(expected))
        assert [(r['component'], r['kind'], r['ok']) for r in result['versions']] == [
            ('python', 'python', False), ('torch', 'package', True),
            ('torch-npu', 'package', True), ('transformers', 'package', False),
            ('openai_harmony', 'package', True), ('vllm', 'package', True),
            ('vllm_ascend', 'package', True), ('evalscope', 'package', False),
            ('vllm', 'git', False), ('vllm_ascend', 'git', True)]
        evalscope = result['versions'][7]
        assert (evalscope['expected'], evalscope['installed']) == ('1.2.0', None)

    def test_fail_on_mismatch_false(self, env, capsys):
        args = dict(matching_args(env), fail_on_mismatch=False)
        args['packages'] = {'transformers': MATRIX['transformers'], 'torch': '2.7.1'}
        code, result = run_module(args, capsys)
        assert code == 0
        assert result['changed'] is False
        assert result['msg'] == '1 of 5 components differ from the expected versions'
        assert result['mismatches'] == ['transformers: expected 4.57.1, installed 4.56.0']
        assert [r['ok'] for r in result['versions']] == [True, False, True, True, True]

    def test_check_mode_reads_the_same_and_writes_nothing(self, env, capsys):
        """Check mode changes nothing in the answer, and git does not rewrite the index."""
        setup = env.vllm_src / 'setup.py'
        original = setup.read_text()
        index = env.vllm_src / '.git' / 'index'
        try:
            # What the roles do to build files: a dirty tree is reported, never a mismatch.
            setup.write_text(original.replace('https://github.com/', 'https://mirror.example/'))
            # A tracked file with a new mtime and the same content: a plain `git status`
            # would rewrite the index to refresh its stat cache.
            ignore = env.vllm_src / '.gitignore'
            os.utime(ignore, ns=(ignore.stat().st_atime_ns, ignore.stat().st_mtime_ns + 10**10))
            before = (index.read_bytes(), index.stat().st_mtime_ns)
            args = matching_args(env)
            code, normal = run_module(args, capsys)
            code_check, checked = run_module(dict(args, _ansible_check_mode=True), capsys)
            assert (index.read_bytes(), index.stat().st_mtime_ns) == before
        finally:
            setup.write_text(original)
        assert code == code_check == 0
        assert checked == normal
        row = [r for r in checked['versions'] if (r['component'], r['kind']) == ('vllm', 'git')][0]
        assert row['ok'] is True
        assert row['detail'] == 'checkout %s, dirty: 1 modified (setup.py)' % env.vllm_src

    def test_missing_interpreter(self, env, tmp_path, capsys):
        missing = str(tmp_path / 'nowhere' / 'bin' / 'python')
        args = matching_args(env)
        args['python'] = missing
        args['packages'] = {'torch': '2.7.1', 'vllm': None}
        code, result = run_module(args, capsys)
        why = 'python interpreter %s not found' % missing
        assert code == 1
        assert result['mismatches'] == [
            'python: expected 3.%d, %s' % (sys.version_info.minor, why),
            'torch: expected 2.7.1, not checked: %s' % why,
            'vllm: expected any version, not checked: %s' % why,
            'vllm commit: expected %s, no path given and the installed vllm could not be '
            'read: %s' % (env.vllm_head, why),
        ]
        # The checkout given by path does not need the interpreter.
        assert result['versions'][-1]['ok'] is True

    def test_working_directory_is_not_searched(self, env, tmp_path, monkeypatch, capsys):
        """`python -c` puts the working directory on sys.path: a stray egg-info is no install."""
        stray = tmp_path / 'evalscope.egg-info'
        stray.mkdir()
        (stray / 'PKG-INFO').write_text('Metadata-Version: 2.1\nName: evalscope\nVersion: 1.2.0\n')
        monkeypatch.chdir(tmp_path)
        args = {'python': env.python, 'packages': {'evalscope': '1.2.0'}}
        code, result = run_module(args, capsys)
        assert code == 1
        assert result['mismatches'] == [
            'evalscope: expected 1.2.0, not installed (not found by %s)' % env.python]

    def test_reason_of_a_failed_command(self):
        dubious = ("fatal: detected dubious ownership in repository at '/src/vllm'\n"
                   "To add an exception for this directory, call:\n\n"
                   "\tgit config --global --add safe.directory /src/vllm\n")
        assert fleet_versions.reason(dubious) == (
            "fatal: detected dubious ownership in repository at '/src/vllm'")
        traceback = ('Traceback (most recent call last):\n  File "<string>", line 4\n'
                     'ImportError: cannot import name metadata\n')
        assert fleet_versions.reason(traceback) == 'ImportError: cannot import name metadata'
        assert fleet_versions.reason('') == ''

    def test_broken_interpreter(self, env, tmp_path, capsys):
        fake = tmp_path / 'python'
        fake.write_text('#!/bin/sh\n'
                        'echo "ModuleNotFoundError: No module named importlib.metadata" >&2\n'
                        'exit 1\n')
        fake.chmod(0o755)
        code, result = run_module({'python': str(fake), 'packages': {'torch': '2.7.1'}}, capsys)
        assert code == 1
        assert result['mismatches'] == [
            'torch: expected 2.7.1, not checked: %s could not list its packages: '
            'ModuleNotFoundError: No module named importlib.metadata' % fake]

    def test_checkouts_that_are_not_there(self, env, tmp_path, capsys):
        plain = tmp_path / 'plain'
        plain.mkdir()
        args = {'git': {'vllm': {'commit': COMMIT, 'path': str(tmp_path / 'absent')},
                        'vllm_ascend': {'commit': COMMIT, 'path': str(plain)}},
                'fail_on_mismatch': False}
        code, result = run_module(args, capsys)
        assert code == 0
        first, second = result['mismatches']
        assert first == 'vllm commit: expected %s, not checked out (no directory %s)' % (
            COMMIT, tmp_path / 'absent')
        assert second.startswith('vllm_ascend commit: expected %s, %s is not a readable git '
                                 'checkout: fatal: not a git repository' % (COMMIT, plain))

    def test_ascend_version_files(self, tmp_path, capsys):
        ascend = tmp_path / 'Ascend'
        files = {
            'driver/version.info': DRIVER_VERSION_INFO,
            'firmware/version.info': FIRMWARE_VERSION_INFO,
            'ascend-toolkit/8.3.RC1/x86_64-linux/ascend_toolkit_install.info': TOOLKIT_INSTALL_INFO,
            'ascend-toolkit/8.3.RC1/opp_kernel/version.info': KERNELS_VERSION_INFO,
            'nnal/atb/8.3.RC1/version.info': NNAL_VERSION_INFO,
        }
        for name, text in files.items():
            (ascend / name).parent.mkdir(parents=True, exist_ok=True)
            (ascend / name).write_text(text)
        (ascend / 'ascend-toolkit' / 'latest').symlink_to('8.3.RC1')
        (ascend / 'nnal' / 'atb' / 'latest').symlink_to('8.3.RC1')
        spec = {
            'npu_driver': ('driver/version.info', 'Version'),
            'npu_firmware': ('firmware/version.info', 'Version'),
            'cann_toolkit': ('ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info',
                             'version'),
            'cann_kernels': ('ascend-toolkit/8.3.RC1/opp_kernel/version.info', 'version_dir'),
            'cann_nnal': ('nnal/atb/latest/version.info', 'Ascend-cann-atb'),
        }
        args = {'files': {name: {'path': str(ascend / path), 'key': key,
                                 'expected': MATRIX[name]['version']}
                          for name, (path, key) in spec.items()}}
        code, result = run_module(args, capsys)
        assert code == 0, result
        assert [(r['component'], r['installed'], r['ok']) for r in result['versions']] == [
            ('npu_driver', '25.2.0', True), ('npu_firmware', '7.7.0.6.236', True),
            ('cann_toolkit', '8.3.RC1', True), ('cann_kernels', '8.3.RC1', True),
            ('cann_nnal', '8.3.RC1', True)]
        assert result['versions'][4]['detail'] == 'Ascend-cann-atb in %s' % (
            ascend / 'nnal/atb/latest/version.info')

        # A newer driver, and a toolkit that was never installed for this architecture.
        newer = DRIVER_VERSION_INFO.replace('25.2.0', '25.3.rc1')
        (ascend / 'driver/version.info').write_text(newer)
        args['files']['cann_toolkit']['path'] = str(
            ascend / 'ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info')
        code, result = run_module(args, capsys)
        assert code == 1
        assert result['mismatches'] == [
            'npu_driver: expected 25.2.0, installed 25.3.rc1 (Version in %s)'
            % (ascend / 'driver/version.info'),
            'cann_toolkit: expected 8.3.RC1, not installed (no %s)'
            % (ascend / 'ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info'),
        ]

    @pytest.mark.parametrize('args, message', [
        ({}, 'nothing to check: give packages, git, files, overlays or python_version'),
        ({'packages': {'torch': 2.7}},
         'invalid options:\npackages.torch: give the version as a quoted string, got 2.7 (float)'),
        ({'git': {'vllm': {'commit': 'main'}}},
         "invalid options:\n"
         "git.vllm.commit: 'main' is not a full commit hash (40 or 64 hex digits)"),
    ])
    def test_invalid_options_fail_before_reading(self, args, message, capsys):
        code, result = run_module(args, capsys)
        assert code == 1
        assert result['msg'] == message
        assert 'versions' not in result


# ---------------------------------------------------------------------------
# Through Ansible itself: module_utils from ansible.cfg, check mode, documentation
# ---------------------------------------------------------------------------
@pytest.mark.ansible
def test_ad_hoc_run_through_ansible_in_check_mode(env):
    args = matching_args(env)
    args['packages']['transformers'] = MATRIX['transformers']
    proc = subprocess.run(
        [str(ANSIBLE_BIN / 'ansible'), 'localhost', '-i', 'localhost,', '-c', 'local', '--check',
         '-e', 'ansible_python_interpreter=%s' % sys.executable,
         '-m', 'fleet_versions', '-a', json.dumps(args)],
        cwd=REPO, env=dict(os.environ, LC_ALL='C.UTF-8'),
        capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # ansible-core 2.19 prints its own "[ERROR]: Task failed" summary before the result.
    result = json.loads(proc.stdout.split('localhost | FAILED! => ', 1)[1])
    assert result['mismatches'] == ['transformers: expected 4.57.1, installed 4.56.0']
    assert result['msg'] == ('1 of 9 components differ from the expected versions:\n'
                             'transformers: expected 4.57.1, installed 4.56.0')
    assert len(result['versions']) == 9
    assert result['changed'] is False


@pytest.mark.ansible
def test_documentation_matches_argument_spec():
    proc = subprocess.run([str(ANSIBLE_BIN / 'ansible-doc'), '-M', str(REPO / 'library'),
                           '-j', 'fleet_versions'],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(proc.stdout)['fleet_versions']
    options = doc['doc']['options']
    spec = fleet_versions.ARGUMENT_SPEC
    assert set(options) == set(spec)
    for name, option in options.items():
        assert option['type'] == spec[name]['type'], name
        assert option.get('default') == spec[name].get('default'), name
        assert option.get('required', False) == spec[name].get('required', False), name
    assert (options['packages']['default'], options['fail_on_mismatch']['default']) == ({}, True)
    assert doc['examples'].strip()
    assert set(doc['return']) == {'versions', 'mismatches', 'msg', 'interpreter'}
    assert set(doc['return']['versions']['contains']) == ROW_KEYS
    assert doc['doc']['attributes']['check_mode']['support'] == 'full'
