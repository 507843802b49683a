"""Models of `git` sources in the fleet's mirror: `vllm-fleet mirror sync` checks the repository out with
its LFS files (git, git-lfs) into a cache and writes the files as a snapshot with its sha256 list, as a hub
model's; the nodes fetch it from there (roles/blocks/model_fetch: source_mirror.yml), never from the git host.

The git host is the lab's model hub (lab/fixtures/services/hub.py: dumb-HTTP git and the LFS batch API)
served by the lab's web server on 127.0.0.1; every child process (git, git-lfs) has a proxy that records
any request not for 127.0.0.1, which fails the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.conftest import OffLoopbackTrap, load_module, start_labweb
from vllm_fleet.mirror import bom, check, fetch, layout, store
from vllm_fleet.mirror import sync as mirror_sync
from vllm_fleet_lab import www

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
WEIGHTS = 70_000

needs_git_lfs = pytest.mark.skipif(shutil.which("git-lfs") is None,
                                   reason="git-lfs is not installed (scripts/setup: apt-get install git-lfs)")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Hub:
    def __init__(self, tmp: Path, url: str, log: Path, trap: OffLoopbackTrap, files: dict[str, bytes]):
        self.tmp, self.url, self.log, self.trap, self.files = tmp, url, log, trap, files

    def requests(self) -> list[str]:
        return [m[1] for m in (re.search(r'"[A-Z]+ (\S+) HTTP', line) for line in self.log.read_text().splitlines())
                if m]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("git-models")
    files = {"config.json": json.dumps({"architectures": ["Tiny"], "model_type": "tiny"}).encode(),
             "model.safetensors": os.urandom(WEIGHTS)}   # stored in git as an LFS pointer (the hub's patterns)
    model = tmp / "models" / "acme--tiny"
    model.mkdir(parents=True)
    for name, data in files.items():
        (model / name).write_bytes(data)
    www.build_hub(tmp / "internet", models_dirs=[tmp / "models"])
    log = tmp / "labweb.log"
    proc, url = start_labweb(tmp / "internet", log)
    trap = OffLoopbackTrap()
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    try:
        yield Hub(tmp, url, log, trap, files)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        trap.shutdown()
        trap.server_close()


@pytest.fixture
def env(hub, tmp_path, monkeypatch):
    """The sync's child processes (git, git-lfs): their own configuration, a proxy that records any request
    off the loopback, a cache of this test."""
    trap = f"http://127.0.0.1:{hub.trap.server_address[1]}"
    home = tmp_path / "home"
    home.mkdir()
    for key, value in {"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
                       "VLLM_FLEET_GIT_CACHE": str(tmp_path / "cache"), "NO_PROXY": "127.0.0.1,localhost",
                       "no_proxy": "127.0.0.1,localhost",
                       **{k: trap for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")}
                       }.items():
        monkeypatch.setenv(key, value)
    yield tmp_path
    assert hub.trap.hits == [], f"traffic off the loopback: {hub.trap.hits}"


def _hosts(*sources: dict) -> dict:
    """A fleet node whose models have `sources` (its matrix pins nothing else: the bill is its models)."""
    return {"n1": {"groups": {"fleet": ["n1"]}, "fleet_accelerator": {"vendor": "musa"}, "fleet_matrix": {},
                   "fleet_mirror_apt": False,
                   "fleet_models": [{"name": f"m{i}", "source": s, "size_gb": 0.001} for i, s in enumerate(sources)]}}


def _git_source(hub: Hub, **extra) -> dict:
    return {"type": "git", "url": f"{hub.url}/modelscope-git/acme/tiny.git", **extra}


def test_a_git_source_is_a_model_of_the_bill_at_its_place_in_the_mirror():
    url = "https://www.modelscope.cn/hiruyun/gptq-Qwen3-8B.git"
    bill = bom.bill_of_materials(_hosts({"type": "git", "url": url}, {"type": "git", "url": url, "revision": "v2"},
                                        {"type": "path"}))
    head = bill.items["model:models/git/www.modelscope.cn/hiruyun/gptq-Qwen3-8B/HEAD"]
    assert (head.hub, head.ref, head.sources, head.size_hint) == ("git", "HEAD", [url], 1_000_000)
    assert head.wanted_by == ["n1: fleet_models[0] (m0)"]
    assert bill.items["model:models/git/www.modelscope.cn/hiruyun/gptq-Qwen3-8B/v2"].ref == "v2"
    assert [s for s in bill.skipped if "git" in s] == []
    assert bill.skipped == ["n1: fleet_models[2] (m2): a path source is on the node already: not mirrored"]
    # The nodes read it where the sync writes it: one function (layout.model_path) for both.
    filters = load_module(REPO / "filter_plugins" / "fleet.py", "fleet_filters_git_models")
    assert filters.fleet_mirror_model_url({"type": "git", "url": url}, "http://m:8081") == \
        f"http://m:8081/{head.key}"
    assert layout.model_path({"type": "git", "url": "git@git.example:org/m"}) == "models/git/git.example/org/m/HEAD"


@needs_git_lfs
def test_a_git_model_is_synced_as_a_snapshot_with_its_lfs_files_and_a_second_sync_fetches_nothing(hub, env):
    hosts = _hosts(_git_source(hub), _git_source(hub, revision="main"))
    out = env / "mirror"
    lines: list[str] = []
    summary = mirror_sync.sync(bom.bill_of_materials(hosts), out, log=lines.append)
    assert summary.ok and len(summary.fetched) == 2, "\n".join(lines)
    manifest = json.loads((out / store.MANIFEST).read_text())
    port = hub.url.rsplit(":", 1)[1]
    for revision in ("HEAD", "main"):
        key = f"models/git/127.0.0.1:{port}/modelscope-git/acme/tiny/{revision}"
        record = manifest["items"][f"model:{key}"]
        assert record["dir"] == key and re.fullmatch(r"[0-9a-f]{40}", record["revision"])
        snapshot = out / key
        # The checked-out files, the LFS file's content (not its pointer), and no .git.
        for name, data in hub.files.items():
            assert (snapshot / name).read_bytes() == data, name
        assert not (snapshot / ".git").exists()
        listed = layout.parse_sums((out / f"{key}.sha256").read_text())
        assert {f["name"] for f in listed} == {*hub.files, ".gitattributes"}
        for f in listed:
            assert sha256((snapshot / f["name"]).read_bytes()) == f["sha256"]
        assert sorted(record["files"]) == sorted(f"{key}/{f['name']}" for f in listed)
    assert store.verify(out, log=lambda m: None) == []
    lfs = [p for p in hub.requests() if "/info/lfs/objects/" in p and "batch" not in p]
    assert len(lfs) == 1, lfs  # one working copy for both revisions: the weights came once

    before = len(hub.requests())
    again = mirror_sync.sync(bom.bill_of_materials(hosts), out, log=lines.append)
    assert again.ok and again.fetched == [] and again.received == 0
    assert len(hub.requests()) == before, "a second sync contacted the git host"

    # Another mirror directory: the cache's working copy serves it, the weights are not fetched again.
    other = mirror_sync.sync(bom.bill_of_materials(hosts), env / "other", log=lines.append)
    assert other.ok and len(other.fetched) == 2
    new = hub.requests()[before:]
    assert not [p for p in new if "/info/lfs/objects/" in p and "batch" not in p], new
    assert all(p.startswith("/modelscope-git/acme/tiny.git/") for p in new), new


@needs_git_lfs
def test_check_lists_a_git_model_and_fetches_nothing(hub, env):
    lines: list[str] = []
    summary = mirror_sync.sync(bom.bill_of_materials(_hosts(_git_source(hub))), env / "checked", check=True,
                               log=lines.append)
    port = hub.url.rsplit(":", 1)[1]
    assert f"model    models/git/127.0.0.1:{port}/modelscope-git/acme/tiny/HEAD: to fetch, 1.0 MB" in lines, lines
    assert summary.fetched == [] and not (env / "cache").exists()
    assert not (env / "checked" / store.MANIFEST).exists()


@needs_git_lfs
def test_a_revision_the_repository_lacks_fails_named_and_nothing_is_recorded(hub, env):
    lines: list[str] = []
    summary = mirror_sync.sync(bom.bill_of_materials(_hosts(_git_source(hub, revision="no-such"))),
                               env / "mirror", log=lines.append)
    assert len(summary.failed) == 1 and "has no no-such" in summary.failed[0], summary.failed
    assert "n1: fleet_models[0] (m0)" in summary.failed[0]
    assert json.loads((env / "mirror" / store.MANIFEST).read_text())["items"] == {}


def test_the_mirror_check_refuses_a_git_model_its_manifest_lacks():
    url = "https://www.modelscope.cn/hiruyun/gptq-Qwen3-8B.git"
    hosts = _hosts({"type": "git", "url": url})
    problems = check.missing(hosts, {"items": {}}, "http://m:8081", "inventories/site")
    assert len(problems) == 1, problems
    assert problems[0].startswith("n1: fleet_models[0] (m0): needs model "
                                  "models/git/www.modelscope.cn/hiruyun/gptq-Qwen3-8B/HEAD, which the fleet's mirror")
    held = {"items": {"model:models/git/www.modelscope.cn/hiruyun/gptq-Qwen3-8B/HEAD": {}}}
    assert check.missing(hosts, held, "http://m:8081") == []


def test_the_git_fetch_contacts_only_the_url_the_inventory_names():
    assert fetch.lfs_url("https://www.modelscope.cn/org/m.git") == "https://www.modelscope.cn/org/m.git/info/lfs"
    assert fetch.lfs_url("https://git.example/org/m") == "https://git.example/org/m.git/info/lfs"


# ------------------------------------------------------------------ the nodes, through Ansible

SHOW = """
- hosts: musa-01
  gather_facts: false
  connection: local
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  vars:
    _model_fetch_markers: {{stdout_lines: []}}
  tasks:
    - ansible.builtin.include_role: {{name: stages/fleet, tasks_from: settings.yml, public: true}}
    - ansible.builtin.copy:
        dest: "{out}/{{{{ label }}}}.json"
        mode: "0644"
        content: >-
          {{{{ {{'types': _model_fetch_types, 'tools': _model_fetch_tools, 'models': rows}} | to_json }}}}
      vars:
        fleet_mirror_url: "{{{{ item.mirror }}}}"
        label: "{{{{ item.label }}}}"
        rows: >-
          {{{{ _model_fetch_todo | selectattr('source.type', 'in', _model_fetch_hubs) | map(attribute='source')
             | map('fleet_mirror_model_url', fleet_mirror_url) | list }}}}
      loop: [{{label: with, mirror: "http://10.0.0.9:8081"}}, {{label: without, mirror: ""}}]
    - ansible.builtin.copy:
        dest: "{out}/{{{{ model_fetch_model.name }}}}-{{{{ label }}}}.json"
        mode: "0644"
        content: "{{{{ {{'mirrored': _model_fetch_mirrored | bool, 'url': _model_fetch_mirror_url}} | to_json }}}}"
      vars:
        fleet_mirror_url: "{{{{ '' if label == 'without' else 'http://10.0.0.9:8081' }}}}"
        label: "{{{{ 'without' if ansible_loop.index0 % 2 else 'with' }}}}"
      loop: >-
        {{{{ _model_fetch_todo | selectattr('source.type', 'eq', 'git') | product([1, 2]) | map('first') | list }}}}
      loop_control: {{loop_var: model_fetch_model, extended: true, label: "{{{{ model_fetch_model.name }}}}"}}
"""


@pytest.mark.ansible
def test_with_a_mirror_a_nodes_git_model_comes_from_its_snapshot_and_no_git_runs(tmp_path):
    book = tmp_path / "show.yml"
    out = tmp_path / "out"
    out.mkdir()
    book.write_text(SHOW.format(role=REPO / "roles" / "blocks" / "model_fetch", out=out))
    proc = subprocess.run([str(PLAYBOOK), "-i", str(REPO / "inventories" / "example"), str(book),
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable,
                                             "ansible_connection": "local"})],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
                          env={**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    models = {m["name"]: m for m in yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "musa-nodes"
                                                    / "models.yml").read_text())["fleet_models"]}
    git = sorted(n for n, m in models.items() if m["source"]["type"] == "git" and m.get("enabled", True))
    assert git, "the example's Moore Threads node has models of git sources"
    with_mirror = json.loads((out / "with.json").read_text())
    without = json.loads((out / "without.json").read_text())
    # With the mirror no git runs for them (tools.yml's `git lfs install` is skipped), no hub client is installed.
    assert "git" not in with_mirror["types"] and with_mirror["tools"] == []
    assert "git" in without["types"]
    for name in git:
        routed = json.loads((out / f"{name}-with.json").read_text())
        expected = "http://10.0.0.9:8081/" + layout.model_path(models[name]["source"])
        assert routed == {"mirrored": True, "url": expected}, name
        assert expected in with_mirror["models"]
        assert json.loads((out / f"{name}-without.json").read_text())["mirrored"] is False, name
