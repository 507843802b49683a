"""`playbooks/plan.yml` on the example inventory: the units and files the roles would
install, rendered by the roles' own templates without contacting any node."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import ansible_playbook, example_hosts, starts_ansible
from tests.systemd_syntax import exec_start, split_exec
from vllm_fleet import render
from vllm_fleet.models import resolve_models
from vllm_fleet.project import role_dirs
from vllm_fleet.vendors import VENDORS

ROOT = Path(__file__).resolve().parents[2]


def plan(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "plan"
    proc = ansible_playbook("-i", "inventories/example", "playbooks/plan.yml", "-e", f"plan_dir={out}", *extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
@starts_ansible
def host_plan(tmp_path_factory):
    return plan(tmp_path_factory.mktemp("host"))


@pytest.fixture(scope="module")
@starts_ansible
def container_plan(tmp_path_factory):
    return plan(tmp_path_factory.mktemp("container"), "-l", "ascend-nodes", "-e", "fleet_deploy_mode=container")


SEED_001_SERVE = [
    "serve", "/home/models/GPT-OSS", "--served-model-name", "gpt-oss-120b-bf16",
    "--gpu-memory-utilization", "0.95", "--tensor-parallel-size", "8", "--max-model-len", "16384",
    "--compilation-config",
    '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1024, 512, 256, 128, 64, 16, 4, 2, 1]}',
]


def flags(argv: list[str]) -> dict[str, str]:
    """--flag value pairs of an argv (flags without a value map to '')."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            out[argv[i]] = value
            i += 2 if value else 1
        else:
            i += 1
    return out


@pytest.mark.ansible
def test_every_host_gets_its_units_without_contact(host_plan):
    units = sorted(str(p.relative_to(host_plan)) for p in host_plan.rglob("*.service"))
    assert units == [
        "ascend-01/etc/systemd/system/vllm-gpt-oss-120b.service",
        "cpu-01/etc/systemd/system/vllm-bge-m3.service",
        "cpu-01/etc/systemd/system/vllm-qwen3-0.6b.service",
        "metax-01/etc/systemd/system/vllm-gpt-oss-20b.service",
        "metax-01/etc/systemd/system/vllm-qwen3-4b.service",
        *[f"musa-01/etc/systemd/system/vllm-{name}.service" for name in MUSA_ENABLED],
        "nvidia-01/etc/systemd/system/vllm-gpt-oss-20b.service",
    ]


def test_cpu_units_run_the_venv_vllm_with_the_cpu_backends_environment(host_plan):
    unit = (host_plan / "cpu-01/etc/systemd/system/vllm-bge-m3.service").read_text()
    argv = exec_start(unit)
    assert argv[0] == "/opt/vllm-fleet/bin/vllm-fleet-launch" and argv[1] == "--"
    assert argv[2:5] == ["/opt/vllm-fleet/current/venv/bin/vllm", "serve", "/home/models/bge-m3"]
    assert argv[argv.index("--runner"):argv.index("--runner") + 4] == ["--runner", "pooling", "--convert", "embed"]
    assert "SupplementaryGroups" not in unit
    env = (host_plan / "cpu-01/etc/vllm-fleet/vllm-bge-m3.env").read_text()
    assert "VLLM_CPU_KVCACHE_SPACE=4\n" in env and "VLLM_CPU_OMP_THREADS_BIND=auto\n" in env
    assert "VISIBLE_DEVICES" not in env


def test_ascend_unit_carries_every_flag_of_seed_001(host_plan):
    unit = (host_plan / "ascend-01/etc/systemd/system/vllm-gpt-oss-120b.service").read_text()
    argv = exec_start(unit)
    launcher, serve = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    assert launcher == ["/opt/vllm-fleet/bin/vllm-fleet-launch",
                        "--source", "/usr/local/Ascend/ascend-toolkit/set_env.sh",
                        "--source", "/usr/local/Ascend/nnal/atb/set_env.sh"]
    assert serve[0] == "/opt/vllm-fleet/current/venv/bin/vllm"
    seed = flags(SEED_001_SERVE)
    got = flags(serve)
    for flag, value in seed.items():
        assert got.get(flag) == value, (flag, got.get(flag))
    assert serve[1:3] == SEED_001_SERVE[:2]
    assert "User=vllm" in unit and "SupplementaryGroups=HwHiAiUser" in unit
    assert "Restart=on-failure" in unit
    assert "EnvironmentFile=/etc/vllm-fleet/vllm-gpt-oss-120b.env" in unit


def test_ascend_environment_is_seed_001s(host_plan):
    env = (host_plan / "ascend-01/etc/vllm-fleet/vllm-gpt-oss-120b.env").read_text().splitlines()
    for line in ["HCCL_INTRA_ROCE_ENABLE=1", "IGNORE_GRAPH_UPDATE_EXCEPTIONS=0", "VLLM_USE_MODELSCOPE=True",
                 "PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256", "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
                 "TIKTOKEN_RS_CACHE_DIR=/opt/vllm-fleet/tiktoken", "TIKTOKEN_ENCODINGS_BASE=/opt/vllm-fleet/tiktoken"]:
        assert line in env


def test_unit_command_is_the_one_render_produces(host_plan):
    """One source of truth: the unit's serve argv is what vllm_fleet.render gives for the model."""
    host = example_hosts()["ascend-01"]
    (model,), problems = resolve_models(host["fleet_models"], host["fleet_accelerator"],
                                        serve_defaults=host["fleet_serve_defaults"], serve_env=host["fleet_serve_env"])
    assert problems == []
    unit = (host_plan / "ascend-01/etc/systemd/system/vllm-gpt-oss-120b.service").read_text()
    argv = exec_start(unit)
    assert argv[argv.index("--") + 1:] == render.serve_argv(model, "/opt/vllm-fleet/current/venv/bin/vllm")
    shell = (host_plan / "ascend-01/commands/vllm-gpt-oss-120b.sh").read_text().splitlines()[-1]
    import shlex
    assert shlex.split(shell) == render.serve_argv(model, "/opt/vllm-fleet/current/venv/bin/vllm")


@pytest.mark.ansible
def test_container_unit_line_by_line(container_plan):
    unit = (container_plan / "ascend-01/etc/systemd/system/vllm-gpt-oss-120b.service").read_text()
    lines = unit.splitlines()
    assert "ExecStartPre=-docker rm -f vllm-gpt-oss-120b" in lines
    assert "ExecStop=docker stop -t 30 vllm-gpt-oss-120b" in lines
    assert not any(line.startswith("User=") for line in lines)
    argv = exec_start(unit)
    # The two commits, then the Dockerfile's own digest (all the image is built from).
    digest = dockerfile_digest(container_plan / "ascend-01", "ascend")
    image = f"vllm-fleet/vllm-ascend:275de3417065-37d8fecc4437-{digest}"
    assert argv[:5] == ["docker", "run", "--rm", "--name", "vllm-gpt-oss-120b"]
    run, inside = argv[: argv.index(image)], argv[argv.index(image) + 1:]
    # Seed 001's docker run: -u 0 --ipc=host (--privileged only when asked for), every NPU and control device...
    assert run[5:9] == ["-u", "0", "--ipc=host", "--device=/dev/davinci0"] and "--privileged" not in run
    assert [a for a in run if a.startswith("--device=")] == (
        [f"--device=/dev/davinci{i}" for i in range(8)]
        + ["--device=/dev/davinci_manager", "--device=/dev/devmm_svm", "--device=/dev/hisi_hdc"])
    # ...its mounts, with the models directory at /model...
    mounts = [run[i + 1] for i, a in enumerate(run) if a == "-v"]
    assert mounts[:5] == ["/usr/local/dcmi:/usr/local/dcmi", "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
                          "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
                          "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
                          "/etc/ascend_install.info:/etc/ascend_install.info"]
    assert "/home/models:/model" in mounts
    # ...and its environment, from the same file as host mode (never inline, so secrets stay out of the unit).
    assert run[run.index("--env-file") + 1] == "/etc/vllm-fleet/vllm-gpt-oss-120b.env"
    assert not any(a == "-e" for a in run)
    # Published on the listen address only (loopback by default); inside, on the container's interfaces.
    assert run[-2:] == ["-p", "127.0.0.1:8000:8000"]
    serve = inside[inside.index("--") + 1:]
    assert serve[:3] == ["vllm", "serve", "/model/GPT-OSS"]
    assert flags(serve) == {**flags(SEED_001_SERVE), "--port": "8000", "--host": "0.0.0.0"}
    docker = (container_plan / "ascend-01/etc/vllm-fleet/images/ascend/Dockerfile").read_text()
    assert "FROM registry.example.internal/quay/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11" in docker
    assert "checkout 275de34170654274616082721348b7edd9741d32" in docker
    assert "checkout 37d8fecc443786b7fd5c73be553013136a6bfeba" in docker
    assert "VLLM_TARGET_DEVICE=empty pip install -e ." in docker
    assert "pip install torch==2.7.1 torch-npu==2.7.1" in docker


def test_without_a_mirror_the_engine_gets_no_insecure_registry(container_plan):
    assert not [p for p in container_plan.rglob("*") if p.parent.name in ("docker", "registries.conf.d")]


@pytest.mark.ansible
def test_with_a_mirror_the_engine_takes_its_registry_over_plain_http(tmp_path):
    """Container mode with the fleet's mirror: docker's daemon configuration (NVIDIA) and podman's drop-in
    (Ascend) name the mirror's registry as an insecure one, and the images come from it."""
    import tomllib

    inv, out = full_site(tmp_path), tmp_path / "plan"
    (inv / "group_vars" / "all" / "listen.yml").unlink()  # loopback: no API key needed
    (inv / "host_vars").mkdir(exist_ok=True)
    (inv / "host_vars" / "ascend-01.yml").write_text("fleet_container_runtime: podman\n")
    proc = ansible_playbook("-i", str(inv), "playbooks/plan.yml", "-e", f"plan_dir={out}", "-l", "ascend-01,nvidia-01",
                            "-e", "fleet_deploy_mode=container")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    files = tree(out)
    assert json.loads(files["nvidia-01/etc/docker/daemon.json"]) == {"insecure-registries": ["192.0.2.7:8081"]}
    assert files["nvidia-01/etc/docker/vllm-fleet-mirror-registry"] == "192.0.2.7:8081\n"
    assert "nvidia-01/etc/containers/registries.conf.d/50-vllm-fleet-mirror.conf" not in files
    drop_in = tomllib.loads(files["ascend-01/etc/containers/registries.conf.d/50-vllm-fleet-mirror.conf"])
    assert drop_in == {"registry": [{"location": "192.0.2.7:8081", "insecure": True}]}
    assert not [f for f in files if f.startswith("ascend-01/etc/docker/")]
    assert "FROM 192.0.2.7:8081/ascend/cann:" in files["ascend-01/etc/vllm-fleet/images/ascend/Dockerfile"]


def dockerfile_digest(node: Path, vendor: str) -> str:
    """The first 12 hex digits of the sha256 of the Dockerfile the plan would build on a node."""
    return hashlib.sha256((node / f"etc/vllm-fleet/images/{vendor}/Dockerfile").read_bytes()).hexdigest()[:12]


def unit_image(unit: Path) -> str:
    """The image a container unit runs: the docker run argument right after its last option."""
    return next(a for a in exec_start(unit.read_text()) if a.startswith("vllm-fleet/vllm-"))


@pytest.mark.ansible
def test_a_built_images_tag_moves_with_any_input_of_its_dockerfile(container_plan, tmp_path):
    """An input the readable part of the tag does not name (here the pip index) still moves the
    tag, so the unit changes and restarts on the image built from the new Dockerfile."""
    unit = "etc/systemd/system/vllm-gpt-oss-120b.service"
    other = plan(tmp_path, "-l", "ascend-nodes", "-e", "fleet_deploy_mode=container",
                 "-e", "fleet_pip_index_url=http://127.0.0.1:3141/other/simple")
    before, after = unit_image(container_plan / "ascend-01" / unit), unit_image(other / "ascend-01" / unit)
    assert before.rsplit("-", 1)[0] == after.rsplit("-", 1)[0] == "vllm-fleet/vllm-ascend:275de3417065-37d8fecc4437"
    assert before.endswith("-" + dockerfile_digest(container_plan / "ascend-01", "ascend"))
    assert after.endswith("-" + dockerfile_digest(other / "ascend-01", "ascend"))
    assert before != after


@pytest.mark.ansible
def test_secrets_are_masked_in_the_plan(tmp_path):
    # In a file: a secret inline on the command line is refused (validation.secrets.inline_secret_problems).
    given = tmp_path / "models.json"
    given.write_text('{"fleet_models": [{"name": "m", "kind": "chat", "path": "/home/models/m", '
                     '"secret_env": {"VLLM_API_KEY": "sk-plan-secret-123"}}]}')
    out = plan(tmp_path, "-l", "nvidia-nodes", "-e", f"@{given}")
    files = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    assert not any("sk-plan-secret-123" in text for text in files.values())
    secret = out / "nvidia-01/etc/vllm-fleet/vllm-m.secret.env"
    assert "VLLM_API_KEY=********" in secret.read_text().splitlines()
    unit = (out / "nvidia-01/etc/systemd/system/vllm-m.service").read_text()
    assert "EnvironmentFile=/etc/vllm-fleet/vllm-m.secret.env" in unit


@pytest.mark.ansible
def test_a_team_limit_equal_to_a_port_leaves_the_port_readable(tmp_path):
    """One rule of what a secret is (vllm_fleet.secrets.secret_values): a team's key is masked in
    the plan, its requests_per_minute (no secret by its spec) is not, even where it equals a port."""
    from vllm_fleet import api  # noqa: PLC0415 - ansible-runner only where a test runs a plan

    key = "team-key-" + "z" * 16
    result = api.plan("inventories/example", tmp_path / "plan", limit="nvidia-nodes",
                      extravars={"fleet_serve_base_port": 8123},
                      secrets={"router_api_keys": [{"name": "team-a", "key": key, "requests_per_minute": 8123}]})
    assert result.ok, str(result)
    units = "".join(p.read_text() for p in (tmp_path / "plan").rglob("*.service"))
    assert "--port 8123" in units and "********" not in units.replace("VLLM_API_KEY=********", "")
    assert not any(key in p.read_text() for p in (tmp_path / "plan").rglob("*") if p.is_file())


def test_systemd_splitter_round_trips_render():
    argv = ["/bin/x", "plain", 'a "quoted" json', "100%", "$HOME", "back\\slash", "{\"k\": [1, 2]}"]
    assert split_exec(render.systemd_command(argv)) == argv


# ------------------------------------------------------------------ NVIDIA (seed 003)

SEED_003_FLAGS = {"--served-model-name": "gpt-oss-20b", "--max-model-len": "32768", "--enable-prefix-caching": "",
                  "--max-num-seqs": "256"}
ADAPTERS = ["gpt-oss-20b-support", "gpt-oss-20b-coding", "gpt-oss-20b-writing"]


@pytest.fixture(scope="module")
@starts_ansible
def nvidia_container_plans(tmp_path_factory):
    """Container mode of the NVIDIA example with docker and with podman."""
    return {runtime: plan(tmp_path_factory.mktemp(runtime), "-l", "nvidia-nodes", "-e", "fleet_deploy_mode=container",
                          "-e", f"fleet_container_runtime={runtime}")
            for runtime in ("docker", "podman")}


def lora_modules(argv: list[str]) -> list[str]:
    start = argv.index("--lora-modules") + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    return argv[start:end]


def test_nvidia_unit_carries_seed_003_and_the_adapters(host_plan):
    unit = (host_plan / "nvidia-01/etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    argv = exec_start(unit)
    assert argv[: argv.index("--")] == ["/opt/vllm-fleet/bin/vllm-fleet-launch"]
    serve = argv[argv.index("--") + 1:]
    assert serve[:3] == ["/opt/vllm-fleet/current/venv/bin/vllm", "serve", "/home/models/gpt-oss-20b"]
    got = flags(serve)
    for flag, value in {**SEED_003_FLAGS, "--tensor-parallel-size": "2", "--port": "8000", "--host": "127.0.0.1",
                        "--enable-lora": "", "--max-loras": "3", "--max-lora-rank": "64"}.items():
        assert got.get(flag) == value, (flag, got.get(flag))
    assert lora_modules(serve) == [f"{a}=/home/models/lora/{a}" for a in ADAPTERS]
    assert "User=vllm" in unit.splitlines() and "SupplementaryGroups=video" in unit.splitlines()
    env = (host_plan / "nvidia-01/etc/vllm-fleet/vllm-gpt-oss-20b.env").read_text().splitlines()
    assert "CUDA_VISIBLE_DEVICES=0,1" in env and "TIKTOKEN_RS_CACHE_DIR=/opt/vllm-fleet/tiktoken" in env


@pytest.mark.ansible
def test_nvidia_container_unit_line_by_line(nvidia_container_plans):
    out = nvidia_container_plans["docker"]
    unit = (out / "nvidia-01/etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    lines = unit.splitlines()
    assert "ExecStartPre=-docker rm -f vllm-gpt-oss-20b" in lines
    assert "ExecStop=docker stop -t 30 vllm-gpt-oss-20b" in lines
    assert "EnvironmentFile=/etc/vllm-fleet/vllm-gpt-oss-20b.env" in lines
    assert not any(line.startswith(("User=", "SupplementaryGroups=")) for line in lines)
    # The quotes are docker's: --gpus reads a CSV list, so two devices are one quoted field.
    assert '--gpus "\\"device=0,1\\""' in unit
    argv = exec_start(unit)
    # The vLLM OpenAI image of the matrix's release, without a registry host of its own:
    # the prefix is the inventory's fleet_container_registry.
    image = "registry.example.internal/quay/vllm/vllm-openai:v0.11.2"
    run, inside = argv[: argv.index(image)], argv[argv.index(image) + 1:]
    assert run == [
        "docker", "run", "--rm", "--name", "vllm-gpt-oss-20b",
        "--ipc=host", "--entrypoint=/usr/local/bin/vllm-fleet-launch",
        "--gpus", '"device=0,1"',
        "-v", "/opt/vllm-fleet/tiktoken:/opt/vllm-fleet/tiktoken:ro",
        "-v", "/opt/vllm-fleet/bin/vllm-fleet-launch:/usr/local/bin/vllm-fleet-launch:ro",
        "-v", "/home/models:/models",
        "--env-file", "/etc/vllm-fleet/vllm-gpt-oss-20b.env",
        # Inside, the model's GPUs are numbered from 0 whatever their host numbers.
        "-e", "CUDA_VISIBLE_DEVICES=0,1",
        "-p", "127.0.0.1:8000:8000",
    ]
    assert inside[:4] == ["--", "vllm", "serve", "/models/gpt-oss-20b"]
    got = flags(inside)
    for flag, value in {**SEED_003_FLAGS, "--tensor-parallel-size": "2", "--port": "8000", "--host": "0.0.0.0",
                        "--enable-lora": ""}.items():
        assert got.get(flag) == value, (flag, got.get(flag))
    assert lora_modules(inside) == [f"{a}=/models/lora/{a}" for a in ADAPTERS]
    # Nothing is built for NVIDIA: upstream's image is pulled as it is.
    assert not (out / "nvidia-01/etc/vllm-fleet/images").exists()


def test_nvidia_container_unit_with_podman_uses_cdi_devices(nvidia_container_plans):
    unit = (nvidia_container_plans["podman"] / "nvidia-01/etc/systemd/system/vllm-gpt-oss-20b.service").read_text()
    argv = exec_start(unit)
    assert argv[:2] == ["podman", "run"]
    assert "--gpus" not in argv
    assert [a for a in argv if a.startswith("--device=")] == ["--device=nvidia.com/gpu=0", "--device=nvidia.com/gpu=1"]
    assert argv[argv.index("-e") + 1] == "CUDA_VISIBLE_DEVICES=0,1"


def test_container_devices_are_renumbered_inside(tmp_path):
    """A model on GPUs 1 and 3 sees them as 0 and 1 inside its container."""
    model = {"unit": "vllm-m", "path": "/home/models/m", "served_model_name": ["m"], "port": 8001,
             "devices": [1, 3], "serve": {"lora_modules": ["a=/home/models/lora/a", "b=/srv/b"]}}
    settings = {"gpus": True, "visible_devices_env": "CUDA_VISIBLE_DEVICES", "models_dir": "/home/models",
                "models_mount": "/models"}
    argv = render.container_argv(model, settings, runtime="docker", env_files=[], image="img:1")
    assert argv[argv.index("--gpus") + 1] == '"device=1,3"'
    assert argv[argv.index("-e") + 1] == "CUDA_VISIBLE_DEVICES=0,1"
    # Adapters under the models directory are read through its mount; others keep their path.
    assert lora_modules(argv) == ["a=/models/lora/a", "b=/srv/b"]


# ------------------------------------------------------------------ Moore Threads (seed 004)

#: The example's enabled MUSA models, sorted (one GPU each, eight on the 8-GPU node).
MUSA_ENABLED = sorted(["bge-m3", "bge-reranker-v2-m3", "deepseek-ocr-2", "gptq-qwen3-8b",
                       "gptq-qwen3-vl-8b-instruct-4bit-group", "gptq-qwen3.6-35b-a3b-4bit-group",
                       "qwen3-30b-a3b-gptq-int4", "qwen3.6-27b-gptq-v1"])
MUSA_ENV = "/home/dev/miniforge3/envs/v1.4.2"
# The guide's general template, as the unit passes it (vLLM's long spellings).
SEED_004_GENERAL = {"--host": "127.0.0.1", "--tensor-parallel-size": "1", "--gpu-memory-utilization": "0.7",
                    "--dtype": "bfloat16", "--block-size": "32", "--num-gpu-blocks-override": "512",
                    "--max-model-len": "16384", "--max-num-seqs": "1", "--swap-space": "0",
                    "--no-enable-prefix-caching": "", "--trust-remote-code": "",
                    "--compilation-config": '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1]}'}


def musa_unit(host_plan, name: str) -> tuple[str, list[str], list[str]]:
    unit = (host_plan / f"musa-01/etc/systemd/system/vllm-{name}.service").read_text()
    argv = exec_start(unit)
    return unit, argv[: argv.index("--")], argv[argv.index("--") + 1:]


@pytest.mark.parametrize("name", MUSA_ENABLED)
def test_musa_unit_activates_aimodule_and_runs_its_vllm(host_plan, name):
    unit, launcher, serve = musa_unit(host_plan, name)
    assert launcher == ["/opt/vllm-fleet/bin/vllm-fleet-launch", "--conda", "/home/dev/miniforge3", "v1.4.2"]
    assert serve[:2] == [f"{MUSA_ENV}/bin/vllm", "serve"]
    # The guide's `sudo sh -c "echo 3 > /proc/sys/vm/drop_caches"`, opted in by the example.
    assert 'ExecStartPre=-+/bin/sh -c "sync; echo 3 > /proc/sys/vm/drop_caches"' in unit


@pytest.mark.parametrize("name,extra", [
    ("gptq-qwen3-8b", {"--quantization": "gptq"}),
    ("qwen3.6-27b-gptq-v1", {"--quantization": "gptq"}),
    ("qwen3-30b-a3b-gptq-int4", {"--quantization": "gptq", "--dtype": "float16"}),
    ("gptq-qwen3.6-35b-a3b-4bit-group", {"--quantization": "gptq"}),
    ("gptq-qwen3-vl-8b-instruct-4bit-group", {"--limit-mm-per-prompt": '{"image": 1}', "--quantization": "gptq",
                                              "--hf-overrides": '{"text_config": {"tie_word_embeddings": false}}'}),
    ("deepseek-ocr-2", {"--limit-mm-per-prompt": '{"image": 1}', "--max-model-len": "8192"}),
])
def test_musa_generation_units_carry_the_seed_template(host_plan, name, extra):
    _unit, _launcher, serve = musa_unit(host_plan, name)
    assert flags(serve) == {"--served-model-name": name, "--port": flags(serve)["--port"], **SEED_004_GENERAL, **extra}


@pytest.mark.parametrize("name,convert", [("bge-m3", "embed"), ("bge-reranker-v2-m3", "classify")])
def test_musa_pooling_units_are_the_seeds_eager_template(host_plan, name, convert):
    _unit, _launcher, serve = musa_unit(host_plan, name)
    assert flags(serve) == {"--served-model-name": name, "--port": flags(serve)["--port"], "--host": "127.0.0.1",
                            "--tensor-parallel-size": "1", "--gpu-memory-utilization": "0.7", "--dtype": "float16",
                            "--max-num-seqs": "1", "--swap-space": "0", "--no-enable-prefix-caching": "",
                            "--trust-remote-code": "", "--runner": "pooling", "--convert": convert,
                            "--enforce-eager": ""}


@pytest.mark.parametrize("name,env", [
    ("gptq-qwen3-8b", {}),
    ("qwen3-30b-a3b-gptq-int4", {"VLLM_MUSA_ATTN": "tilelang", "VLLM_MUSA_TILELANG_KVREUSE": "1"}),
    ("gptq-qwen3.6-35b-a3b-4bit-group", {"VLLM_MUSA_ATTN": "tilelang"}),
    ("bge-m3", {"VLLM_MUSA_STARTUP_WARMUP": "0"}),
    ("bge-reranker-v2-m3", {"VLLM_MUSA_STARTUP_WARMUP": "0"}),
])
def test_musa_environment_is_seed_004s(host_plan, name, env):
    text = (host_plan / f"musa-01/etc/vllm-fleet/vllm-{name}.env").read_text()
    values = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    devices = values.pop("MUSA_VISIBLE_DEVICES")
    assert values == env
    assert len(devices.split(",")) == 1  # tensor parallel 1: one GPU per model
    # Triton's cache is the unit's own, not the guide's shared /tmp/triton.
    unit = (host_plan / f"musa-01/etc/systemd/system/vllm-{name}.service").read_text()
    assert f"TRITON_CACHE_DIR=/var/cache/vllm-fleet/vllm-{name}/triton" in unit


# ------------------------------------------------------------------ every host of the run (issue 35, item 1)

#: Roles that write files on a host but whose files no plan shows yet, each with its reason: a
#: new role with templates fails test_every_role_template_is_planned until it is planned or listed.
NOT_PLANNED: dict[str, str] = {}
#: Where each role gives the plan its files: the files that name its templates (and the file
#: lists in its templates/*.json.j2, which these name).
PLAN_SOURCES = ("vars/main.yml", "tasks/plan.yml")


def test_every_role_template_is_planned():
    """Every template of a role that has templates is rendered by the role's plan (tasks/plan.yml,
    with the list in vars/main.yml), or the role is listed in NOT_PLANNED with its reason."""
    missing = []
    for role in [p for p in role_dirs() if (p / "templates").is_dir()]:
        if role.name in NOT_PLANNED:
            continue
        if not (role / "tasks" / "plan.yml").is_file():
            missing.append(f"{role.name}: no tasks/plan.yml")
            continue
        text = "".join((role / src).read_text() for src in PLAN_SOURCES if (role / src).is_file())
        # The file lists a role renders from templates of its own (templates/files.json.j2 ...).
        text += "".join(p.read_text() for p in sorted((role / "templates").glob("*.json.j2")))
        # The image's Dockerfile, per vendor.
        text += (ROOT / "roles" / "stages" / "fleet" / "vars" / "main.yml").read_text()
        for template in sorted((role / "templates").rglob("*.j2")):
            name = str(template.relative_to(role / "templates"))
            vendor = name.split(".", 1)[0]
            if vendor in VENDORS and f"{{{{ fleet_accelerator.vendor }}}}.{name.split('.', 1)[1]}" in text:
                continue
            loops = name.replace("vllm-fleet-device-health.service", "' ~ unit ~ '").replace(
                "vllm-fleet-device-health.timer", "' ~ unit ~ '")
            if name not in text and loops not in text:
                missing.append(f"{role.name}: {name} is in no plan")
    assert missing == []
    assert not set(NOT_PLANNED) - {p.name for p in role_dirs()}, "NOT_PLANNED names a removed role"


def included_plans(tasks) -> set[str]:
    """The roles whose tasks/plan.yml `tasks` (a play's or a task file's) include, blocks included;
    the vendor's role of the contract (`{{ fleet_vendor.role }}`) stands for every vendor's."""
    found: set[str] = set()
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always", "pre_tasks", "tasks", "post_tasks"):
            found |= included_plans(task.get(key))
        include = task.get("ansible.builtin.include_role") or task.get("ansible.builtin.import_role")
        if isinstance(include, dict) and include.get("tasks_from") == "plan.yml":
            name = str(include["name"])
            found |= {f"vendors/{v}" for v in VENDORS} if name == "{{ fleet_vendor.role }}" else {name}
    return found


def test_every_role_that_writes_files_is_in_the_plan():
    """Every role that writes files from templates (those NOT_PLANNED aside) has its tasks/plan.yml
    reached from playbooks/plan.yml, directly or through another role's plan (MetaX's MACA profile
    through the vendor's plan, a venv's pip.conf through its includer's), so a role that writes a
    file the plan lacks, or a plan nobody runs, fails here."""
    import yaml

    reached, todo = set(), sorted(included_plans(yaml.safe_load((ROOT / "playbooks" / "plan.yml").read_text())))
    while todo:
        name = todo.pop()
        plan_file = ROOT / "roles" / name / "tasks" / "plan.yml"
        if name in reached or not plan_file.is_file():
            continue
        reached.add(name)
        todo += sorted(included_plans(yaml.safe_load(plan_file.read_text())) - reached)
    layered = {str(p.relative_to(ROOT / "roles")) for p in role_dirs()}
    writers = {name for name in layered if (ROOT / "roles" / name / "templates").is_dir()
               and name.split("/")[-1] not in NOT_PLANNED}
    planned = {name for name in layered if (ROOT / "roles" / name / "tasks" / "plan.yml").is_file()}
    assert {"blocks/python_env", "vendors/metax_maca", "vendors/metax", "blocks/apt_packages", "vendors/nvidia",
            "vendors/nvidia_driver", "vendors/nvidia_container_toolkit"} <= reached
    assert sorted(writers - reached) == [], "roles whose files no plan renders"
    assert sorted(planned - reached) == [], "a tasks/plan.yml that playbooks/plan.yml never reaches"


def test_the_release_venvs_pip_settings_and_macas_profile_are_planned(host_plan, container_plan):
    """blocks/python_env's pip.conf in the release's venv of every vendor with releases (host mode),
    vendors/metax_maca's profile script on the MetaX node, each as its converge writes it."""
    for node in ("ascend-01", "cpu-01", "metax-01", "nvidia-01"):
        confs = list((host_plan / node / "opt/vllm-fleet/releases").glob("*/venv/pip.conf"))
        assert len(confs) == 1, node
        assert "[global]\ndisable-pip-version-check = true\n" in confs[0].read_text(), node
    cpu = next((host_plan / "cpu-01" / "opt/vllm-fleet/releases").glob("*/venv/pip.conf")).read_text()
    assert "index-url = https://pypi.example.internal/vllm-cpu/simple/" in cpu.splitlines()  # the node's index
    # Moore Threads' AIModule keeps its conda environment in place: no release, no venv of ours.
    assert not (host_plan / "musa-01" / "opt/vllm-fleet/releases").exists()
    assert [str(p.relative_to(host_plan)) for p in host_plan.glob("*/etc/profile.d/*")] == [
        "metax-01/etc/profile.d/maca.sh"]
    maca = (host_plan / "metax-01/etc/profile.d/maca.sh").read_text()
    assert "export MACA_PATH=/opt/maca\n" in maca and 'export CUDA_PATH="${CUCC_PATH}"' in maca
    # Container mode: vLLM comes in the image, no release venv on the node.
    assert not list(container_plan.glob("*/opt/vllm-fleet/releases"))


#: A repository's signing key as the inventory gives it (`key`), here on one line with spaces around it:
#: validation (vllm_fleet/validation/strings.py) refuses a newline in any inventory value.
#: An armored key as the inventory gives it (`key: |`): on several lines, its own class (armored).
APT_KEY = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGplanKEYonlyForTheTest\nabcd\n=AbCd\n"
           "-----END PGP PUBLIC KEY BLOCK-----\n")


@pytest.mark.ansible
def test_nvidias_apt_sources_keys_and_pins_are_planned(tmp_path, host_plan):
    """roles/blocks/apt_packages's files on an NVIDIA node, through the vendor's plan with the set,
    repositories and packages its driver roles give the converge: each repository's deb822 source,
    the signing key the inventory gives (one from key_url is the node's to download), and the pins
    at the matrix's package versions; the container toolkit's in container mode only."""
    import json

    driver = [{"name": "archive", "uris": ["https://apt.example.internal/ubuntu"], "suites": ["jammy", "jammy-updates"],
               "components": ["restricted"], "key": APT_KEY},
              {"name": "lab", "uris": ["http://192.0.2.9/apt"], "suites": ["stable"], "components": ["main"],
               "trusted": True}]
    toolkit = [{"name": "libnvidia-container", "uris": ["https://apt.example.internal/libnvidia-container/deb/amd64"],
                "suites": ["/"], "key_url": "https://apt.example.internal/keys/nvidia.asc", "key_sha256": "0" * 64}]
    out = plan(tmp_path, "-l", "nvidia-nodes", "-e", "fleet_deploy_mode=container", "-e", json.dumps(
        {"nvidia_driver_apt_repositories": driver, "nvidia_container_toolkit_apt_repositories": toolkit}))
    node = out / "nvidia-01"
    apt = sorted(str(p.relative_to(node)) for p in (node / "etc/apt").rglob("*") if p.is_file())
    assert apt == ["etc/apt/keyrings/vllm-fleet-nvidia-driver-archive.asc",
                   "etc/apt/preferences.d/vllm-fleet-nvidia-container-toolkit",
                   "etc/apt/preferences.d/vllm-fleet-nvidia-driver",
                   "etc/apt/sources.list.d/vllm-fleet-nvidia-container-toolkit-libnvidia-container.sources",
                   "etc/apt/sources.list.d/vllm-fleet-nvidia-driver-archive.sources",
                   "etc/apt/sources.list.d/vllm-fleet-nvidia-driver-lab.sources"]
    # The key as tasks/repositories.yml writes it: trimmed, one newline; a public key, not masked.
    assert (node / "etc/apt/keyrings/vllm-fleet-nvidia-driver-archive.asc").read_text() == APT_KEY.strip() + "\n"
    archive = (node / "etc/apt/sources.list.d/vllm-fleet-nvidia-driver-archive.sources").read_text().splitlines()
    assert archive[-5:] == ["Types: deb", "URIs: https://apt.example.internal/ubuntu", "Suites: jammy jammy-updates",
                            "Components: restricted",
                            "Signed-By: /etc/apt/keyrings/vllm-fleet-nvidia-driver-archive.asc"]
    lab = (node / "etc/apt/sources.list.d/vllm-fleet-nvidia-driver-lab.sources").read_text().splitlines()
    assert lab[-1] == "Trusted: yes" and not any(line.startswith("Signed-By") for line in lab)
    # A flat repository: suite "/", no components; its key (key_url) is downloaded by the node.
    flat = (node / "etc/apt/sources.list.d/vllm-fleet-nvidia-container-toolkit-libnvidia-container.sources")
    assert flat.read_text().splitlines()[-4:] == [
        "Types: deb", "URIs: https://apt.example.internal/libnvidia-container/deb/amd64", "Suites: /",
        "Signed-By: /etc/apt/keyrings/vllm-fleet-nvidia-container-toolkit-libnvidia-container.asc"]

    def pins(path: Path) -> dict[str, str]:
        lines = path.read_text().splitlines()
        return {lines[i].removeprefix("Package: "): lines[i + 1].removeprefix("Pin: version ")
                for i, line in enumerate(lines) if line.startswith("Package: ")
                if lines[i + 2] == "Pin-Priority: 1001"}

    # The matrix's package versions (inventories/example/group_vars/nvidia-nodes/matrix.yml).
    assert pins(node / "etc/apt/preferences.d/vllm-fleet-nvidia-driver") == {
        "nvidia-driver-570": "570.195.03-0ubuntu0.22.04.1"}
    assert pins(node / "etc/apt/preferences.d/vllm-fleet-nvidia-container-toolkit") == dict.fromkeys(
        ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
         "libnvidia-container1"], "1.17.8-1")
    # Host mode (the example's repositories, keys from key_url): the driver's source and pins, no
    # toolkit; no other vendor's stack writes apt files of its own.
    assert sorted(str(p.relative_to(host_plan)) for p in host_plan.glob("*/etc/apt/*/*")) == [
        "nvidia-01/etc/apt/preferences.d/vllm-fleet-nvidia-driver",
        "nvidia-01/etc/apt/sources.list.d/vllm-fleet-nvidia-driver-ubuntu-restricted.sources"]


def test_the_hub_clients_pip_settings_are_planned(host_plan):
    """blocks/model_fetch's hub clients' venv (a node with a hub model and no fleet mirror), with the
    pip settings blocks/python_env writes in it: the node's index, as in the release's venv."""
    for node in ("ascend-01", "cpu-01", "metax-01", "nvidia-01"):
        conf = (host_plan / node / "opt/vllm-fleet/hub-tools/pip.conf").read_text()
        release = next((host_plan / node / "opt/vllm-fleet/releases").glob("*/venv/pip.conf")).read_text()
        assert conf == release and "[global]\ndisable-pip-version-check = true\n" in conf, node
    cpu = (host_plan / "cpu-01/opt/vllm-fleet/hub-tools/pip.conf").read_text()
    assert "index-url = https://pypi.example.internal/vllm-cpu/simple/" in cpu.splitlines()
    # Moore Threads' example fetches its models from git and local paths: no hub client.
    assert not (host_plan / "musa-01/opt/vllm-fleet/hub-tools").exists()


def full_site(tmp_path: Path) -> Path:
    """The example inventory with a router, a monitoring host and a mirror, models listening
    beyond loopback (behind the group's key), a router endpoint for gpt-oss-20b, hub models to
    the nodes in waves."""
    import shutil

    import yaml

    inv = tmp_path / "site"
    shutil.copytree(ROOT / "inventories" / "example", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    for group, host, address in (("router", "router-01", "192.0.2.5"), ("monitoring", "monitoring-01", "192.0.2.6"),
                                 ("mirror", "mirror-01", "192.0.2.7")):
        hosts["all"]["children"][group]["hosts"] = {host: {"ansible_host": address}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv / "group_vars" / "all" / "listen.yml").write_text("fleet_serve_listen: 0.0.0.0\n")
    (inv / "group_vars" / "all" / "waves.yml").write_text("model_fetch_distribution: waves\n")
    router = yaml.safe_load((inv / "group_vars" / "router" / "router.yml").read_text()) or {}
    router["router_models"] = [{"name": "gpt-oss-20b", "port": 9100,
                                "allow_differences": ["source", "max_model_len", "lora_adapters"]}]
    (inv / "group_vars" / "router" / "router.yml").write_text(yaml.safe_dump(router))
    return inv


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.ansible
def test_plan_renders_every_host_of_the_run_into_a_directory_of_its_own(tmp_path):
    import yaml

    from vllm_fleet import api  # noqa: PLC0415 - ansible-runner only where a test runs a plan

    inv, out = full_site(tmp_path), tmp_path / "plan"
    secrets = {"fleet_serve_api_key": "engine-key-" + "e" * 16,
               "router_api_keys": [{"name": "team-a", "key": "team-key-" + "t" * 16, "requests_per_minute": 60}]}
    out.mkdir()
    (out / "cpu-01").mkdir()
    (out / "cpu-01" / "left-over").write_text("an earlier run's file\n")
    with pytest.raises(ValueError, match="holds files of no plan"):  # a directory of no plan: refused, kept
        api.plan(str(inv), out, secrets=secrets)
    assert (out / "cpu-01" / "left-over").is_file()

    out = tmp_path / "plan2"
    first = api.plan(str(inv), out, secrets=secrets)
    assert first.ok, str(first)
    files = tree(out)
    for path in ("router-01/etc/haproxy/haproxy.cfg", "router-01/etc/haproxy/vllm-fleet-keys.map",
                 "router-01/etc/haproxy/vllm-fleet-limits.map", "monitoring-01/etc/prometheus/prometheus.yml",
                 "monitoring-01/etc/prometheus/rules/vllm-fleet.rules.yml", "mirror-01/etc/nginx/sites-enabled/"
                 "vllm-fleet-mirror.conf", "nvidia-01/etc/default/prometheus-node-exporter",
                 "nvidia-01/etc/systemd/system/vllm-fleet-health-agent.service",
                 "nvidia-01/etc/systemd/system/vllm-fleet-device-health.timer"):
        assert path in files, sorted(files)
    assert set(first.files) == {"ascend-01", "cpu-01", "metax-01", "musa-01", "nvidia-01", "router-01",
                                "monitoring-01", "mirror-01"}
    text = "".join(files.values())
    assert "e" * 16 not in text and "t" * 16 not in text  # every key masked
    assert "******** team-a" in files["router-01/etc/haproxy/vllm-fleet-keys.map"]
    # The waves of each hub model revision, beside the hosts (a first run's: no node holds any yet).
    assert first.fleet_files == ["model-distribution.yml"] and "the fleet: model-distribution.yml" in str(first)
    waves = yaml.safe_load(files["model-distribution.yml"])
    assert waves["mirror"] == "http://192.0.2.7:8081" and waves["assumption"].startswith("no node holds")
    gpt = next(r for r in waves["revisions"] if r["revision"] == "openai/gpt-oss-20b@default")
    assert gpt["size_bytes"] == 14_000_000_000 and gpt["bytes"]["mirror"] == 14_000_000_000
    # One node fetches it, from the mirror alone, in its batch of the play.
    assert [w["nodes"] for w in gpt["waves"]] == [[{"host": "nvidia-01", "sources": [
        "http://192.0.2.7:8081/models/openai/gpt-oss-20b/main"], "at_once": 1, "peers": []}]]
    assert "nvidia-01/etc/nginx/sites-enabled/vllm-fleet-share.conf" in files
    # With the fleet's mirror, apt reads its repository alone: the driver's pins without the
    # inventory's repositories, and the hub models come from the mirror, with no hub client.
    assert "nvidia-01/etc/apt/preferences.d/vllm-fleet-nvidia-driver" in files
    assert not [f for f in files if f.startswith("nvidia-01/etc/apt/sources.list.d/vllm-fleet-nvidia-driver")]
    assert not [f for f in files if "/hub-tools/" in f]
    # ... and every host's apt reads the mirror's repository alone (playbooks/mirror.yml's third play).
    for host in ("ascend-01", "nvidia-01", "router-01", "monitoring-01"):
        source = files[f"{host}/etc/apt/sources.list.d/vllm-fleet-mirror.sources"]
        assert "URIs: http://192.0.2.7:8081/apt" in source and "Signed-By: /etc/apt/keyrings/vllm-fleet-mirror.asc" \
            in source, source
        assert f"{host}/etc/apt/apt.conf.d/99vllm-fleet-mirror" in files

    second = api.plan(str(inv), out, secrets=secrets)  # into the same directory: the same tree
    assert second.ok and tree(out) == files

