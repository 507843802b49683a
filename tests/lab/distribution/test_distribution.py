"""Hub models to three lab nodes in waves, from the fleet's mirror and from each other (issue 37;
roles/blocks/model_fetch with model_fetch_distribution `waves`, playbooks/distribute.yml), on a
lab of its own: three NVIDIA nodes and mirror-01, filled by `vllm-fleet mirror sync`; nvidia-03 runs
in container mode (podman, upstream's vLLM image), so the sync also copied that image from the lab's
registry (the "internet's", vllm_fleet_lab.images).

What site.yml runs before its converge (its validate, mirror and distribute playbooks), then the
distribute playbook alone (validation and the mirror were shown on the first run; the waves are
what is tested), each run checked in the servers' own access logs (Debian's nginx on the mirror and
on each node's share) and against the mirror's copy, file by file:

1. nothing held: the batches are nvidia-01, then nvidia-02 (the mirror and nvidia-01), then
   nvidia-03 (nvidia-01 and nvidia-02; the mirror a spare only): every node ends with the mirror's
   files, the mirror served each file once or twice (at most two model sizes), the peers the rest;
2. again: nothing changes, no server is asked for a model's file (0 bytes moved);
3. nvidia-01's copy of one file goes wrong after it was verified, nvidia-03's copy is removed:
   nvidia-03 fetches from its peers, finds the wrong file, names nvidia-01, and ends with the right
   file from nvidia-02; nvidia-01 stops sharing its copy and loses its completion marker, so the
   next run fetches it again: the fourth run does, from its peers (the mirror a spare), and every
   node holds the mirror's files again.

Then docs/air-gapped.md's commands as written, on the mirror the lab filled: a second sync finds
everything present and fetches nothing, the mirror is packed onto "the USB disk", verified there,
unpacked on "the other side" and verified again (the image's blobs with the rest).

Last, container mode from the mirror: site.yml on nvidia-03 installs podman from the mirror's apt
repository, pulls the image from the mirror's registry (roles/services/mirror filled it from the
sync's OCI layout), and serves the model in it; the lab's registry is asked nothing after the sync,
and a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import venv_tool
from tests.lab.conftest import RUN_TIMEOUT, changed_tasks, lab_session, recap, role_default, run_doc_command, run_kept

ROOT = Path(__file__).resolve().parents[3]
LAB = os.environ.get("VLLM_FLEET_LAB_PREFIX", "") + "distribution"
INVENTORY = ROOT / ".cache" / "distribution-test" / "inventory"
NODES = ["nvidia-01", "nvidia-02", "nvidia-03"]
CONTAINER = "nvidia-03"
MIRROR = "mirror-01"
BEFORE_CONVERGE = ["playbooks/validate.yml", "playbooks/mirror.yml"]
# The model the lab's NVIDIA nodes serve (lab/inventory/group_vars/nvidia-nodes/models.yml.j2),
# its path on a node, and its revision's path in the mirror and in every node's share.
MODEL_PATH = "/home/models/gpt-oss-20b"
KEY = "models/openai/gpt-oss-20b/main"
MIRROR_ROOT = "/srv/vllm-fleet-mirror"
COMPLETE = ".vllm-fleet-complete"
SHARE = role_default("fleet", "fleet_base_dir") + "/share"
WRONG = "model-00001-of-00002.safetensors"
ACCESS_LOG = "/var/log/nginx/access.log"


def distribute(*before: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = run_kept([venv_tool("ansible-playbook"), "-i", str(INVENTORY), *before, "playbooks/distribute.yml"],
                    timeout=RUN_TIMEOUT)
    return proc, time.monotonic() - start


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-8000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def lab():
    start = time.monotonic()
    with lab_session(LAB, INVENTORY, ["nvidia"], nodes=len(NODES), mirror=True,
                     container_nodes=[CONTAINER]) as lab_api:
        print(f"\nlab up (3 NVIDIA nodes, one in container mode, and the mirror, filled) "
              f"{time.monotonic() - start:.1f} s")
        (INVENTORY / "group_vars/nvidia-nodes/distribution.yml").write_text(
            yaml.safe_dump({"model_fetch_distribution": "waves"}))
        yield lab_api


def on(lab_api, node: str, command: str) -> str:
    return lab_api.run(LAB, node, command, timeout=120)


def sums(lab_api, node: str, directory: str) -> dict[str, str]:
    """sha256 of every file under `directory` on `node` but vllm-fleet's markers: {relative path: digest}."""
    listing = on(lab_api, node, f"cd {directory} && find . -type f ! -name '.vllm-fleet-*' -exec sha256sum {{}} +")
    return {name.removeprefix("./"): digest for digest, name in (line.split(None, 1) for line in listing.splitlines())}


def shared(lab_api, node: str) -> str:
    """Where `node`'s share link of the revision leads, once the model there is complete ('' if not)."""
    return on(lab_api, node, f"cat {MODEL_PATH}/{COMPLETE} >/dev/null && readlink {SHARE}/{KEY} || true").strip()


def model_requests(lab_api, node: str) -> dict[str, list[int]]:
    """The GETs of the model's files that `node`'s nginx answered: {file: [bytes sent, ...]}."""
    served: dict[str, list[int]] = {}
    for line in on(lab_api, node, f"cat {ACCESS_LOG} 2>/dev/null || true").splitlines():
        match = re.search(rf'"GET /{KEY}/(\S+) HTTP/[0-9.]+" (\d+) (\d+)', line)
        if match and match[2] in ("200", "206"):
            served.setdefault(match[1], []).append(int(match[3]))
    return served


def test_waves_from_mirror_and_peers(lab):
    mirror_copy = sums(lab, MIRROR, f"{MIRROR_ROOT}/{KEY}")
    assert WRONG in mirror_copy and len(mirror_copy) > 5, mirror_copy
    timings = {}

    # 1. Nothing held yet.
    proc, timings["first"] = distribute(*BEFORE_CONVERGE)
    assert proc.returncode == 0, out(proc)
    assert ("openai/gpt-oss-20b@default: held by no node; to fetch on nvidia-01, nvidia-02, nvidia-03"
            in proc.stdout), out(proc)
    for node in NODES:
        assert sums(lab, node, MODEL_PATH) == mirror_copy, node
        assert shared(lab, node) == MODEL_PATH
    from_mirror = model_requests(lab, MIRROR)
    from_peers = [model_requests(lab, node) for node in NODES]
    model_size = sum(int(on(lab, MIRROR, f"stat -c %s {MIRROR_ROOT}/{KEY}/{name}")) for name in mirror_copy)
    for name in mirror_copy:
        by_peers = sum(len(served.get(name, [])) for served in from_peers)
        # Every node got every file once: the first from the mirror, the third from its peers alone.
        assert 1 <= len(from_mirror.get(name, [])) <= 2 and by_peers >= 1, (name, from_mirror, from_peers)
        assert len(from_mirror.get(name, [])) + by_peers == len(NODES), (name, from_mirror, from_peers)
    mirror_bytes = sum(sum(sizes) for sizes in from_mirror.values())
    assert mirror_bytes <= 2 * model_size, (mirror_bytes, model_size)

    # 2. Again: nothing to fetch, nothing changed, no server asked for a model's file.
    proc, timings["second"] = distribute()
    assert proc.returncode == 0, out(proc)
    everywhere = "openai/gpt-oss-20b@default: held by nvidia-01, nvidia-02, nvidia-03; nothing to fetch"
    assert everywhere in proc.stdout, out(proc)
    assert all(counts["changed"] == 0 for counts in recap(proc.stdout).values()), changed_tasks(proc.stdout)
    assert model_requests(lab, MIRROR) == from_mirror
    assert [model_requests(lab, node) for node in NODES] == from_peers

    # 3. nvidia-01's copy of one file goes wrong (its size kept) after it was verified; nvidia-03's is removed.
    on(lab, "nvidia-01",
       f"f={MODEL_PATH}/{WRONG}; s=$(stat -c %s $f); head -c $s /dev/zero | tr '\\0' x > $f.new && mv $f.new $f")
    on(lab, "nvidia-03", f"rm -rf {MODEL_PATH} {SHARE}/{KEY}")
    proc, timings["a wrong peer"] = distribute()
    assert proc.returncode == 0, out(proc)
    accused = rf"nvidia-03: nvidia-01 \(\S+\) served a wrong {re.escape(WRONG)} of gpt-oss-20b"
    assert re.search(accused, proc.stdout), out(proc)
    assert "nvidia-01 served a wrong file and was dropped from this run's sources" in proc.stdout, out(proc)
    assert sums(lab, "nvidia-03", MODEL_PATH) == mirror_copy
    assert shared(lab, "nvidia-03") == MODEL_PATH
    # The wrong copy: no longer shared, no longer complete (its node fetches it again next).
    assert on(lab, "nvidia-01", f"ls -d {SHARE}/{KEY} {MODEL_PATH}/{COMPLETE} 2>/dev/null || true").strip() == ""

    # 4. The next run brings nvidia-01 the right file, from its peers: the mirror is not asked for it.
    asked = len(model_requests(lab, MIRROR).get(WRONG, []))
    proc, timings["repair"] = distribute()
    assert proc.returncode == 0, out(proc)
    assert "openai/gpt-oss-20b@default: held by nvidia-02, nvidia-03; to fetch on nvidia-01" in proc.stdout, out(proc)
    for node in NODES:
        assert sums(lab, node, MODEL_PATH) == mirror_copy, node
    assert len(model_requests(lab, MIRROR).get(WRONG, [])) == asked
    print("\n" + "\n".join(f"{name}: {seconds:.1f} s" for name, seconds in timings.items()))


def test_the_air_gapped_page_s_commands_as_written_carry_this_mirror_across(lab, tmp_path):
    """docs/air-gapped.md's sync, pack, verify and unpack lines, as written, with the machine paths they
    name (/srv/vllm-fleet-mirror, /media/usb) bound to the test's (doc_commands.in_mounts): the
    connected machine's /srv/vllm-fleet-mirror is mirror-01's, which `lab up` filled from the lab's
    web root, the other side's an empty directory."""
    from vllm_fleet_lab.paths import lab_paths

    filled = lab_paths(LAB).nodes_dir / MIRROR / "root" / MIRROR_ROOT.lstrip("/")
    usb, other_side = tmp_path / "usb", tmp_path / "other-side"
    usb.mkdir()
    other_side.mkdir()
    connected = {"/srv/vllm-fleet-mirror": filled, "/media/usb": usb}
    across = {"/srv/vllm-fleet-mirror": other_side, "/media/usb": usb}

    # 1. A second sync: everything is present, nothing is fetched (issue 34's target: 0 bytes).
    check = run_doc_command("docs/air-gapped.md", "mirror sync", "--check", inventory=INVENTORY, mounts=connected)
    assert check.returncode == 0, out(check)
    counts = re.search(r"^(\d+) item\(s\): (\d+) present, 0 to fetch, 0 B$", check.stdout, re.M)
    assert counts and counts[1] == counts[2] and int(counts[1]) > 5, out(check)
    again = run_doc_command("docs/air-gapped.md", "mirror sync", lacks=("--check",), inventory=INVENTORY,
                            mounts=connected)
    assert again.returncode == 0, out(again)
    assert re.search(r"^fetched 0 item\(s\), 0 B; \d+ already present; 0 failed$", again.stdout, re.M), out(again)

    # 2. Packed onto the disk, checked on the other side, unpacked there and checked file by file.
    packed = run_doc_command("docs/air-gapped.md", "mirror pack", inventory=INVENTORY, mounts=connected)
    assert packed.returncode == 0 and "packed /srv/vllm-fleet-mirror into " in packed.stdout, out(packed)
    assert (usb / "mirror" / "SHA256SUMS").is_file() and not (Path("/media/usb") / "mirror").exists()
    volumes = run_doc_command("docs/air-gapped.md", "mirror verify /media/usb", inventory=INVENTORY, mounts=across)
    assert volumes.returncode == 0 and ": 0 problem(s)" in volumes.stdout, out(volumes)
    unpacked = run_doc_command("docs/air-gapped.md", "mirror unpack", inventory=INVENTORY, mounts=across)
    assert unpacked.returncode == 0, out(unpacked)
    files = run_doc_command("docs/air-gapped.md", "mirror verify /srv", inventory=INVENTORY, mounts=across)
    verified = re.search(r"verified [1-9]\d* file\(s\).*: 0 problem\(s\)", files.stdout)
    assert files.returncode == 0 and verified, out(files)
    # Every file came across but the key that signs the apt repository, which stays on the connected side.
    kept = {name: size for name, size in sums_here(filled).items() if not name.startswith("keys/")}
    assert kept != sums_here(filled) and sums_here(other_side) == kept


def sums_here(directory: Path) -> dict[str, int]:
    """Every file under `directory` on this machine: {relative path: size}."""
    return {str(path.relative_to(directory)): path.stat().st_size
            for path in directory.rglob("*") if path.is_file() and not path.is_symlink()}


def test_container_mode_installs_pulls_and_serves_from_the_mirror_alone(lab):
    from vllm_fleet_lab import images
    from vllm_fleet_lab.paths import lab_paths

    paths = lab_paths(LAB)
    host_vars = yaml.safe_load((INVENTORY / "host_vars" / f"{MIRROR}.yml").read_text())
    record = json.loads(on(lab, MIRROR, f"cat {MIRROR_ROOT}/mirror.json"))["items"]
    (key, image), = ((k, r) for k, r in record.items() if k.startswith("image:"))
    synced = images.registry_requests(paths)  # the sync's, at lab up: the image copied into the mirror
    assert f"/v2/{image['repository']}/manifests/{image['tag']}" in synced, synced
    pulled = f"127.0.0.1:{host_vars['mirror_port']}/{key.removeprefix('image:')}"

    site = [venv_tool("ansible-playbook"), "-i", str(INVENTORY), "site.yml", "-l", CONTAINER]
    proc = run_kept(site, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, out(proc)
    # The engine, from the mirror's apt repository (the only source the node's apt reads).
    policy = on(lab, CONTAINER, "apt-cache policy podman")
    assert re.search(rf"\*\*\* \S+ \d+\n\s+\d+ http://127\.0\.0\.1:{host_vars['mirror_port']}/apt", policy), policy
    # The unit runs the mirror's image with the model's GPUs as CDI devices, and it answers.
    command = on(lab, CONTAINER, "systemctl show -p ExecStart --value vllm-gpt-oss-20b")
    assert "argv[]=podman run --rm --name vllm-gpt-oss-20b " in command and f" {pulled} -- vllm serve " in command
    assert "--device=nvidia.com/gpu=0 --device=nvidia.com/gpu=1" in command, command
    assert on(lab, CONTAINER, f"podman image inspect --format '{{{{.Digest}}}}' {pulled}").strip() == image["digest"]
    port = re.search(r"--port (\d+)", command)[1]
    models = on(lab, CONTAINER, f"curl -sf http://127.0.0.1:{port}/v1/models")
    assert '"gpt-oss-20b"' in models, models
    # Nothing was asked of the lab's registry (the "internet's") since the sync.
    assert images.registry_requests(paths) == synced

    again = run_kept(site, timeout=RUN_TIMEOUT)
    assert again.returncode == 0 and recap(again.stdout)[CONTAINER]["changed"] == 0, changed_tasks(again.stdout)
