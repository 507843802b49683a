"""The fleet's apt repository (vllm_fleet/mirror/apt.py): which packages, their dependencies, the signed
repository reprepro builds, and the list that keeps up with the roles.

The sync tests run apt against an archive of their own on 127.0.0.1 (tiny packages built with
dpkg-deb, indexed by reprepro), standing for Debian's and for a vendor's repository; one test
resolves and fetches a small package from the machine's own Debian sources, as a sync does.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook, load_module
from vllm_fleet import vendors
from vllm_fleet.mirror import apt, bom, pack, store
from vllm_fleet.mirror import sync as mirror_sync
from vllm_fleet.mirror.layout import APT_KEY, apt_source
from vllm_fleet.project import ROLES_DIR, role_dirs
from vllm_fleet.role_specs import role_default, role_options
from vllm_fleet_lab.publishers import nvidia

needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("apt-get", "dpkg-deb", "reprepro", "gpg", "gpgv")),
                                 reason="needs apt-get, dpkg-deb, reprepro and GnuPG (scripts/setup installs them)")


# ------------------------------------------------------------------ the list keeps up with the roles

def _tasks(node):
    """Every task of a task file, inside blocks too."""
    for task in node or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _role_tasks():
    """(role path, file, task) of every task of every role."""
    for role in role_dirs():
        for path in sorted((role / "tasks").glob("*.yml")):
            for task in _tasks(yaml.safe_load(path.read_text())):
                yield role.relative_to(ROLES_DIR).as_posix(), path.name, task


def _vars(role: str) -> dict:
    path = ROLES_DIR / role / "vars" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _expand(text: str, role: str, seen: set | None = None) -> str:
    """An expression with the role's internal variables (vars/main.yml) it names written out, recursively."""
    seen = set() if seen is None else seen
    out = [str(text)]
    defined = _vars(role)
    for name in re.findall(r"\b_[a-z0-9_]+\b", str(text)):
        if name in defined and name not in seen:
            seen.add(name)
            out.append(_expand(json.dumps(defined[name]), role, seen))
    return "\n".join(out)


def _literal_names(text: str) -> set[str]:
    """The package names of the list literals of an expression: ['python3-venv']."""
    names = set()
    for body in re.findall(r"\[([^\[\]]*)\]", text):
        words = re.findall(r"'([^']*)'|\"([^\"]*)\"", body)
        if words and re.fullmatch(r"\s*(['\"][a-z0-9][a-z0-9+.-]*['\"]\s*,?\s*)+", body):
            names |= {a or b for a, b in words}
    return names


def test_every_package_a_role_installs_with_apt_is_in_the_mirrors_list():
    """The mirror's list (bom.APT_SETS, the vendor contracts' apt_sets) against every `ansible.builtin.apt` task: a
    name a task lists, a role option of packages it reads (`*_packages`), the vendor contract's packages, a list
    literal of its role's vars; and every caller of blocks/apt_packages. A role that installs an apt package
    the list does not know fails here."""
    options = set(role_options())
    known_names = {s.role: set() for s in bom.APT_SETS}
    known_options = {s.role: set() for s in bom.APT_SETS}
    for row in bom.APT_SETS:
        known_names[row.role] |= set(row.names)
        known_options[row.role] |= {row.option} if row.option else set()
    contract_roles = {row.role for row in bom.APT_SETS if row.contract}
    seen_apt = 0
    for role, file, task in _role_tasks():
        args = task.get("ansible.builtin.apt")
        if not isinstance(args, dict):
            continue
        seen_apt += 1
        where = f"roles/{role}/tasks/{file}: {task.get('name')!r}"
        if "deb" in args:
            # A package file of the matrix (blocks/download checks its sha256): the sync resolves it with its host's
            # set, so what it depends on joins the repository (sync._add_package_file_depends).
            assert role == "vendors/musa_driver", f"{where} installs a .deb file the mirror's list does not know"
            continue
        name = args.get("name")
        if role == "blocks/apt_packages":
            continue  # its callers, below
        assert name is not None, f"{where}: an apt task without `name` the mirror's list cannot read"
        literal = name if isinstance(name, list) else [name]
        if all("{{" not in str(n) for n in literal):
            unknown = set(map(str, literal)) - known_names.get(role, set())
            assert not unknown, f"{where} installs {sorted(unknown)}: add them to bom.APT_SETS ({role})"
            continue
        text = _expand(json.dumps(name), role)
        read = {o for o in re.findall(r"\b[a-z][a-z0-9_]*_packages\b", text) if o in options}
        assert read, f"{where}: its packages come from no role option the mirror's list could read: {name}"
        unknown = read - known_options.get(role, set())
        assert not unknown, f"{where} installs the packages of {sorted(unknown)}: add them to bom.APT_SETS ({role})"
        if "fleet_vendor.packages" in text:
            assert role in contract_roles, f"{where} installs the vendor contract's packages: an AptSet(contract=True)"
        unknown = _literal_names(text) - known_names.get(role, set())
        assert not unknown, f"{where} installs {sorted(unknown)} (its vars): add them to bom.APT_SETS ({role})"
    assert seen_apt >= 8, "the scan found fewer apt tasks than the roles have: is it still reading them?"

    callers = {}
    for role, _file, task in _role_tasks():
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if (task.get(key) or {}).get("name") == "blocks/apt_packages":
                callers[role] = task.get("vars") or {}
    rows = {row["role"]: row for _, row in bom.vendor_apt_sets()}
    assert set(callers) == set(rows), \
        f"blocks/apt_packages is used by {sorted(callers)}, the vendor contracts' apt_sets name {sorted(rows)}"
    for role, given in callers.items():
        row = rows[role]
        assert given["apt_packages_repositories"] == f"{{{{ {row['repositories']} }}}}", role
        assert row["repositories"] in options and set(row.get("deploy_modes", [])) <= {"host", "container"}, row
        pinned = _expand(given["apt_packages_pinned"], role)
        names = row.get("names_var")
        assert f"fleet_matrix.{row['matrix']}" in pinned and (not names or names in pinned), (role, pinned)
        if names:
            assert all(isinstance(n, str) for n in _vars(role)[names]), f"{role}: {names} is a plain list"


def test_each_row_of_the_list_is_a_role_option_or_a_role_that_names_its_packages():
    for row in bom.APT_SETS:
        if row.option:
            assert row.option in role_options(), row
            assert isinstance(role_default(row.option), list), row
        if row.role != "ansible.builtin.apt":
            assert (ROLES_DIR / row.role / "tasks").is_dir(), row
            text = "\n".join(p.read_text() for p in (ROLES_DIR / row.role).rglob("*.yml"))
            for name in row.names:
                assert name in text, f"{row.role} no longer names {name}: remove it from bom.APT_SETS"
    for vendor in vendors.VENDORS:
        assert not isinstance(vendors.contract(vendor)["packages"], str), f"{vendor}'s packages: a plain list"


# ------------------------------------------------------------------ the bill

NVIDIA_REPO = {"name": "lab", "uris": ["http://127.0.0.1:9/apt/nvidia"], "suites": ["stable"], "components": ["main"],
               "trusted": True}


def _fleet(**more) -> dict:
    groups = {"fleet": ["n1", "n2"], "nvidia-nodes": ["n1"], "cpu-nodes": ["n2"], "router": ["r1"], "mirror": ["x1"]}
    groups.update(more.pop("groups", {}))
    matrix = {"python": "3.12",
              "nvidia_driver": {"branch": "570", "version": "570.195.03", "packages": ["nvidia-driver-570"],
                                "package_version": "570.195.03-0ubuntu0.22.04.1"},
              "nvidia_container_toolkit": {"package_version": "1.17.8-1"}}
    return {"n1": {"groups": groups, "fleet_accelerator": {"vendor": "nvidia"}, "fleet_matrix": matrix,
                   "nvidia_driver_apt_repositories": [NVIDIA_REPO], **more},
            "n2": {"groups": groups, "fleet_accelerator": {"vendor": "cpu"}, "fleet_matrix": {"python": "3.12"}},
            "r1": {"groups": groups, "router_packages": ["haproxy"]},
            "x1": {"groups": groups}}


def _sets(hosts) -> dict[str, bom.Item]:
    return {who.split(":")[0]: item for item in bom.bill_of_materials(hosts).of("deb") for who in item.wanted_by}


def test_each_host_gets_the_packages_its_groups_roles_install():
    sets = _sets(_fleet())
    n1, n2, r1, x1 = sets["n1"], sets["n2"], sets["r1"], sets["x1"]
    for name in ("python3-venv", "git", "git-lfs", "curl", "aria2", "nginx-light", "python3-apt"):
        assert name in n1.specs and name in n2.specs
    assert "nvidia-driver-570=570.195.03-0ubuntu0.22.04.1" in n1.specs and n1.index["repositories"] == [NVIDIA_REPO]
    assert "libnuma1" in n2.specs and "libnuma1" not in n1.specs          # the CPU contract's packages
    assert not any(s.startswith("nvidia-container") for s in n1.specs)    # host mode: no container toolkit
    assert not {"docker.io", "podman"} & set(n1.specs + n2.specs)        # ... and no container engine
    assert "prometheus-node-exporter" not in n1.index["without_recommends"]  # no monitoring host
    assert r1.specs == ["haproxy", "nginx-light", "python3-apt", "python3-venv"]   # the inventory's router_packages
    assert x1.specs == sorted(role_default("mirror_packages") + role_default("mirror_registry_packages")
                              + ["python3-apt"]) and not x1.index["repositories"]
    assert "n1: the distribution's packages (node_base_packages, " in n1.wanted_by[0]

    sets = _sets(_fleet(groups={"monitoring": ["m1"]}, fleet_deploy_mode="container") | {
        "m1": {"groups": {"monitoring": ["m1"]}}})
    assert {"nvidia-container-toolkit=1.17.8-1", "libnvidia-container1=1.17.8-1"} <= set(sets["n1"].specs)
    # The engine fleet_container_runtime names (blocks/container_image), and not the other one.
    assert "docker.io" in sets["n1"].specs and "podman" not in sets["n1"].specs
    podman = _sets(_fleet(fleet_deploy_mode="container", fleet_container_runtime="podman"))["n1"]
    assert "podman" in podman.specs and "docker.io" not in podman.specs
    assert sets["n1"].index["without_recommends"] == ["prometheus-node-exporter"]
    assert sets["m1"].index["without_recommends"] == ["prometheus", "prometheus-node-exporter"]
    # Hosts alike share one set.
    same = _fleet(groups={"fleet": ["n1", "n2", "n3"], "nvidia-nodes": ["n1", "n3"]})
    same["n3"] = dict(same["n1"])
    items = [i for i in bom.bill_of_materials(same).of("deb") if any(w.startswith("n1:") for w in i.wanted_by)]
    assert len(items) == 1 and {w.split(":")[0] for w in items[0].wanted_by} == {"n1", "n3"}


def test_without_fleet_mirror_apt_the_hosts_keep_their_own_sources_and_the_bill_has_no_packages():
    hosts = {h: {**v, "fleet_mirror_apt": False} for h, v in _fleet().items()}
    assert bom.bill_of_materials(hosts).of("deb") == []
    assert apt_source("") == {}
    source = apt_source("http://10.0.0.7:8081")
    assert source == {"uris": ["http://10.0.0.7:8081/apt"], "suites": ["bookworm"], "components": ["main", "vendor"],
                      "key_url": "http://10.0.0.7:8081/apt/vllm-fleet-mirror.asc"}
    assert apt_source("file:/srv/m")["uris"] == ["file:/srv/m/apt"]


def test_the_machines_own_sources_of_the_nodes_release_are_read(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb deb-src\nURIs: http://mirror.internal/debian\n"
        "Suites: bookworm bookworm-updates bookworm-backports\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://other/\nSuites: trixie\nComponents: main\n\n"
        "Types: deb\nURIs: http://off/\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb\nURIs: http://inline/\nSuites: bookworm-security\nComponents: main\nSigned-By:\n"
        " -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n -----END PGP PUBLIC KEY BLOCK-----\n")
    (tmp_path / "sources.list").write_text("deb [arch=amd64 signed-by=/k.gpg] http://old/debian bookworm main contrib\n"
                                           "# deb http://commented bookworm main\n")
    found = apt.machine_sources(tmp_path)
    assert found[0] == {"uris": ["http://mirror.internal/debian"], "suites": ["bookworm", "bookworm-updates"],
                        "components": ["main"], "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"}
    assert "BEGIN PGP PUBLIC KEY BLOCK" in found[1]["signed_by"] and found[1]["suites"] == ["bookworm-security"]
    assert found[2] == {"uris": ["http://old/debian"], "suites": ["bookworm"], "components": ["main", "contrib"],
                        "signed_by": "/k.gpg"}
    assert len(found) == 3
    private = apt.PrivateApt("x86_64", [], cache=tmp_path / "cache", etc=tmp_path)
    private.prepare()
    sources = (private.home / "sources.sources").read_text()
    assert "Architectures: amd64" in sources and "URIs: http://old/debian" in sources
    inline = next(private.home.glob("keys/distribution-1.asc")).read_text()
    assert inline.splitlines()[1] == ""  # deb822's "." is an empty line of the key
    assert apt.PrivateApt("x86_64", [], cache=tmp_path, etc=tmp_path / "none").distribution == list(apt.DEBIAN)


# ------------------------------------------------------------------ an archive of our own

def _deb(out: Path, work: Path, name: str, version: str = "1.0", **fields) -> Path:
    root = work / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr" / "share" / "doc" / name).mkdir(parents=True)
    (root / "usr" / "share" / "doc" / name / "README").write_text(f"{name} {version}\n")
    control = {"Package": name, "Version": version, "Architecture": "all", "Maintainer": "t <t@t.invalid>",
               "Section": "misc", "Priority": "optional", **fields, "Description": f"test package {name}"}
    (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()))
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(target)], check=True,
                   capture_output=True)
    return target


def _archive(base: Path, debs: list[Path], suite: str, component: str = "main") -> None:
    """An unsigned apt repository (the sources say it is trusted) of `debs`, by reprepro."""
    (base / "conf").mkdir(parents=True)
    (base / "conf" / "distributions").write_text(f"Codename: {suite}\nArchitectures: amd64\nComponents: {component}\n")
    for deb in debs:
        subprocess.run(["reprepro", "--basedir", str(base), "includedeb", suite, str(deb)], check=True,
                       capture_output=True)


class _Log(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, *args):
        type(self).requests.append(self.path)


#: The lab's NVIDIA repository (lab/fixtures/installers/nvidia): a vendor's, the driver at two versions.
NVIDIA = {"driver_branch": "570", "driver_packages": ["570.172.08-0ubuntu0.22.04.1", "570.195.03-0ubuntu0.22.04.1"],
          "cuda": "12.8", "container_toolkit": "1.17.8-1"}
DRIVER = "nvidia-driver-570=570.195.03-0ubuntu0.22.04.1"


@pytest.fixture
def archive(tmp_path, monkeypatch):
    """Debian's archive (tiny packages) and a vendor's repository (the lab's NVIDIA stand-ins) on 127.0.0.1;
    the sync's apt cache in tmp_path; a fresh process memo of the private apts."""
    work, web = tmp_path / "build", tmp_path / "web"
    dist = [_deb(work / "d", work, "tiny-a", Depends="tiny-b", Recommends="tiny-c"), _deb(work / "d", work, "tiny-b"),
            _deb(work / "d", work, "tiny-c"), _deb(work / "d", work, "tiny-e", Recommends="tiny-f"),
            _deb(work / "d", work, "tiny-f"), _deb(work / "d", work, "tiny-g")]
    _archive(web / "debian", dist, "bookworm")
    builder = load_module(nvidia.BUILDER, "nvidia_lab_build_for_apt")
    info = builder.build_repository(web / "nvidia", NVIDIA, arch="x86_64")
    _Log.requests = []
    handler = functools.partial(_Log, directory=str(web))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(apt, "machine_sources", lambda etc=None: [
        {"uris": [f"{url}/debian"], "suites": ["bookworm"], "components": ["main"], "trusted": True}])
    monkeypatch.setattr(apt, "_APTS", {})
    monkeypatch.setenv("VLLM_FLEET_APT_CACHE", str(tmp_path / "cache"))
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # As the lab inventory names it (lab/inventory/group_vars/nvidia-nodes/packages.yml.j2).
    repo = {"name": "vllm-fleet-lab", "uris": [f"{url}/nvidia"], "suites": [info["suite"]],
            "components": info["components"], "trusted": True}
    yield url, repo
    server.shutdown()
    server.server_close()


def _bill(*items: tuple[list[str], list[str], list[dict], str]) -> bom.Bill:
    bill = bom.Bill()
    for specs, without, repositories, who in items:
        bill.add(bom.deb_item(specs, without, "x86_64", repositories), who)
    return bill


def _node_apt(tmp: Path, mirror: Path, key: Path) -> dict:
    """A bare node's apt reading the mirror's repository only, checked with its exported key."""
    home = tmp / "node"
    (home / "lists" / "partial").mkdir(parents=True)
    (home / "status").touch()
    source = apt_source(f"file:{mirror}")
    (home / "mirror.sources").write_text(
        f"Types: deb\nURIs: {source['uris'][0]}\nSuites: {' '.join(source['suites'])}\n"
        f"Components: {' '.join(source['components'])}\nSigned-By: {key}\n")
    conf = home / "apt.conf"
    conf.write_text(f'Dir::Etc::main "/dev/null"; Dir::Etc::Parts "/dev/null";'
                    f' Dir::Etc::SourceList "{home}/mirror.sources";'
                    f' Dir::Etc::SourceParts "/dev/null"; Dir::State::Lists "{home}/lists"; Dir::State::status'
                    f' "{home}/status"; Dir::Cache "{home}"; Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";'
                    ' APT::Architecture "amd64";\n')
    return {**os.environ, "APT_CONFIG": str(conf), "LC_ALL": "C"}


@needs_tools
def test_a_sync_collects_each_set_with_its_dependencies_into_a_signed_repository_and_again_fetches_nothing(
        archive, tmp_path):
    url, repo = archive
    out = tmp_path / "mirror"
    bill = _bill((["tiny-a", DRIVER], ["tiny-e"], [repo], "n1: the distribution's packages (...)"),
                 (["tiny-b"], [], [], "r1: the distribution's packages (...)"))
    lines: list[str] = []
    checked = mirror_sync.sync(bill, out, check=True, log=lines.append)
    text = "\n".join(lines)
    assert checked.ok and not (out / "apt").exists() and not list((tmp_path / "cache" / "archives").glob("*.deb"))
    assert "tiny-a=1.0 all (main," in text and "tiny-c=1.0" in text and "tiny-e=1.0" in text, text
    assert "nvidia-driver-570=570.195.03-0ubuntu0.22.04.1 amd64 (vendor," in text and "570.172.08" not in text
    assert "tiny-f" not in text, "tiny-e is installed without its Recommends"
    assert re.search(r"deb +apt/bookworm-amd64-\w+: to fetch, [\d.]+ KB", text), text

    lines = []
    summary = mirror_sync.sync(bill, out, log=lines.append)
    assert summary.ok, (summary.failed, lines)
    assert summary.apt.startswith("apt repository apt/: 5 package(s)"), summary.apt
    dists = out / "apt" / "dists" / "bookworm"
    assert {p.name for p in dists.iterdir()} >= {"InRelease", "Release", "Release.gpg", "main", "vendor"}
    assert list((out / "apt" / "pool" / "vendor").rglob("nvidia-driver-570_570.195.03-0ubuntu0.22.04.1_amd64.deb"))
    assert list((out / "apt" / "pool" / "main").rglob("tiny-c_1.0_all.deb"))
    assert not list((out / "apt").rglob("tiny-f_*")) and not list((out / "apt").rglob("tiny-g_*"))
    # The signature, as gpgv checks it against the exported key, and as a node's apt does.
    key = out / APT_KEY
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), str(key)], check=True)
    signature = subprocess.run(["gpgv", "--keyring", str(keyring), str(dists / "InRelease")], capture_output=True)
    assert signature.returncode == 0, signature.stderr
    tampered = tmp_path / "InRelease"
    tampered.write_text((dists / "InRelease").read_text().replace("Label: vllm-fleet mirror", "Label: someone"))
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(tampered)], capture_output=True).returncode != 0
    env = _node_apt(tmp_path, out, key)
    update = subprocess.run(["apt-get", "update", "-q", "--error-on=any"], env=env, capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    install = subprocess.run(["apt-get", "install", "-s", "tiny-a", "tiny-e", DRIVER], env=env,
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    assert "Inst nvidia-driver-570 (570.195.03" in install.stdout, install.stdout
    assert store.verify(out, log=lambda m: None) == []
    manifest = json.loads((out / store.MANIFEST).read_text())
    assert manifest["items"][mirror_sync.APT_REPOSITORY]["own"] is True
    secret = out / "keys" / apt.KEY_FILE
    assert "PRIVATE KEY" in secret.read_text() and oct(secret.stat().st_mode)[-3:] == "600"
    assert oct((out / "keys").stat().st_mode)[-3:] == "700"
    # The key stays on the connected side.
    volumes = tmp_path / "volumes"
    assert pack.pack(out, volumes, 10**9, log=lambda m: None) == []
    with tarfile.open(volumes / "mirror.tar.0001") as tar:
        names = tar.getnames()
    assert "apt/vllm-fleet-mirror.asc" in names and not [n for n in names if n.startswith("keys")]

    before = len(_Log.requests)
    lines = []
    again = mirror_sync.sync(bill, out, log=lines.append)
    assert again.ok and "fetched 0 item(s), 0 B" in "\n".join(lines)
    assert len(_Log.requests) == before, "a second sync asked the archive for something"
    assert json.loads((out / store.MANIFEST).read_text()) == manifest

    # A new set: every set resolved again together, the repository built again with the new packages.
    bigger = _bill((["tiny-a", DRIVER], ["tiny-e"], [repo], "n1: ..."), (["tiny-b"], [], [], "r1: ..."),
                   (["tiny-g"], [], [], "m1: ..."))
    lines = []
    third = mirror_sync.sync(bigger, out, log=lines.append)
    assert third.ok and third.apt.startswith("apt repository apt/: 6 package(s)"), (third.failed, lines)
    assert "fetched 1 item(s)" in "\n".join(lines)
    assert list((out / "apt" / "pool" / "main").rglob("tiny-g_1.0_all.deb"))
    assert list((out / "apt" / "pool" / "vendor").rglob("nvidia-driver-570_*.deb"))
    assert store.verify(out, log=lambda m: None) == []


@needs_tools
def test_a_package_no_source_has_is_named_with_its_host_and_nothing_is_built(archive, tmp_path):
    url, repo = archive
    out = tmp_path / "mirror"
    bill = _bill((["tiny-a", "no-such-package"], [], [], "n1: the distribution's packages (node_base_packages)"))
    summary = mirror_sync.sync(bill, out, log=lambda m: None)
    assert not summary.ok
    assert "no-such-package" in summary.failed[0] and "n1: the distribution's packages" in summary.failed[0]
    assert not (out / "apt").exists()


@needs_tools
def test_a_package_file_of_the_matrix_brings_what_it_depends_on_into_the_repository(archive, tmp_path):
    """MUSA's driver is a .deb the node installs with apt (roles/vendors/musa_driver), which takes what it
    depends on from the node's apt sources: at an air-gapped site, the mirror's. The sync fetches the file
    first and resolves it with its host's set as apt does (an alternative chosen as apt chooses it); a
    bare node reading the mirror alone installs it; a second sync fetches nothing."""
    url, repo = archive
    web, work, out = tmp_path / "web", tmp_path / "build", tmp_path / "mirror"
    driver = _deb(web / "files", work, "musa-stand-in", "2.0",
                  **{"Pre-Depends": "tiny-g", "Depends": "tiny-a (>= 0.5), no-such-package | tiny-f"})
    sha = hashlib.sha256(driver.read_bytes()).hexdigest()
    bill = _bill((["tiny-e"], [], [], "n1: the distribution's packages (...)"),
                 (["tiny-b"], [], [], "r1: the distribution's packages (...)"))
    key = "artifacts/musa/musa-stand-in_2.0_all.deb"
    bill.add(bom.Item("artifact", key, sources=[f"{url}/files/{driver.name}"], sha256=sha),
             "n1: fleet_matrix.musa_driver")
    lines: list[str] = []
    assert mirror_sync.sync(bill, out, check=True, log=lines.append).ok
    assert f"artifact {key}: to fetch" in "\n".join(lines) and "once it is fetched" in "\n".join(lines)
    assert not (out / key).exists()

    lines = []
    summary = mirror_sync.sync(bill, out, log=lines.append)
    text = "\n".join(lines)
    assert summary.ok, (summary.failed, text)
    pool = {p.name.split("_")[0] for p in (out / "apt" / "pool").rglob("*.deb")}
    # tiny-a brings tiny-b and its Recommends tiny-c; tiny-e is installed without Recommends.
    assert pool == {"tiny-a", "tiny-b", "tiny-c", "tiny-e", "tiny-f", "tiny-g"}, (pool, text)
    assert "musa-stand-in" not in pool, "the file is the artifact, not a package of the repository"
    record = next(r for k, r in json.loads((out / store.MANIFEST).read_text())["items"].items()
                  if k.startswith("deb:") and "n1: the distribution's packages (...)" in r["wanted_by"])
    assert record["package_files"] == [key]
    env = _node_apt(tmp_path, out, out / APT_KEY)
    update = subprocess.run(["apt-get", "update", "-q", "--error-on=any"], env=env, capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    install = subprocess.run(["apt-get", "install", "-s", str(out / key)], env=env, capture_output=True, text=True)
    assert install.returncode == 0 and "Inst musa-stand-in" in install.stdout, install.stdout + install.stderr

    before = len(_Log.requests)
    lines = []
    assert mirror_sync.sync(bill, out, log=lines.append).ok
    assert "fetched 0 item(s), 0 B" in "\n".join(lines), lines
    assert len(_Log.requests) == before


@needs_tools
def test_a_package_file_whose_dependency_no_source_has_is_named_with_the_file(archive, tmp_path):
    """apt's message names the package the file declares (musa-stand-in), not the matrix's file: the sync's
    names the file too, and nothing is built."""
    url, _ = archive
    web, work, out = tmp_path / "web", tmp_path / "build", tmp_path / "mirror"
    driver = _deb(web / "files", work, "musa-stand-in", "2.0", Depends="no-such-package")
    bill = _bill((["tiny-e"], [], [], "n1: the distribution's packages (...)"))
    key = "artifacts/musa/musa-stand-in_2.0_all.deb"
    bill.add(bom.Item("artifact", key, sources=[f"{url}/files/{driver.name}"],
                      sha256=hashlib.sha256(driver.read_bytes()).hexdigest()), "n1: fleet_matrix.musa_driver")
    summary = mirror_sync.sync(bill, out, log=lambda m: None)
    assert not summary.ok
    (failed,) = summary.failed
    assert "musa-stand-in : Depends: no-such-package but it is not installable" in failed, failed
    assert "the matrix's package file(s) musa-stand-in_2.0_all.deb: what they depend on" in failed, failed
    assert not (out / "apt").exists()


@needs_tools
def test_the_operators_key_signs_the_repository_when_named(archive, tmp_path, monkeypatch):
    url, repo = archive
    # A short path: gpg-agent's socket is in the GnuPG home (a pytest-xdist tmp_path is too deep for one).
    home = Path(tempfile.mkdtemp(prefix="vllm-fleet-test-gpg-"))
    monkeypatch.setenv("GNUPGHOME", str(home))
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "site <site@example.invalid>", "ed25519",
                    "sign", "never"], check=True, capture_output=True)
    fingerprint = apt._fingerprint(None, "site@example.invalid")
    out = tmp_path / "mirror"
    bill = _bill((["tiny-b"], [], [], "n1: ..."))
    try:
        assert mirror_sync.sync(bill, out, log=lambda m: None).ok
        own = json.loads((out / store.MANIFEST).read_text())["items"][mirror_sync.APT_REPOSITORY]["fingerprint"]
        summary = mirror_sync.sync(bill, out, apt_key="site@example.invalid", log=lambda m: None)
        assert summary.ok and summary.apt.endswith(f"signed by {fingerprint}") and own != fingerprint
        record = json.loads((out / store.MANIFEST).read_text())["items"][mirror_sync.APT_REPOSITORY]
        assert record["fingerprint"] == fingerprint and record["own"] is False
        # Named once, it stays the key of later syncs.
        assert mirror_sync.sync(bill, out, log=lambda m: None).apt.endswith(f"signed by {fingerprint}")
        exported = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(out / APT_KEY)],
                                  capture_output=True, text=True).stdout
        assert fingerprint in exported
        with pytest.raises(apt.AptError, match="no secret key nobody@example.invalid"):
            apt.signing_key(out, "nobody@example.invalid")
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


def test_the_nodes_apt_source_and_the_mirrors_own_come_from_one_derivation():
    """roles/stages/fleet's _fleet_apt_source and the mirror role's file: source are the filter's."""
    fleet_vars = (ROLES_DIR / "stages" / "fleet" / "vars" / "main.yml").read_text()
    assert "_fleet_apt_source: \"{{ fleet_mirror_url | fleet_mirror_apt_source(fleet_mirror_apt) }}\"" in fleet_vars
    mirror_vars = (ROLES_DIR / "services" / "mirror" / "vars" / "main.yml").read_text()
    assert "('file:' ~ mirror_root) | fleet_mirror_apt_source(fleet_mirror_apt)" in mirror_vars
    packages = (ROLES_DIR / "blocks" / "apt_packages" / "vars" / "main.yml").read_text()
    assert "[] if _fleet_apt_source | default({}) else apt_packages_repositories" in packages
    for path in ROLES_DIR.rglob("*.yml"):
        assert "/apt/vllm-fleet-mirror.asc" not in path.read_text(), f"{path}: the key's place is layout.APT_KEY"


@pytest.mark.skipif(not shutil.which("apt-get"), reason="needs apt-get")
def test_debians_own_archive_gives_a_small_package_with_its_dependencies(tmp_path, monkeypatch):
    """From the machine's own sources of the nodes' release (Debian's archive, by package name): libnuma1
    and what it depends on, fetched into the cache."""
    monkeypatch.setattr(apt, "_APTS", {})
    private = apt.PrivateApt("x86_64", [], cache=tmp_path)
    try:
        packages = private.resolve(["libnuma1"], recommends=False)
    except apt.AptError as exc:
        if re.search(r"Temporary failure|Could not resolve|Failed to fetch|Connection", str(exc)):
            pytest.skip(f"Debian's archive is out of reach: {exc}")
        raise
    names = {p["name"] for p in packages}
    assert {"libnuma1", "libc6"} <= names and all(p["component"] == "main" for p in packages)
    private.download(["libnuma1"], recommends=False)
    for package in packages:
        assert private.path(package).is_file() and private.path(package).stat().st_size == package["size"]


@needs_tools
@pytest.mark.ansible
def test_the_hosts_apt_reads_the_mirror_only_previewed_in_check_mode(tmp_path):
    """roles/blocks/apt_mirror on the controller, in check mode (nothing is written): the key the controller
    reads from the mirror, the deb822 source, apt's configuration that makes it the only one; and without a
    mirror, nothing to do."""
    web = tmp_path / "web"
    key = apt.signing_key(web)
    try:
        exported = apt._gpg(key.home, "--armor", "--export", key.fingerprint).stdout
    finally:
        apt.release(key)
    (web / "apt").mkdir()
    (web / APT_KEY).write_text(exported)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Log, directory=str(web)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    book = tmp_path / "apt.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The host's apt", "ansible.builtin.include_role": {"name": "blocks/apt_mirror"},
         "vars": {"apt_mirror_source": "{{ mirror | fleet_mirror_apt_source }}"}}]}]))
    written = [Path("/etc/apt/apt.conf.d/99vllm-fleet-mirror"),
               Path("/etc/apt/sources.list.d/vllm-fleet-mirror.sources")]
    before = [p.exists() for p in written]
    try:
        common = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}", str(book),
                  "--check", "--diff"]
        proc = ansible_playbook(*common, "-e", json.dumps({"mirror": url}))
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        for want in (f"+URIs: {url}/apt", "+Suites: bookworm", "+Components: main vendor",
                     "+Signed-By: /etc/apt/keyrings/vllm-fleet-mirror.asc",
                     '+Dir::Etc::SourceList "/etc/apt/sources.list.d/vllm-fleet-mirror.sources";',
                     '+Dir::Etc::SourceParts "/dev/null";', "BEGIN PGP PUBLIC KEY BLOCK"):
            assert want in out, out
        assert "failed=0" in out and "apt-get update" not in out, out   # no refresh in check mode
        none = ansible_playbook(*common, "-e", json.dumps({"mirror": ""}))
        assert none.returncode == 0 and "changed=0" in none.stdout, none.stdout + none.stderr
        # A host of another release keeps its own sources: refused before the key is read or a file written.
        for release, runs in (('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nVERSION_CODENAME=jammy\n', "Ubuntu 22.04.4 LTS"),
                              ("NAME=Something\n", "a system without a release name in")):
            (tmp_path / "os-release").write_text(release)
            requests = len(_Log.requests)
            other = ansible_playbook(*common, "-e", json.dumps({"mirror": url, "_apt_mirror_os_release_file":
                                                                str(tmp_path / "os-release")}))
            text = " ".join((other.stdout + other.stderr).split())
            assert other.returncode == 2 and f"localhost runs {runs}" in text, text
            assert "holds the packages of bookworm only" in text and "fleet_mirror_apt: false for this host" in text
            assert len(_Log.requests) == requests, "the key was read from a mirror this host will not use"
    finally:
        server.shutdown()
        server.server_close()
    assert [p.exists() for p in written] == before, "check mode wrote apt's configuration"
