"""Container images in `vllm-fleet mirror sync|verify` against a registry on 127.0.0.1.

The upstream is Debian's docker-registry (scripts/setup unpacks it) on a free loopback port over a
temporary storage; a tiny image built here as an OCI layout (one layer, its config, its manifest,
index.json) is pushed into it with skopeo, which the sync then copies from (plain HTTP: the
registry is on loopback). Every request for anything but 127.0.0.1 goes to a proxy that records
it, which fails the test.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from tests.conftest import OffLoopbackTrap, wait_for_port
from vllm_fleet.mirror import bom, check, oci, store
from vllm_fleet.mirror import sync as mirror_sync

REGISTRY = shutil.which("docker-registry") or ("/usr/bin/docker-registry"
                                               if Path("/usr/bin/docker-registry").is_file() else None)
pytestmark = [
    pytest.mark.skipif(REGISTRY is None, reason="docker-registry is not installed (Debian's package; scripts/setup "
                                                "unpacks it under /opt/vllm-fleet-tools)"),
    pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed (scripts/setup installs it)"),
]


def _blob(blobs: Path, data: bytes, media_type: str) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _tiny_image(layout: Path, tag: str, text: bytes) -> None:
    """An OCI image layout holding one linux/amd64 image of one layer (a tar of one file) at `tag`."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as out:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(text)
        out.addfile(info, io.BytesIO(text))
    layer = _blob(blobs, tar.getvalue(), "application/vnd.oci.image.layer.v1.tar")
    config = _blob(blobs, json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                                      "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}).encode(),
                   "application/vnd.oci.image.config.v1+json")
    manifest = _blob(blobs, json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                        "config": config, "layers": [layer]}).encode(),
                     "application/vnd.oci.image.manifest.v1+json")
    manifest["annotations"] = {oci.REF_NAME: tag}
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """docker-registry on 127.0.0.1 holding tiny/hello:1, and a trap for every other address."""
    tmp = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = tmp / "config.yml"
    config.write_text(json.dumps({"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
                                  "storage": {"filesystem": {"rootdirectory": str(tmp / "storage")}},
                                  "http": {"addr": f"127.0.0.1:{port}"}}))
    log = tmp / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([REGISTRY, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    trap = OffLoopbackTrap()
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    patch = pytest.MonkeyPatch()
    patch.setenv("REGISTRY_AUTH_FILE", str(tmp / "auth.json"))  # no credentials of the controller's
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        patch.setenv(name, f"http://127.0.0.1:{trap.server_address[1]}")
    patch.setenv("NO_PROXY", "127.0.0.1")
    patch.setenv("no_proxy", "127.0.0.1")
    try:
        wait_for_port(proc, port, log)
        registry = f"127.0.0.1:{port}"
        _tiny_image(tmp / "src", "1", b"hello from the fleet\n")
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{tmp / 'src'}:1",
                        f"docker://{registry}/tiny/hello:1"],
                       check=True, capture_output=True)
        digest = "sha256:" + hashlib.sha256(subprocess.run(
            ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry}/tiny/hello:1"],
            check=True, capture_output=True).stdout).hexdigest()
        yield registry, digest
        assert trap.hits == [], f"requests that left 127.0.0.1: {trap.hits}"
    finally:
        patch.undo()
        trap.shutdown()
        proc.terminate()
        proc.wait(timeout=10)


def _bill(registry: str, digest: str = "", arch: str = "x86_64") -> bom.Bill:
    bill = bom.Bill()
    bill.add(bom.Item("image", "tiny/hello:1", sources=[f"{registry}/tiny/hello:1"], ref="1", arch=arch,
                      sha256=digest.removeprefix("sha256:")), "n1: fleet_matrix.vllm_image")
    return bill


def test_sync_copies_an_image_once_records_it_and_verify_finds_a_corrupted_blob(upstream, tmp_path, monkeypatch):
    registry, digest = upstream
    out = tmp_path / "mirror"
    lines: list[str] = []

    # --check: the image and its size, from its manifest alone; nothing written.
    summary = mirror_sync.sync(_bill(registry), out, check=True, log=lines.append)
    (entry,) = summary.entries
    assert not entry.present and entry.size and entry.size > 0 and not entry.error
    assert "image    tiny/hello:1: to fetch" in "\n".join(lines)
    assert not (out / "images").exists()

    summary = mirror_sync.sync(_bill(registry), out, log=lines.append)
    assert summary.ok and summary.fetched == ["image tiny/hello:1"] and summary.received > 0, lines
    record = json.loads((out / "mirror.json").read_text())["items"]["image:tiny/hello:1"]
    assert record["digest"] == digest and record["path"] == "images/tiny/hello" and record["tag"] == "1"
    assert record["size"] == entry.size == sum(
        (out / "images/tiny/hello/blobs/sha256" / b).stat().st_size for b in record["blobs"])
    assert len(record["blobs"]) == 3  # the manifest, the config, the layer
    assert store.verify(out, log=lines.append) == []

    # A second sync contacts no registry for it and copies nothing.
    def no_skopeo(*args):
        raise AssertionError(f"skopeo ran again: {args}")
    monkeypatch.setattr(oci, "_skopeo", no_skopeo)
    again = mirror_sync.sync(_bill(registry), out, log=lines.append)
    assert again.ok and again.fetched == [] and again.received == 0 and again.entries[0].present
    monkeypatch.undo()

    # The fleet's check holds the image as held; without it the nodes' run is refused naming it.
    hosts = {"n1": {"groups": {"fleet": ["n1"]}, "fleet_accelerator": {"vendor": "ascend"},
                    "fleet_mirror_apt": False, "fleet_deploy_mode": "container",
                    "fleet_matrix": {"cann_image": {"repository": "tiny/hello", "tag": "1"}}}}
    manifest = json.loads((out / "mirror.json").read_text())
    assert not [p for p in check.missing(hosts, manifest, "http://m:8081") if "tiny/hello" in p]
    refused = [p for p in check.missing(hosts, {"items": {}}, "http://m:8081") if "tiny/hello" in p]
    assert len(refused) == 1 and "n1: fleet_matrix.cann_image: needs the container image tiny/hello:1" in refused[0]

    # A blob whose bytes are not its name: verify names it.
    layer = max(record["blobs"], key=lambda b: (out / "images/tiny/hello/blobs/sha256" / b).stat().st_size)
    path = out / "images/tiny/hello/blobs/sha256" / layer
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    problems = store.verify(out, log=lines.append)
    assert problems == [f"images/tiny/hello/blobs/sha256/{layer}: its sha256 is not its name (corrupted)"]
    path.unlink()
    assert store.verify(out, log=lines.append) == [f"images/tiny/hello/blobs/sha256/{layer}: missing"]


def test_a_pinned_digest_is_copied_as_it_is_and_a_wrong_one_is_named(upstream, tmp_path):
    registry, digest = upstream
    out = tmp_path / "mirror"
    summary = mirror_sync.sync(_bill(registry, digest), out, log=lambda m: None)
    assert summary.ok, summary.failed
    record = json.loads((out / "mirror.json").read_text())["items"]["image:tiny/hello:1"]
    assert record["digest"] == digest and record["pinned"]
    wrong = "sha256:" + "0" * 64
    summary = mirror_sync.sync(_bill(registry, wrong), tmp_path / "other", log=lambda m: None)
    assert len(summary.failed) == 1 and "image tiny/hello:1" in summary.failed[0]
    assert "n1: fleet_matrix.vllm_image" in summary.failed[0]
    # The mirror at the old pin does not hold the new one: the check refuses it.
    hosts = {"n1": {"groups": {"fleet": ["n1"]}, "fleet_accelerator": {"vendor": "ascend"},
                    "fleet_mirror_apt": False, "fleet_deploy_mode": "container",
                    "fleet_matrix": {"cann_image": {"repository": "tiny/hello", "tag": "1", "digest": wrong}}}}
    manifest = json.loads((out / "mirror.json").read_text())
    assert [p for p in check.missing(hosts, manifest, "http://m:8081") if f"tiny/hello:1@{wrong}" in p]


def test_the_bill_names_each_image_with_the_nodes_platforms_and_refuses_two_digests():
    def host(arch, digest=None):
        image = {"repository": "ascend/cann", "tag": "8", **({"digest": digest} if digest else {})}
        return {"fleet_accelerator": {"vendor": "ascend"}, "fleet_mirror_apt": False, "fleet_architecture": arch,
                "fleet_deploy_mode": "container", "fleet_matrix": {"cann_image": image}}
    groups = {"fleet": ["a", "b"]}
    bill = bom.bill_of_materials({"a": {"groups": groups, **host("aarch64")}})
    assert bill.items["image:ascend/cann:8"].arch == "aarch64"
    bill = bom.bill_of_materials({"a": {"groups": groups, **host("aarch64")},
                                  "b": {"groups": groups, **host("x86_64")}})
    assert bill.items["image:ascend/cann:8"].arch == ""  # every platform
    with pytest.raises(bom.BillError, match="two digests"):
        bom.bill_of_materials({"a": {"groups": groups, **host("x86_64", "sha256:" + "1" * 64)},
                               "b": {"groups": groups, **host("x86_64")}})


def test_the_mirror_hosts_registry_and_its_images_hold_each_layer_once(tmp_path):
    """roles/services/mirror fills Debian's docker-registry from the mirror's OCI layouts, then links the
    copies (vars/main.yml's _mirror_registry_dedupe, run here as the role runs it): the layer is one file on
    disk, the registry still serves the image (skopeo checks every digest it reads), and a second run
    links nothing (the task's changed_when)."""
    import os

    import jinja2
    import yaml

    from tests.conftest import ROOT

    role = ROOT / "roles" / "services" / "mirror"
    mirror, store = tmp_path / "mirror", tmp_path / "store"
    layout = mirror / "images" / "big" / "one"
    _tiny_image(layout, "1", os.urandom(3 << 20))
    port = _free_port()
    config = tmp_path / "config.yml"
    config.write_text(json.dumps({"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
                                  "storage": {"filesystem": {"rootdirectory": str(store)}},
                                  "http": {"addr": f"127.0.0.1:{port}"}}))
    log = tmp_path / "registry.log"
    # docker-registry reads REGISTRY_* variables as its configuration (the module's fixture sets skopeo's one)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen([REGISTRY, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=env)
    try:
        wait_for_port(proc, port, log)
        subprocess.run(["skopeo", "copy", "--quiet", "--multi-arch", "all", "--preserve-digests",
                        "--dest-tls-verify=false", f"oci:{layout}:1", f"docker://127.0.0.1:{port}/big/one:1"],
                       check=True, capture_output=True)
        role_vars = yaml.safe_load((role / "vars" / "main.yml").read_text())
        context = {"mirror_root": str(mirror), "_mirror_registry_store": str(store)}
        argv = [jinja2.Template(str(a)).render(context) for a in role_vars["_mirror_registry_dedupe"]]
        tasks = yaml.safe_load((role / "tasks" / "registry.yml").read_text())
        (task,) = [t for t in tasks if t.get("register") == "mirror_registry_dedupe"]
        changed = re.search(r"regex\('(.*)'\)", task["changed_when"])[1].replace("\\\\", "\\")

        def layers() -> list[Path]:
            return sorted(p for p in [*layout.rglob("*"), *store.rglob("data")] if p.stat().st_size >= 1 << 20)

        before = layers()
        assert len(before) == 2 and len({p.stat().st_ino for p in before}) == 2  # two copies of the layer
        first = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        assert re.search(changed, first), first
        after = layers()
        assert len({p.stat().st_ino for p in after}) == 1 and after[0].stat().st_nlink == 2, first
        back = tmp_path / "back"
        subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--src-tls-verify=false",
                        f"docker://127.0.0.1:{port}/big/one:1",
                        f"oci:{back}:1"], check=True, capture_output=True)
        layer = back / "blobs" / "sha256" / next(p.name for p in after if p.name != "data")
        assert hashlib.sha256(layer.read_bytes()).hexdigest() == layer.name  # the shared layer, as served
        again = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        assert not re.search(changed, again), again
    finally:
        proc.terminate()
        proc.wait(timeout=10)
