"""The MetaX stack (seed 000) without a lab: the example inventory against the seed,
its validation rules, the units and Dockerfile the roles render, and the lab's
simulated MetaX software - driver package, MACA SDK, overlays - with the engine
stand-in they patch."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ansible.module_utils
import pytest
import yaml

from tests.conftest import ansible_playbook, example_hosts
from tests.systemd_syntax import exec_start
from vllm_fleet.models import resolve_models
from vllm_fleet.render import serve_argv
from vllm_fleet.validation import validate_hosts

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "lab" / "fixtures"
if str(ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
from ansible.module_utils import vllm_fleet_overlay as overlay  # noqa: E402

from tests.conftest import load_module  # noqa: E402

# Seed 000's results table, in its order: (model as the seed names it, A100, MetaX C500) in
# characters per second. Row 8 has no organisation in the seed; Qwen publishes it.
SEED_TABLE = [
    ("unsloth/gpt-oss-20b-BF16", "80.1", "52.9"), ("Qwen/Qwen3-4B", "171.8", "112.3"),
    ("Qwen/Qwen1.5-0.5B-Chat-GPTQ-Int8", "168.5", "135.3"), ("Qwen/Qwen-1_8B-Chat-Int4", "536.4", "192.9"),
    ("Qwen/Qwen1.5-1.8B-Chat-GPTQ-Int4", "153.1", "132.4"), ("deepseek-ai/deepseek-moe-16b-chat", "68.1", "60.7"),
    ("Qwen/Qwen2-7B-Instruct-GPTQ-Int4", "129.2", "127.5"), ("Qwen2.5-7B-Instruct-GPTQ-Int4", "118.1", "133.1"),
    ("tclf90/glm-4-9b-chat-GPTQ-Int4", "92.2", "97.7"), ("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4", "79.6", "72.3"),
    ("Qwen/Qwen-14B-Chat-Int8", "103.1", "56.4"), ("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int8", "81.4", "70.4"),
    ("tclf90/qwq-32b-gptq-int4", "60.3", "53.5"), ("Qwen/Qwen2.5-32B-Instruct-GPTQ-Int4", "60.1", "54.6"),
    ("Qwen/Qwen1.5-32B-Chat-GPTQ-Int4", "58.2", "51.3"), ("tclf90/Qwen3-32B-GPTQ-Int8", "54.0", "41.3"),
    ("tclf90/deepseek-r1-distill-qwen-32b-gptq-int8", "59.9", "45.8"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "46.6", "29.5"), ("Qwen/Qwen2-72B-Instruct-GPTQ-Int4", "48.2", "29.7"),
    ("Qwen/Qwen3-4B-Instruct-2507", "65.4", "71.8"), ("Qwen/Qwen3-4B-Thinking-2507", "73.4", "52.6"),
    ("tclf90/Qwen3-32B-GPTQ-Int4", "54.4", "38.4"), ("Qwen/Qwen3-0.6B-GPTQ-Int8", "117.4", "95.0"),
]
MODELS_FILE = ROOT / "inventories" / "example" / "group_vars" / "metax-nodes" / "models.yml"


@pytest.fixture
def metax():
    return copy.deepcopy(example_hosts()["metax-01"])


def problems(host_vars: dict) -> list[str]:
    hosts = {"metax-01": host_vars}
    return [p for p in validate_hosts(hosts) if p.startswith("host metax-01:")]


# --------------------------------------------------------------------------- the example inventory

def test_every_model_of_the_seed_table_is_in_the_example(metax):
    repos = [m["source"]["repo"] for m in metax["fleet_models"]]
    assert len(repos) == len(SEED_TABLE) == 23
    for repo, (seed_name, _a100, _metax) in zip(repos, SEED_TABLE, strict=False):
        assert repo == seed_name or repo == f"Qwen/{seed_name}", (repo, seed_name)
    # The table's measurements are kept next to each model, for the benchmark to compare with.
    text = MODELS_FILE.read_text()
    for seed_name, a100, metax_speed in SEED_TABLE:
        assert f"{a100} chars/s on A100, {metax_speed} on MetaX C500." in text, seed_name


def test_kinds_follow_the_checkpoints(metax):
    for model in metax["fleet_models"]:
        repo = model["source"]["repo"].lower()
        quantized = any(mark in repo for mark in ("gptq", "-int4", "-int8"))
        expected = "moe" if "moe" in repo else ("gptq" if quantized else "chat")
        assert model["kind"] == expected, model["name"]


def test_gpt_oss_gets_the_triton_backend_and_the_enabled_set_fits_one_node(metax):
    resolved, found = resolve_models(metax["fleet_models"], metax["fleet_accelerator"],
                                     serve_defaults=metax.get("fleet_serve_defaults"),
                                     serve_env=metax.get("fleet_serve_env"))
    assert found == []
    by_name = {m["name"]: m for m in resolved}
    assert by_name["gpt-oss-20b"]["env"]["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN_VLLM_V1"
    enabled = [m for m in resolved if m["enabled"]]
    assert [m["name"] for m in enabled] == ["gpt-oss-20b", "qwen3-4b"]
    assert sum(len(m["devices"]) for m in enabled) <= metax["fleet_accelerator"]["count"] == 8
    # Qwen 1.0, GLM-4 and DeepSeek-MoE ship their own modelling code.
    for name in ("qwen-1.8b-chat-int4", "qwen-14b-chat-int8", "glm-4-9b-chat-gptq-int4", "deepseek-moe-16b-chat"):
        assert "--trust-remote-code" in serve_argv({**by_name[name], "port": 8000}), name
    assert "--quantization" in serve_argv({**by_name["qwen3-0.6b-gptq-int8"], "port": 8000})


def test_lab_versions_are_the_examples(metax):
    lab = yaml.safe_load((ROOT / "lab" / "inventory" / "versions.yml").read_text())["metax"]
    matrix = metax["fleet_matrix"]
    overlays = {o["name"]: o for o in matrix["vllm_overlays"]}
    assert (lab["maca_driver"], lab["maca_sdk"]) == (matrix["maca_driver"]["version"], matrix["maca_sdk"]["version"])
    assert (lab["torch"], lab["triton"], lab["vllm"]) == (matrix["torch"], matrix["triton"], matrix["vllm"]["version"])
    assert lab["overlay_vllm"] == overlays["vllm"]["version"]
    assert lab["overlay_triton"] == overlays["triton-code-generator"]["version"]
    for client in ("modelscope", "modelscope_hub", "huggingface_hub"):
        assert lab[client] == matrix[client]
    # The lab pins its nodes' Python; the example the image's.
    assert matrix["python"] == "3.10" and lab["python"].startswith("3.11")


# --------------------------------------------------------------------------- validation

def test_example_is_valid(metax):
    assert problems(metax) == []


def test_gpt_oss_without_the_triton_backend_is_refused(metax):
    del metax["fleet_models"][0]["env"]["VLLM_ATTENTION_BACKEND"]
    (p,) = problems(metax)
    assert p == ("host metax-01: model gpt-oss-20b: gpt-oss on MetaX needs VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1 "
                 "(seed 000), its environment has None; accepted: VLLM_ATTENTION_BACKEND: TRITON_ATTN_VLLM_V1 in the "
                 "model's env (or fleet_serve_env)")


def test_the_tokenizer_cache_needs_its_matrix_entry(metax):
    del metax["fleet_matrix"]["tiktoken_o200k"]
    (p,) = problems(metax)
    assert p.startswith(
        "host metax-01: model gpt-oss-20b: tokenizer_cache = 'o200k_base' needs fleet_matrix.tiktoken_o200k")


def test_overlays_that_cover_each_other_are_refused(metax):
    overlays = metax["fleet_matrix"]["vllm_overlays"]
    overlays[1]["target"] = "vllm/platforms/__init__.py"
    overlays[1]["name"] = "vllm"
    found = problems(metax)
    assert any("the name 'vllm' is used more than once" in p for p in found), found
    assert any("fleet_matrix.vllm_overlays[1].target = 'vllm/platforms/__init__.py' overlaps "
               "fleet_matrix.vllm_overlays[0].target = 'vllm'" in p for p in found), found


@pytest.mark.parametrize("change,expected", [
    ({"type": "tarball"}, "fleet_matrix.vllm_overlays[0].type = 'tarball' (a string): expected directory"),
    ({"target": "../torch"}, "fleet_matrix.vllm_overlays[0].target = '../torch' (a string): expected a relative path"),
    ({"sha256": "abc"}, "fleet_matrix.vllm_overlays[0].sha256 = 'abc' (a string): expected a sha256 checksum"),
])
def test_overlay_entries_are_checked_by_the_schema(metax, change, expected):
    metax["fleet_matrix"]["vllm_overlays"][0].update(change)
    found = problems(metax)
    assert any(expected in p for p in found), found


def test_container_mode_needs_the_image_and_fetchable_overlays(metax):
    metax["fleet_deploy_mode"] = "container"
    del metax["fleet_matrix"]["vllm_image"]
    metax["fleet_matrix"]["vllm_overlays"][1].pop("file")
    metax["fleet_matrix"]["vllm_overlays"][1]["path"] = "/srv/code_generator.py"
    found = problems(metax)
    assert any(p.startswith("host metax-01: fleet_matrix.vllm_image is missing; container mode") for p in found)
    assert any("fleet_matrix.vllm_overlays[1] (triton-code-generator) is given as path '/srv/code_generator.py'"
               in p for p in found), found


# --------------------------------------------------------------------------- what the roles render

def plan(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "plan"
    proc = ansible_playbook("-i", "inventories/example", "playbooks/plan.yml", "-l", "metax-nodes",
                            "-e", f"plan_dir={out}", *extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out / "metax-01"


@pytest.mark.ansible
def test_host_mode_units_load_maca_and_join_the_video_group(tmp_path):
    node = plan(tmp_path)
    unit = (node / "etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    lines = unit.splitlines()
    assert "User=vllm" in lines and "SupplementaryGroups=video" in lines
    argv = exec_start(unit)
    assert argv[: argv.index("--")] == ["/opt/vllm-fleet/bin/vllm-fleet-launch", "--source", "/etc/profile.d/maca.sh"]
    assert argv[argv.index("--") + 1:] == ["/opt/vllm-fleet/current/venv/bin/vllm", "serve",
                                           "/home/models/gpt-oss-20b-BF16",
                                           "--served-model-name", "gpt-oss-20b", "--port", "8000",
                                           "--host", "127.0.0.1"]
    env = (node / "etc/vllm-fleet/vllm-gpt-oss-20b.env").read_text().splitlines()
    assert "VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1" in env and "CUDA_VISIBLE_DEVICES=0" in env
    qwen = (node / "etc/vllm-fleet/vllm-qwen3-4b.env").read_text().splitlines()
    assert "CUDA_VISIBLE_DEVICES=1" in qwen and not any(line.startswith("VLLM_ATTENTION_BACKEND") for line in qwen)
    # The stack each server runs is in its environment, so a new overlay or release restarts it.
    assert ("FLEET_METAX_STACK=vllm==0.10.2 torch==2.6.0+metax3.2.1.3 triton==3.0.0+metax3.2.1.3 "
            "overlays=000000000000,000000000000") in qwen
    assert not (node / "etc/vllm-fleet/images").exists()


@pytest.mark.ansible
def test_container_unit_line_by_line(tmp_path):
    node = plan(tmp_path, "-e", "fleet_deploy_mode=container")
    unit = (node / "etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    lines = unit.splitlines()
    assert "EnvironmentFile=/etc/vllm-fleet/vllm-gpt-oss-20b.env" in lines
    assert "ExecStartPre=-docker rm -f vllm-gpt-oss-20b" in lines
    assert "ExecStop=docker stop -t 30 vllm-gpt-oss-20b" in lines
    assert not any(line.startswith(("User=", "SupplementaryGroups=")) for line in lines)
    # The vLLM version, then the Dockerfile's own digest (base image, overlays: all it builds from).
    digest = hashlib.sha256((node / "etc/vllm-fleet/images/metax/Dockerfile").read_bytes()).hexdigest()[:12]
    image = f"vllm-fleet/vllm-metax:0.10.2-{digest}"
    argv = exec_start(unit)
    run, inside = argv[: argv.index(image)], argv[argv.index(image) + 1:]
    # MetaX's docker run for its vLLM images: every GPU through /dev/dri and /dev/mxcd, the
    # video group, host IPC, a big /dev/shm, locked memory; the runtime's default seccomp and
    # AppArmor profiles, as seed 000 runs its image (no --security-opt: docs/security.md).
    assert run == [
        "docker", "run", "--rm", "--name", "vllm-gpt-oss-20b",
        "--ipc=host", "--group-add", "video", "--shm-size", "100gb", "--ulimit", "memlock=-1",
        "--device=/dev/dri", "--device=/dev/mxcd",
        "-v", "/opt/vllm-fleet/tiktoken:/opt/vllm-fleet/tiktoken:ro", "-v", "/home/models:/models",
        "--env-file", "/etc/vllm-fleet/vllm-gpt-oss-20b.env", "-p", "127.0.0.1:8000:8000"]
    # No launcher: the image sets MACA's environment itself.
    assert inside == ["vllm", "serve", "/models/gpt-oss-20b-BF16", "--served-model-name", "gpt-oss-20b",
                      "--port", "8000", "--host", "0.0.0.0"]
    # The model's GPUs and the seed's backend come from the environment file, as in host mode.
    env = (node / "etc/vllm-fleet/vllm-gpt-oss-20b.env").read_text().splitlines()
    assert "VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1" in env and "CUDA_VISIBLE_DEVICES=0" in env

    dockerfile = (node / "etc/vllm-fleet/images/metax/Dockerfile").read_text()
    matrix = example_hosts()["metax-01"]["fleet_matrix"]
    assert ("FROM registry.example.internal/quay/maca/vllm:maca.ai3.2.1.3-torch2.6-py310-ubuntu22.04-amd64"
            in dockerfile.splitlines())
    runs = [block for block in dockerfile.split("\nRUN ")[1:]]
    assert len(runs) == 2
    for block, entry in zip(runs, matrix["vllm_overlays"], strict=False):
        url = "https://artifacts.example.internal/vllm-fleet/" + entry["file"]
        assert url in block
        assert f'echo "{entry["sha256"]}  /tmp/vllm-fleet-overlay" | sha256sum --check --strict -' in block
        # The checksum is checked before the overlay is unpacked or copied.
        assert block.index("sha256sum") < block.index("tar -xf" if entry["type"] == "directory" else "cp ")
    assert 'tar -xf /tmp/vllm-fleet-overlay --no-same-owner -C "$site"' in runs[0]
    assert 'cp /tmp/vllm-fleet-overlay "$site/triton/compiler/code_generator.py"' in runs[1]


@pytest.mark.ansible
def test_overlay_state_absent_builds_the_image_without_the_overlays(tmp_path):
    """vllm_overlay_state: absent in container mode: MetaX's image as shipped (no overlay fetched or
    laid), a new tag (the Dockerfile's digest), and no overlays in the stack that restarts the units."""
    node = plan(tmp_path, "-e", "fleet_deploy_mode=container", "-e", "vllm_overlay_state=absent")
    dockerfile = (node / "etc/vllm-fleet/images/metax/Dockerfile").read_text()
    assert "\nRUN " not in dockerfile and "vllm-fleet-overlay" not in dockerfile
    matrix = example_hosts()["metax-01"]["fleet_matrix"]
    assert not [entry["file"] for entry in matrix["vllm_overlays"] if entry["file"] in dockerfile]
    assert "# vllm_overlay_state: absent - the image as MetaX ships it, without the overlays." in dockerfile
    digest = hashlib.sha256(dockerfile.encode()).hexdigest()[:12]
    unit = (node / "etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    assert f"vllm-fleet/vllm-metax:0.10.2-{digest}" in exec_start(unit)
    env = (node / "etc/vllm-fleet/vllm-gpt-oss-20b.env").read_text().splitlines()
    assert "FLEET_METAX_STACK=vllm==0.10.2 torch==2.6.0+metax3.2.1.3 triton==3.0.0+metax3.2.1.3 overlays=" in env


# --------------------------------------------------------------------------- the lab's MetaX software

def _builder():
    return load_module(FIXTURES / "installers" / "metax" / "build.py", "metax_build")


LAB_VERSIONS = yaml.safe_load((ROOT / "lab" / "inventory" / "versions.yml").read_text())["metax"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _builder().build_all(tmp_path_factory.mktemp("metax"), LAB_VERSIONS)


def test_builds_are_reproducible(built, tmp_path):
    again = _builder().build_all(tmp_path, LAB_VERSIONS)
    assert {k: v["sha256"] for k, v in again.items()} == {k: v["sha256"] for k, v in built.items()}
    assert [built[k]["filename"] for k in ("maca_driver", "maca_sdk", "overlay_vllm", "overlay_triton")] == [
        "metax-driver-mxc500-3.2.1.3-deb-x86_64.run", "maca-sdk-mxc500-3.2.1.3-deb-x86_64.tar.xz",
        "vllm-0.10.2-metax3.2.1.3-overlay.tar.gz", "triton-3.0.0-metax3.2.1.3-code_generator.py"]


@pytest.fixture
def node(tmp_path):
    """A fake node root: the MetaX hardware profile, its device nodes and the mx-smi simulator."""
    root = tmp_path / "node"
    profile = json.loads((FIXTURES / "hardware" / "profiles" / "metax.json").read_text())
    (root / "etc/vllm-fleet-lab").mkdir(parents=True)
    (root / "etc/vllm-fleet-lab/hardware.json").write_text(json.dumps(profile))
    (root / "dev/dri").mkdir(parents=True)
    for i in range(profile["count"]):
        (root / f"dev/dri/renderD{128 + i}").touch()
    (root / "dev/mxcd").touch()
    (root / "opt/maca/bin").mkdir(parents=True)
    shutil.copy(FIXTURES / "hardware" / "bin" / "mx-smi", root / "opt/maca/bin/mx-smi")
    return root


def sh(argv: list[str], root: Path, cwd: Path | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "VLLM_FLEET_LAB_ROOT": str(root), "LC_ALL": "C"}
    return subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=60)


def smi(root: Path) -> subprocess.CompletedProcess:
    return sh([sys.executable, str(root / "opt/maca/bin/mx-smi")], root)


def test_driver_package_installs_upgrades_and_needs_a_reboot(built, node, tmp_path):
    run = built["maca_driver"]["path"]
    assert "Failed to initialize MXSML" in smi(node).stdout
    check = sh(["bash", run, "--check"], node)
    assert check.returncode == 0 and "MD5 checksums are OK. All good." in check.stdout
    first = sh(["bash", run, "--", "-f"], node)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "kernel module metax loaded" in first.stdout and "reboot" not in first.stdout.lower()
    table = smi(node).stdout
    assert "Kernel Mode Driver Version: 3.2.1.3" in table and "MACA Version: unknown" in table
    assert (node / "opt/mxdriver/bin/mx-smi").is_file()
    # Without -f an installed driver is not replaced (nobody answers the question).
    assert sh(["bash", run, "--"], node).returncode == 1
    # A newer package: installed, but the old module stays loaded until a reboot.
    newer = _builder().build_driver(tmp_path / "newer", "3.2.2.0")
    upgrade = sh(["bash", newer["path"], "--", "-f"], node)
    assert upgrade.returncode == 0 and "Please reboot the system" in upgrade.stdout
    assert (node / "run/vllm-fleet-lab/reboot-required").read_text() == "metax-driver upgrade 3.2.1.3 3.2.2.0\n"
    assert smi(node).returncode == 1
    # A corrupt package is refused before anything runs.
    broken = tmp_path / "broken.run"
    broken.write_bytes(Path(run).read_bytes()[:-10] + b"0123456789")
    bad = sh(["bash", str(broken), "--", "-f"], node)
    assert bad.returncode == 2 and "Error in MD5 checksums" in bad.stderr


def test_maca_sdk_installs_then_removes_only_its_own_files(built, node, tmp_path):
    unpacked = tmp_path / "sdk"
    unpacked.mkdir()
    subprocess.run(["tar", "-xJf", built["maca_sdk"]["path"], "-C", str(unpacked), "--strip-components=1"], check=True)
    refused = sh(["./mxmaca-sdk-install.sh"], node, cwd=unpacked)
    assert refused.returncode == 1 and "license was not accepted" in refused.stdout
    done = sh(["./mxmaca-sdk-install.sh", "-f"], node, cwd=unpacked)
    assert done.returncode == 0, done.stdout
    assert (node / "opt/maca/Version.txt").read_text() == "Version:3.2.1.3\n"
    assert (node / "opt/maca/lib/libmcruntime.so").is_file() and (node / "opt/maca/mxgpu_llvm/bin/mxcc").is_file()
    sh(["bash", built["maca_driver"]["path"], "--", "-f"], node)
    assert "MACA Version: 3.2.1.3" in smi(node).stdout
    again = sh(["./mxmaca-sdk-install.sh", "-f"], node, cwd=unpacked)
    assert again.returncode == 0 and "already installed" in again.stdout
    # Another release goes in only after the installed one removed itself (MetaX's upgrade order).
    other = _builder().build_sdk(tmp_path / "other", "3.2.2.0")
    other_dir = tmp_path / "other-sdk"
    other_dir.mkdir()
    subprocess.run(["tar", "-xJf", other["path"], "-C", str(other_dir), "--strip-components=1"], check=True)
    clash = sh(["./mxmaca-sdk-install.sh", "-f"], node, cwd=other_dir)
    assert clash.returncode == 1 and "remove it first with /opt/maca/bin/mxmaca-sdk-install.sh -U" in clash.stdout
    removed = sh([str(node / "opt/maca/bin/mxmaca-sdk-install.sh"), "-U"], node)
    assert removed.returncode == 0, removed.stdout
    # The lab's mx-smi simulator was there before MACA and stays.
    assert sorted(str(p.relative_to(node)) for p in (node / "opt/maca").rglob("*")) == [
        "opt/maca/bin", "opt/maca/bin/mx-smi"]


# --------------------------------------------------------------------------- the engine, patched

PROBE = """
import json, sys
from types import SimpleNamespace
from vllm.platforms import resolve_current_platform
platform = resolve_current_platform()
config = SimpleNamespace(parallel_config=SimpleNamespace(devices_needed=int(sys.argv[1])),
                         model_config=SimpleNamespace(architectures=[sys.argv[2]]))
try:
    platform.check_and_update_config(config)
    error = None
except Exception as exc:
    error = str(exc)
print(json.dumps({"platform": platform.__name__, "error": error}))
"""


@pytest.fixture
def site(tmp_path):
    """site-packages with the engine stand-in's vllm and the triton stand-in, as pip leaves them."""
    site = tmp_path / "site-packages"
    shutil.copytree(FIXTURES / "repos" / "vllm" / "vllm", site / "vllm",
                    ignore=shutil.ignore_patterns("__pycache__", "_version.py"))
    shutil.copytree(FIXTURES / "wheels" / "triton" / "triton", site / "triton",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return site


def start(site: Path, root: Path, *, devices: int = 1, architecture: str = "Qwen3ForCausalLM", **env) -> dict:
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1",
            "VLLM_FLEET_LAB_ROOT": str(root), "MACA_PATH": "/opt/maca",
            "LD_LIBRARY_PATH": "/opt/maca/lib:/opt/maca/mxgpu_llvm/lib", **env}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(devices), architecture], env={k: v for k, v in base.items()
                          if v is not None}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def lay(built: dict, site: Path, state: Path, key: str) -> None:
    target, kind, name = {"overlay_vllm": ("vllm", "directory", "vllm"),
                          "overlay_triton": ("triton/compiler/code_generator.py", "file", "triton-code-generator")}[key]
    overlay.apply(name, built[key]["path"], kind, target, str(site), str(state), built[key]["sha256"])


def tree(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(site.rglob("*")) if p.is_file()}


def test_upstream_vllm_refuses_metax_gpus(site, node):
    result = start(site, node)
    assert result["platform"] == "UnspecifiedPlatform"
    assert "has MetaX GPUs (/dev/mxcd) but this vLLM has no MACA platform" in result["error"]


def test_the_overlays_make_vllm_run_on_maca_and_come_off_byte_for_byte(built, site, node, tmp_path):
    (node / "opt/maca/lib").mkdir(parents=True)
    pristine = tree(site)
    state = tmp_path / "overlays"
    lay(built, site, state, "overlay_vllm")
    result = start(site, node)
    assert result["platform"] == "MacaPlatform"
    assert "triton's code generator" in result["error"] and "is not MetaX's" in result["error"]
    lay(built, site, state, "overlay_triton")
    assert start(site, node) == {"platform": "MacaPlatform", "error": None}
    # Each layer the seed needs, missing in turn.
    assert "MACA is not loaded: MACA_PATH is None" in start(site, node, MACA_PATH=None)["error"]
    assert "/opt/maca/lib is not on LD_LIBRARY_PATH" in start(site, node, LD_LIBRARY_PATH="/usr/lib")["error"]
    assert "needs 2 GPUs" in start(site, node, devices=2, CUDA_VISIBLE_DEVICES="3")["error"]
    gpt_oss = start(site, node, architecture="GptOssForCausalLM")
    assert "set VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1" in gpt_oss["error"]
    assert start(site, node, architecture="GptOssForCausalLM",
                 VLLM_ATTENTION_BACKEND="TRITON_ATTN_VLLM_V1")["error"] is None
    # Off again: the stand-ins exactly as they were, and vLLM refuses the GPUs once more.
    overlay.remove("triton-code-generator", str(state))
    overlay.remove("vllm", str(state))
    assert tree(site) == pristine
    assert start(site, node)["platform"] == "UnspecifiedPlatform"


def test_overlay_patch_follows_the_stand_in(built, tmp_path):
    """The vllm overlay is the stand-in's package (every file) plus MetaX's platform."""
    import tarfile

    with tarfile.open(built["overlay_vllm"]["path"]) as tar:
        members = {m.name for m in tar.getmembers() if m.isfile()}
    stand_in = {f"vllm/{p.relative_to(FIXTURES / 'repos' / 'vllm' / 'vllm').as_posix()}"
                for p in (FIXTURES / "repos" / "vllm" / "vllm").rglob("*.py") if "__pycache__" not in p.parts}
    assert members == (stand_in - {"vllm/_version.py"}) | {"vllm/platforms/maca.py"}
    code = Path(built["overlay_triton"]["path"]).read_text()
    assert "MACA_SUPPORT = True" in code and "MACA_SUPPORT = False" not in code
