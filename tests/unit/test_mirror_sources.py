"""With a host in the group `mirror`, every node's source is the mirror, and what the nodes need is
checked against the mirror's manifest before any fleet node is touched (playbooks/mirror.yml).

The layout's rules are tested as functions; the derivation and the check through Ansible itself, on
inventories/example with a mirror host on 127.0.0.1 whose "mirror" is a web server of this test
serving a manifest. The fleet nodes' connection goes nowhere: no task contacts them.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from vllm_fleet.mirror import bom, check, layout

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def test_the_mirror_url_is_the_first_mirror_hosts_cluster_address_else_its_ansible_host():
    hostvars = {"m1": {"ansible_host": "10.0.0.5"},
                "m2": {"ansible_host": "10.0.0.6", "fleet_cluster_address": "fd00::6", "mirror_port": 9000}}
    assert layout.mirror_url(["m1", "m2"], hostvars) == "http://10.0.0.5:8081"  # roles/services/mirror's default port
    assert layout.mirror_url(["m2"], hostvars) == "http://[fd00::6]:9000"
    assert layout.mirror_url([], hostvars) == ""


def test_with_a_mirror_every_source_of_a_node_is_its_place_in_the_mirror():
    url = "http://10.0.0.5:8081"
    assert layout.node_source(url, "fleet_pip_index_url", "https://pypi.example/simple/") == f"{url}/pypi/simple/"
    assert layout.node_source(url, "fleet_pip_extra_index_urls", ["https://x.example/"]) == []
    assert layout.node_source("", "fleet_pip_index_url", "https://pypi.example/simple/") == "https://pypi.example/simple/"
    assert layout.source_default(url, "fleet_pip_index_url") == f"{url}/pypi/simple/"
    assert layout.source_default(url, "fleet_github_mirror") == f"{url}/git/github.com"
    assert layout.source_default(url, "fleet_artifact_base_url") == f"{url}/artifacts/"
    assert layout.node_source(url, "fleet_container_registry", "registry.example/quay") == "10.0.0.5:8081"
    assert layout.node_source("", "fleet_container_registry", "registry.example/quay") == "registry.example/quay"
    assert layout.source_default(url, "fleet_pip_trusted_hosts") == ["10.0.0.5"]
    assert layout.source_default("https://m.internal", "fleet_pip_trusted_hosts") == []
    assert layout.source_default("", "fleet_pip_index_url") == ""


def test_the_matrix_upstream_urls_become_their_place_in_the_mirror():
    url = "http://m:8081"
    vllm = {"commit": "a" * 40, "sources": ["https://github.com/vllm-project/vllm.git", "https://gitcode.com/x/vllm.git"]}
    assert layout.mirrored_sources(vllm, url, "git_source") == [f"{url}/git/github.com/vllm-project/vllm.git"]
    assert layout.mirrored_sources(vllm, "", "git_source") == vllm["sources"]
    o200k = {"sha256": "b" * 64, "canonical_url": "https://openaipublic.example/encodings/o200k_base.tiktoken",
             "sources": ["https://artifacts.internal/tiktoken/o200k_base.tiktoken"]}
    assert layout.mirrored_sources(o200k, url, "download") == [f"{url}/artifacts/o200k_base.tiktoken"]
    assert layout.mirrored_sources({"url": "https://x.internal/a/overlay.tgz", "sha256": "c" * 64}, url,
                                   "artifact") == [f"{url}/artifacts/overlay.tgz"]
    # The sync stores each under the same path (one home: layout).
    item = bom.bill_of_materials({"n": {"groups": {"fleet": ["n"]}, "fleet_accelerator": {"vendor": "ascend"},
                                        "fleet_matrix": {"vllm": vllm, "tiktoken_o200k": o200k}}})
    assert {i.key for i in item.items.values() if i.kind != "deb"} == {
        f"git/github.com/vllm-project/vllm.git@{'a' * 40}", "artifacts/o200k_base.tiktoken"}


@pytest.mark.parametrize("line", ["../../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a"])
def test_a_model_file_list_that_would_leave_the_models_directory_is_refused(line):
    with pytest.raises(ValueError, match="relative path inside the model"):
        layout.parse_sums(f"{'a' * 64}  {line}\n")


def test_a_model_file_list_is_read_as_sha256sum_writes_it():
    text = f"{'a' * 64}  config.json\n{'b' * 64}  tokenizer/vocab.json\n"
    assert layout.parse_sums(text) == [{"name": "config.json", "sha256": "a" * 64},
                                       {"name": "tokenizer/vocab.json", "sha256": "b" * 64}]
    with pytest.raises(ValueError):
        layout.parse_sums("not-a-digest  config.json\n")


def _hosts(**extra) -> dict:
    return {"n1": {"groups": {"fleet": ["n1"]}, "fleet_accelerator": {"vendor": "ascend"},
                   "fleet_matrix": {"python": "3.11", "torch": "2.7.1",
                                    "npu_driver": {"version": "1", "file": "d.run", "sha256": "a" * 64}},
                   "fleet_models": [{"name": "m", "source": {"type": "modelscope", "repo": "org/m"}}], **extra}}


def _everything(url: str) -> dict:
    """A manifest holding every item of _hosts() (its artifact at the mirror's base URL)."""
    hosts = {h: {**v, "fleet_artifact_base_url": f"{url}/artifacts/"} for h, v in _hosts().items()}
    return {"items": {f"{i.kind}:{i.key}": {} for i in bom.bill_of_materials(hosts).items.values()}}


def test_what_the_mirror_lacks_is_refused_naming_host_variable_and_the_sync_command():
    url = "http://m:8081"
    held = {"items": {"artifact:artifacts/d.run": {}}}
    problems = check.missing(_hosts(), held, url, "inventories/site")
    text = "\n".join(problems)
    assert "n1: fleet_models[0] (m): needs model models/org/m/master, which the fleet's mirror at http://m:8081" in text
    assert "n1: ascend's pins: needs pip's resolution of torch==2.7.1" in text
    assert "vllm-fleet mirror sync -i inventories/site -o DIR" in text
    assert "d.run" not in text
    assert len(check.missing(_hosts(), {"items": {}}, url)) == len(problems) + 1  # the artifact, at the mirror
    assert check.missing(_hosts(), _everything(url), url) == []


# ------------------------------------------------------------------ through Ansible

def _serve(root: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def site(tmp_path):
    """inventories/example with a mirror host on 127.0.0.1 (its sources stay: the sync's doors)."""
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "example", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["mirror"] = {"hosts": {"mirror-01": {"ansible_host": "127.0.0.1"}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    web = tmp_path / "web"
    web.mkdir()
    server = _serve(web)
    yield inv, web, server.server_address[1]
    server.shutdown()


def _run(playbook: Path, inv: Path, port: int, *args: str) -> subprocess.CompletedProcess:
    # Every fleet node goes nowhere: a task that tried one would fail as unreachable.
    extra = {"mirror_port": port}
    return subprocess.run([str(PLAYBOOK), "-i", str(inv), str(playbook), "-e", json.dumps(extra),
                           "-e", '{"ansible_port": 9}', *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, check=False)


SHOW = ("{{ {'pip': _fleet_pip_index_url, 'trusted': _fleet_pip_trusted_hosts, 'github': _fleet_github_mirror,"
        " 'base': _fleet_artifact_base_url, 'vllm': fleet_matrix.vllm | fleet_mirror_sources(fleet_mirror_url,"
        " 'git_source'), 'apt': _fleet_apt_source.uris, 'key': _fleet_apt_source.key_url,"
        " 'registry': _fleet_container_registry} | to_json }}")


@pytest.mark.ansible
def test_a_node_sees_every_source_at_the_mirror(site, tmp_path):
    inv, _web, port = site
    book = tmp_path / "show.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "ascend-01", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.include_role": {"name": "stages/fleet", "tasks_from": "settings.yml",
                                                    "public": True}},
                  {"ansible.builtin.debug": {"msg": SHOW}}]}]))
    env_roles = {"ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    proc = subprocess.run([str(PLAYBOOK), "-i", str(inv), str(book), "-e", json.dumps({"mirror_port": port}),
                           "-e", '{"ansible_python_interpreter": "' + sys.executable + '"}'],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False,
                          env={**os.environ, **env_roles})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    url = f"http://127.0.0.1:{port}"
    for want in (f'"pip": "{url}/pypi/simple/"', '"trusted": ["127.0.0.1"]', f'"github": "{url}/git/github.com"',
                 f'"base": "{url}/artifacts/"', f'"vllm": ["{url}/git/github.com/vllm-project/vllm.git"]',
                 f'"apt": ["{url}/apt"]', f'"key": "{url}/apt/vllm-fleet-mirror.asc"',
                 f'"registry": "127.0.0.1:{port}"'):
        assert want.replace('"', '\\"') in proc.stdout, proc.stdout


@pytest.mark.ansible
def test_what_the_mirror_lacks_stops_the_run_before_any_fleet_node(site):
    inv, web, port = site
    (web / "mirror.json").write_text(json.dumps({"version": 1, "files": {}, "items": {}}))
    proc = _run(REPO / "playbooks" / "mirror.yml", inv, port, "-l", "ascend-01")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "ascend-01: fleet_matrix.npu_driver: needs artifact artifacts/Ascend-hdk-910b-npu-driver_25.2.0_linux" in out
    assert f"vllm-fleet mirror sync -i {inv}" in out
    assert "UNREACHABLE" not in out


def test_a_models_lora_adapters_are_in_the_bill_from_their_own_sources():
    hosts = _hosts()
    hosts["n1"]["fleet_models"][0]["lora_adapters"] = [
        {"name": "support", "source": {"type": "huggingface", "repo": "org/m-lora", "revision": "v1"}}]
    items = bom.bill_of_materials(hosts).items
    assert items["model:models/org/m-lora/v1"].wanted_by == ["n1: fleet_models[0].lora_adapters[0] (support)"]
    assert "model:models/org/m/master" in items
