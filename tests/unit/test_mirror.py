"""`vllm-fleet mirror sync|verify|pack|unpack` against an "internet" on 127.0.0.1.

The upstreams are the lab's own web server (lab/fixtures/services/labweb.py) over a temporary root:
an artifact server, a git server and a GitHub proxy (dumb HTTP), a PEP 503 index of small wheels
built here, and the lab's model hub (Hugging Face protocol) holding one tiny model. The inventory is
inventories/example cut down to its Ascend node, pointed at those upstreams: the sync reads it as a
user's would, through the CLI, and every child process (pip, git, the hub client) has a proxy that
records any request not for 127.0.0.1, which fails the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import OffLoopbackTrap, start_labweb
from vllm_fleet.mirror import bom, fetch, store
from vllm_fleet.mirror import sync as mirror_sync
from vllm_fleet_lab import www

# The sync validates the inventory with playbooks/validate.yml, as any run does.
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
LABWEB = REPO / "lab" / "fixtures" / "services" / "labweb.py"
CLI = Path(sys.executable).parent / "vllm-fleet"
ARTIFACTS = ["npu_driver", "npu_firmware", "cann_toolkit", "cann_kernels", "cann_nnal"]
#: What the Ascend node pins (its contract) and what its hub client needs, as small wheels;
#: transformers requires tiny-tokens, which the resolution must bring in.
WHEELS = {"torch": "2.7.1", "torch_npu": "2.7.1", "transformers": "4.57.1", "openai_harmony": "0.0.8",
          "huggingface_hub": "2.4.0", "ray": "2.49.2", "tiny_tokens": "1.0"}


PYPROJECT = ('[build-system]\nrequires = ["tiny_tokens==1.0"]\nbuild-backend = "setuptools.build_meta"\n'
             '[project]\nname = "vllm"\ndependencies = ["vllm-dep==1.0+lab"]\n')


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(out: Path, dist: str, version: str, requires: list[str]) -> None:
    name = f"{dist}-{version}"
    meta = "".join([f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    wheel = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {f"{dist}/__init__.py": b"", f"{name}.dist-info/METADATA": meta.encode(), f"{name}.dist-info/WHEEL": wheel}
    record = "".join(f"{k},sha256={sha256(v)},{len(v)}\n" for k, v in files.items()) + f"{name}.dist-info/RECORD,,\n"
    files[f"{name}.dist-info/RECORD"] = record.encode()
    with zipfile.ZipFile(out / f"{name}-py3-none-any.whl", "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)


def _git(*args, cwd=None):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _repo(bare: Path, work: Path, files: dict[str, str], tag: str | None = None) -> str:
    work.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "pinned", cwd=work)
    if tag:
        _git("tag", tag, cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    _git("clone", "-q", "--bare", str(work), str(bare))
    _git("update-server-info", cwd=bare)
    return commit


_Trap = OffLoopbackTrap


class Site:
    def __init__(self, tmp: Path, url: str, inventory: Path, trap: _Trap, artifacts: dict, log: Path, faults: Path,
                 commits: dict):
        self.tmp, self.url, self.inventory, self.trap, self.artifacts = tmp, url, inventory, trap, artifacts
        self.log, self.faults, self.commits = log, faults, commits

    def env(self) -> dict:
        trap = f"http://127.0.0.1:{self.trap.server_address[1]}"
        home = self.tmp / "home"
        home.mkdir(exist_ok=True)
        return {**os.environ, "HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "HF_HOME": str(self.tmp / "hf"),
                "MODELSCOPE_CACHE": str(self.tmp / "ms"), "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
                **{k: trap for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")},
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(CLI), "mirror", *args], env=self.env(), capture_output=True, text=True,
                              timeout=300, check=False)
        assert self.trap.hits == [], f"traffic off the loopback: {self.trap.hits}"
        return proc

    def requests(self) -> int:
        return len(self.log.read_text().splitlines())


def _inventory(dest: Path, url: str, artifacts: dict, commits: dict) -> None:
    shutil.copytree(REPO / "inventories" / "example", dest)
    for group in ("metax-nodes", "musa-nodes", "nvidia-nodes", "cpu-nodes"):
        shutil.rmtree(dest / "group_vars" / group)
    hosts = yaml.safe_load((dest / "hosts.yml").read_text())
    fleet = hosts["all"]["children"]["fleet"]["children"]
    hosts["all"]["children"]["fleet"]["children"] = {"ascend-nodes": fleet["ascend-nodes"]}
    # Never reached: the sync contacts no node.
    fleet["ascend-nodes"]["hosts"]["ascend-01"] = {"ansible_host": "127.0.0.1", "ansible_port": 9}
    (dest / "hosts.yml").write_text(yaml.safe_dump(hosts))
    matrix_file = dest / "group_vars" / "ascend-nodes" / "matrix.yml"
    matrix = yaml.safe_load(matrix_file.read_text())
    m = matrix["fleet_matrix"]
    for key in ARTIFACTS:
        m[key]["file"], m[key]["sha256"] = f"{key}.run", artifacts[key]
    m["vllm"]["commit"] = commits["vllm"]
    m["vllm"]["sources"] = ["https://github.com/vllm-project/vllm.git"]   # through the GitHub proxy
    m["vllm_ascend"] = {"commit": commits["vllm-ascend"], "sources": [f"{url}/git/vllm-ascend.git"]}
    m["tiktoken_o200k"]["sha256"] = artifacts["o200k"]
    m["tiktoken_o200k"]["sources"] = [f"{url}/artifacts/tiktoken/o200k_base.tiktoken"]
    matrix_file.write_text(yaml.safe_dump(matrix))
    models_file = dest / "group_vars" / "ascend-nodes" / "models.yml"
    models = yaml.safe_load(models_file.read_text())
    models["fleet_models"] = [{**models["fleet_models"][0], "source": {"type": "huggingface", "repo": "acme/tiny"},
                               "size_gb": 0.001}]
    models_file.write_text(yaml.safe_dump(models))
    (dest / "group_vars" / "all" / "mirrors.yml").write_text(yaml.safe_dump({
        "fleet_pip_index_url": f"{url}/pypi/simple/", "fleet_pip_trusted_hosts": ["127.0.0.1"],
        "fleet_github_mirror": f"{url}/github", "fleet_artifact_base_url": f"{url}/artifacts/",
        "fleet_hub": {"modelscope_endpoint": "", "hf_endpoint": f"{url}/huggingface"},
        # The distribution's packages come from Debian's archive, no upstream of this loopback "internet":
        # tests/unit/test_mirror_apt.py syncs them from an archive of its own.
        "fleet_mirror_apt": False}))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mirror")
    internet = tmp / "internet"
    artifacts = {}
    for index, key in enumerate(ARTIFACTS):
        data = os.urandom(150_000 + index)
        (internet / "artifacts").mkdir(parents=True, exist_ok=True)
        (internet / "artifacts" / f"{key}.run").write_bytes(data)
        artifacts[key] = sha256(data)
    o200k = b"token 0\n" * 1000
    (internet / "artifacts" / "tiktoken").mkdir()
    (internet / "artifacts" / "tiktoken" / "o200k_base.tiktoken").write_bytes(o200k)
    artifacts["o200k"] = sha256(o200k)
    # GitHub (through its proxy): vLLM, whose build fetches acme/dep with CMake's FetchContent.
    dep = _repo(internet / "github" / "acme" / "dep.git", tmp / "w-dep", {"dep.h": "int dep;\n"}, tag="v1.2")
    cmake = ("include(FetchContent)\nFetchContent_Declare(\n  dep\n  GIT_REPOSITORY https://github.com/acme/dep.git\n"
             "  GIT_TAG v1.2\n  GIT_SHALLOW TRUE\n)\n")
    commits = {"dep": dep,
               # Its build requires tiny-tokens, and it requires vllm-dep at a local version ("+").
               "vllm": _repo(internet / "github" / "vllm-project" / "vllm.git", tmp / "w-vllm",
                             {"CMakeLists.txt": cmake, "setup.py": "# vllm\n", "pyproject.toml": PYPROJECT}),
               "vllm-ascend": _repo(internet / "git" / "vllm-ascend.git", tmp / "w-va", {"setup.py": "# va\n"})}
    packages = internet / "pypi" / "packages"
    packages.mkdir(parents=True)
    for dist, version in WHEELS.items():
        _wheel(packages, dist, version, ["tiny-tokens==1.0"] if dist == "transformers" else [])
    _wheel(packages, "torch", "9.9.9", [])   # a newer torch the pin must not take
    _wheel(packages, "vllm_dep", "1.0+lab", [])
    store.write_index({w.name: store.sha256_file(w) for w in packages.glob("*.whl")}, internet / "pypi" / "simple")
    models = tmp / "models" / "acme--tiny"
    models.mkdir(parents=True)
    (models / "config.json").write_text(json.dumps({"architectures": ["Tiny"], "model_type": "tiny"}))
    (models / "model.safetensors").write_bytes(os.urandom(70_000))
    www.build_hub(internet, models_dirs=[tmp / "models"])
    log, faults = tmp / "labweb.log", tmp / "faults.json"
    faults.write_text("{}")
    proc, url = start_labweb(internet, log, faults)
    _inventory(tmp / "inventory", url, artifacts, commits)
    trap = _Trap()
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    try:
        yield Site(tmp, url, tmp / "inventory", trap, artifacts, log, faults, commits)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        trap.shutdown()
        trap.server_close()


def test_check_lists_what_the_nodes_would_fetch_with_sizes_and_fetches_nothing(site):
    out = site.tmp / "checked"
    proc = site.cli("sync", "-i", str(site.inventory), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    for key in ARTIFACTS:
        assert f"artifact artifacts/{key}.run: to fetch, 150.0 KB" in text
    assert "artifacts/o200k_base.tiktoken: to fetch" in text
    assert f"git/github.com/vllm-project/vllm.git@{site.commits['vllm']}: to fetch" in text
    assert f"git/127.0.0.1:{site.url.rsplit(':', 1)[1]}/git/vllm-ascend.git@{site.commits['vllm-ascend']}" in text
    # pip's resolution for the node: the pins, and what they require, at the pinned versions.
    for wheel in ("torch==2.7.1", "torch-npu==2.7.1", "transformers==4.57.1", "tiny-tokens==1.0",
                  "huggingface-hub==2.4.0"):
        assert wheel in text, text
    assert "torch==9.9.9" not in text
    assert "model    models/acme/tiny/main: to fetch, 70.7 KB" in text  # with the hub's .gitattributes
    assert not (out / "artifacts").exists() and not (out / store.MANIFEST).exists()


def test_sync_fetches_verifies_and_a_second_sync_fetches_nothing(site):
    out = site.tmp / "mirror"
    proc = site.cli("sync", "-i", str(site.inventory), "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in ARTIFACTS:
        assert store.sha256_file(out / "artifacts" / f"{key}.run") == site.artifacts[key]
    # The pinned commits, and the FetchContent source of vLLM's build at its tag, over dumb HTTP.
    vllm = out / "git" / "github.com" / "vllm-project" / "vllm.git"
    assert _git("-C", str(vllm), "cat-file", "-t", site.commits["vllm"]) == "commit"
    dep = out / "git" / "github.com" / "acme" / "dep.git"
    assert _git("-C", str(dep), "rev-parse", "refs/tags/v1.2^{commit}") == site.commits["dep"]
    assert (dep / "info" / "refs").is_file()
    clone = site.tmp / "clone"
    # As CMake clones a FetchContent source: at its GIT_TAG.
    subprocess.run(["git", "clone", "-q", "--branch", "v1.2", str(dep), str(clone)], check=True, env=site.env())
    assert (clone / "dep.h").is_file()
    # A PEP 503 index with hashes, holding exactly the resolution.
    index = (out / "pypi" / "simple" / "tiny-tokens" / "index.html").read_text()
    assert "tiny_tokens-1.0-py3-none-any.whl#sha256=" in index
    assert not list((out / "pypi" / "packages").glob("torch-9.9.9*"))
    # What vLLM's source build needs in its turn (its pyproject.toml), a local version's "+" quoted.
    assert (out / "pypi" / "packages" / "vllm_dep-1.0+lab-py3-none-any.whl").is_file()
    assert 'href="../../packages/vllm_dep-1.0%2Blab-py3-none-any.whl#sha256=' in (
        out / "pypi" / "simple" / "vllm-dep" / "index.html").read_text()
    manifest = json.loads((out / store.MANIFEST).read_text())
    model = manifest["items"]["model:models/acme/tiny/main"]
    assert model["dir"] == "models/acme/tiny/main" and len(model["revision"]) == 40
    weights = out / model["dir"] / "model.safetensors"
    assert weights.stat().st_size == 70_000
    sums = (out / f"{model['dir']}.sha256").read_text()
    assert f"{store.sha256_file(weights)}  model.safetensors" in sums
    assert api_verify(out) == []

    before = site.requests()
    again = site.cli("sync", "-i", str(site.inventory), "-o", str(out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "fetched 0 item(s), 0 B" in again.stdout
    assert site.requests() == before, "a second sync contacted an upstream"


def api_verify(path: Path) -> list[str]:
    return store.verify(path, log=lambda m: None)


def test_verify_names_a_corrupted_file_and_pack_carries_the_mirror_in_bounded_volumes(site):
    src = site.tmp / "mirror"
    if not (src / store.MANIFEST).is_file():
        pytest.skip("needs the synced mirror of the previous test")
    copy = site.tmp / "mirror-copy"
    shutil.copytree(src, copy)
    victim = copy / "artifacts" / "cann_toolkit.run"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc = site.cli("verify", str(copy))
    assert proc.returncode == 2
    assert "artifacts/cann_toolkit.run: sha256 differs from the manifest" in proc.stdout
    assert site.cli("pack", str(copy), "-o", str(site.tmp / "refused")).returncode == 2

    volumes = site.tmp / "volumes"
    proc = site.cli("pack", str(src), "-o", str(volumes), "--volume-size", "256K")
    assert proc.returncode == 0, proc.stdout
    parts = sorted(volumes.glob("mirror.tar.*"))
    assert len(parts) > 2 and all(p.stat().st_size <= 256 * 1024 for p in parts)
    assert site.cli("verify", str(volumes)).returncode == 0
    restored = site.tmp / "restored"
    proc = site.cli("unpack", str(volumes), "-o", str(restored))
    assert proc.returncode == 0, proc.stdout
    assert _git("-C", str(restored / "git" / "github.com" / "acme" / "dep.git"), "rev-parse",
                "refs/tags/v1.2^{commit}") == site.commits["dep"]
    # Unpacked again over itself, a file is replaced, not rewritten: a file linked to it elsewhere (the
    # mirror host's registry store shares image layers so) keeps its bytes whole all along.
    shared = restored / "artifacts" / "cann_toolkit.run"
    outside = site.tmp / "registry-blob"
    outside.unlink(missing_ok=True)
    os.link(shared, outside)
    was = (outside.stat().st_ino, outside.read_bytes())
    assert site.cli("unpack", str(volumes), "-o", str(restored)).returncode == 0
    assert (outside.stat().st_ino, outside.read_bytes()) == was and outside.stat().st_nlink == 1
    assert shared.stat().st_ino != was[0] and shared.read_bytes() == was[1]
    parts[1].write_bytes(parts[1].read_bytes()[:-1] + b"x")
    proc = site.cli("verify", str(volumes))
    assert proc.returncode == 2 and f"{parts[1].name}: sha256 differs" in proc.stdout


def _bill(site, **matrix) -> bom.Bill:
    """The bill of an Ascend-like host, built without Ansible (for the fault tests)."""
    return bom.bill_of_materials({"n1": {
        "groups": {"fleet": ["n1"]}, "fleet_accelerator": {"vendor": "ascend", "model": "910B3", "count": 8},
        "fleet_artifact_base_url": f"{site.url}/artifacts/", "fleet_github_mirror": f"{site.url}/github",
        "fleet_mirror_apt": False, "fleet_matrix": {"python": "3.11", **matrix}}})


def test_a_cut_transfer_fails_named_and_the_next_sync_resumes_it(site):
    out = site.tmp / "cut"
    site.faults.write_text(json.dumps({"/artifacts/npu_driver.run": {"mode": "cut", "after": 40_000, "times": 1}}))
    bill = _bill(site, npu_driver={"version": "1", "file": "npu_driver.run", "sha256": site.artifacts["npu_driver"]})
    lines = []
    first = mirror_sync.sync(bill, out, log=lines.append)
    assert not first.ok
    assert "n1: fleet_matrix.npu_driver" in first.failed[0], first.failed
    part = out / "artifacts" / "npu_driver.run.part"
    assert part.is_file() and part.stat().st_size == 40_000, (first.failed, lines)
    second = mirror_sync.sync(_bill(site, npu_driver={"version": "1", "file": "npu_driver.run",
                                                      "sha256": site.artifacts["npu_driver"]}), out, log=lines.append)
    assert second.ok, second.failed
    assert second.received == 150_000 - 40_000  # only the rest, by a range request
    assert store.sha256_file(out / "artifacts" / "npu_driver.run") == site.artifacts["npu_driver"]


def test_a_pinned_commit_the_upstream_lacks_and_a_wrong_checksum_are_named_and_nothing_is_kept(site):
    out = site.tmp / "missing"
    bill = _bill(site, vllm_ascend={"commit": "1" * 40, "sources": [f"{site.url}/git/vllm-ascend.git"]},
                 npu_firmware={"version": "1", "file": "npu_firmware.run", "sha256": "0" * 64})
    summary = mirror_sync.sync(bill, out, log=lambda m: None)
    failed = "\n".join(summary.failed)
    assert f"has no {'1' * 40}" in failed and "n1: fleet_matrix.vllm_ascend" in failed
    assert f"the inventory pins {'0' * 64}: not kept" in failed
    assert not (out / "artifacts" / "npu_firmware.run").exists()


def test_a_disk_too_small_is_said_before_anything_is_fetched(site, monkeypatch):
    out = site.tmp / "small"
    bill = _bill(site, npu_driver={"version": "1", "file": "npu_driver.run", "sha256": site.artifacts["npu_driver"]})
    monkeypatch.setattr(mirror_sync.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    summary = mirror_sync.sync(bill, out, log=lambda m: None)
    assert "has 1.0 KB free; this sync adds 150.0 KB" in summary.refused
    assert not (out / "artifacts").exists()


def test_the_bill_follows_declared_types_and_the_nodes_platform():
    hosts = {"a1": {"groups": {"fleet": ["a1"]}, "fleet_accelerator": {"vendor": "ascend"},
                    "fleet_architecture": "aarch64", "fleet_artifact_base_url": "http://127.0.0.1:9/a/",
                    "fleet_deploy_mode": "container", "fleet_container_registry": "reg.internal",
                    "fleet_matrix": {"python": "3.11.13", "torch": "2.7.1",
                                     "npu_driver": {"version": "1", "file": "d.run", "sha256": "a" * 64},
                                     "npu_firmware": {"version": "1", "path": "/srv/f.run", "sha256": "b" * 64},
                                     "cann_image": {"repository": "ascend/cann", "tag": "8"}}},
             "r1": {"groups": {"router": ["r1"]}, "fleet_matrix": {"vllm_router": {"version": "0.1.17"}}}}
    bill = bom.bill_of_materials(hosts)
    assert bill.items["artifact:artifacts/d.run"].sources == ["http://127.0.0.1:9/a/d.run"]
    assert any("/srv/f.run" in s for s in bill.skipped)
    assert bill.items["image:ascend/cann:8"].sources == ["reg.internal/ascend/cann:8"]
    pips = {i.specs[0]: i for i in bill.of("pip")}
    assert pips["torch==2.7.1"].arch == "aarch64" and pips["torch==2.7.1"].python == "3.11"
    assert pips["vllm-router==0.1.17"].python == "3.11" and pips["vllm-router==0.1.17"].arch == "x86_64"
    args = fetch.pip_args(pips["torch==2.7.1"])
    assert "--platform" in args and "manylinux2014_aarch64" in args and "--isolated" in args


def test_the_nodes_platform_tags_are_pips_on_the_mirror_s_release():
    """Debian 12's glibc 2.36: vLLM's llguidance ships manylinux_2_31 wheels only, which a 2.28 cap
    (the controller's guess of a baseline) could not resolve though every node's pip installs them."""
    x86 = bom.platform_tags("x86_64")
    assert x86[0] == "manylinux_2_36_x86_64" and "manylinux_2_31_x86_64" in x86 and x86[-1] == "linux_x86_64"
    assert x86.index("manylinux_2_17_x86_64") + 1 == x86.index("manylinux2014_x86_64")
    assert "manylinux2010_x86_64" in x86 and "manylinux1_x86_64" in x86 and "manylinux_2_37_x86_64" not in x86
    arm = bom.platform_tags("aarch64")
    assert arm[0] == "manylinux_2_36_aarch64" and arm[-3:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64",
                                                              "linux_aarch64"]
    assert bom.platform_tags("x86_64", (2, 28))[0] == "manylinux_2_28_x86_64"
    # pip's own list (packaging's) on this machine, where it is Debian 12 on x86_64: the same manylinux tags.
    tags = pytest.importorskip("packaging.tags")
    here = [t for t in tags.platform_tags() if "manylinux" in t and t.endswith("x86_64")]
    if here and here[0] == "manylinux_2_36_x86_64":
        assert here == [t for t in x86 if "manylinux" in t]


def test_a_wheel_of_several_sets_is_counted_once_and_a_held_one_not_at_all(tmp_path, monkeypatch):
    """The plan's size (what --check prints and the disk check holds) is what the sync writes: each wheel
    once in pypi/packages/, none the mirror holds already."""
    def wheels(*names):
        return [{"url": f"http://127.0.0.1:9/p/{n}-1.0-py3-none-any.whl", "sha256": ""} for n in names]

    sizes = {"torch": 1000, "shared": 100, "held": 10, "own": 1}
    monkeypatch.setattr(mirror_sync.fetch, "head_size", lambda url: sizes[url.rsplit("/", 1)[1].split("-")[0]])
    entries = []
    for key, names in (("a", ("torch", "shared", "held")), ("b", ("torch", "shared", "own"))):
        entry = mirror_sync.Entry(bom.Item("pip", key), False)
        monkeypatch.setattr(mirror_sync.fetch, "pip_resolve", lambda item, names=names: wheels(*names))
        mirror_sync._size(entry)
        entries.append(entry)
    assert [e.size for e in entries] == [1110, 1101]  # each set alone
    held = tmp_path / "pypi" / "packages" / "held-1.0-py3-none-any.whl"
    held.parent.mkdir(parents=True)
    held.write_bytes(b"x" * 10)
    manifest = store.Manifest(tmp_path)
    manifest.add_file("pypi/packages/held-1.0-py3-none-any.whl")
    mirror_sync._count_wheels_once(entries, manifest)
    assert [e.size for e in entries] == [1100, 1]
