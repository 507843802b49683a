"""The lab's simulated Moore Threads software (lab/fixtures/installers/musa), run for real
in a temporary directory: the Miniforge installer and its `conda activate`, AIModule's
environment archive and its vLLM-MUSA plugin's start-up checks, the driver package.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_module
from vllm_fleet_lab import artifacts

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "lab" / "fixtures" / "installers" / "musa" / "build.py"
MODELS = ROOT / "lab" / "fixtures" / "models"
PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
#: The environment runs the node's interpreter, /usr/bin/python3.X, as on lab nodes.
NODE_PYTHON = Path(f"/usr/bin/python{PYVER}")


def load_builder():
    return load_module(BUILDER, "musa_build")


build = load_builder()


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    """A pip index directory with what vLLM's stand-in requires (openai-harmony as a tiny stand-in here)."""
    out = tmp_path_factory.mktemp("packages")
    artifacts.build_standin_wheels(out)
    artifacts.write_wheel(out, "openai-harmony", "0.0.8", {"openai_harmony/__init__.py": "VERSION = '0.0.8'\n"})
    return out


VERSIONS = {"miniforge": "25.3.1-0", "aimodule": "1.4.2", "musa_driver": "3.1.0", "python": f"{PYVER}.0",
            "aimodule_vllm": "0.16.0+musa"}


@pytest.fixture(scope="module")
def built(tmp_path_factory, packages) -> dict:
    return build.build_all(tmp_path_factory.mktemp("musa"), VERSIONS, packages)


def test_lab_versions_are_the_examples(tmp_path):
    lab = yaml.safe_load((ROOT / "lab" / "inventory" / "versions.yml").read_text())["musa"]
    matrix = yaml.safe_load((ROOT / "inventories/example/group_vars/musa-nodes/matrix.yml").read_text())["fleet_matrix"]
    assert lab["miniforge"] == matrix["miniforge"]["version"]
    assert lab["aimodule"] == matrix["aimodule"]["version"]
    assert lab["vllm"] == matrix["vllm"]["version"]
    assert lab["aimodule_vllm"].split("+")[0] == matrix["vllm"]["version"]
    assert {k: lab[k] for k in ("modelscope", "modelscope_hub", "huggingface_hub")} == \
        {k: matrix[k] for k in ("modelscope", "modelscope_hub", "huggingface_hub")}


def test_builds_are_byte_identical(tmp_path, packages, built):
    again = build.build_all(tmp_path, VERSIONS, packages)
    assert {k: v["sha256"] for k, v in again.items()} == {k: v["sha256"] for k, v in built.items()}
    for info in again.values():
        assert hashlib.sha256(Path(info["path"]).read_bytes()).hexdigest() == info["sha256"]
    assert [again[k]["filename"] for k in ("miniforge", "aimodule", "musa_driver")] == [
        "Miniforge3-25.3.1-0-Linux-x86_64.sh", "aimodule-1.4.2-linux-x86_64.tar.gz", "musa_3.1.0_amd64.deb"]


@pytest.mark.parametrize("version", ["25.3.1", "latest", "25.3.1-0; rm -rf /"])
def test_miniforge_version_must_name_conda_and_build(tmp_path, version):
    with pytest.raises(build.BuildError):
        build.build_miniforge(tmp_path, version)


def test_unsatisfiable_requirement_stops_the_build(tmp_path):
    with pytest.raises(build.BuildError, match="no wheel for torch==2.8.0"):
        build.build_aimodule(tmp_path, "1.4.2", vllm_version="0.16.0+musa", python_version="3.11.2",
                             conda_version="25.3.1", packages_dir=tmp_path)


# ---- the Miniforge installer


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def miniforge(tmp_path_factory, built) -> Path:
    prefix = tmp_path_factory.mktemp("home") / "dev" / "miniforge3"
    proc = run(["bash", built["miniforge"]["path"], "-b", "-p", str(prefix)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"PREFIX={prefix}", "Unpacking payload ...", "installation finished."]
    return prefix


def test_installer_lays_out_a_conda_installation(miniforge):
    for path in ("bin/conda", "condabin/conda", "etc/profile.d/conda.sh", "conda-meta/history", "envs", ".condarc"):
        assert (miniforge / path).exists(), path
    assert run([miniforge / "bin" / "conda", "--version"]).stdout == "conda 25.3.1\n"
    probe = "import importlib.metadata as m, sys; print(sys.prefix, m.version('conda'))"
    assert run([miniforge / "bin" / "python", "-c", probe]).stdout.split() == [str(miniforge), "25.3.1"]


def test_installer_refuses_an_existing_prefix_without_u(miniforge, built):
    proc = run(["bash", built["miniforge"]["path"], "-b", "-p", str(miniforge)])
    assert proc.returncode == 1
    assert proc.stderr == (f"ERROR: File or directory already exists: '{miniforge}'\n"
                           "If you want to update an existing installation, use the -u option.\n")
    update = run(["bash", built["miniforge"]["path"], "-b", "-u", "-p", str(miniforge)])
    assert update.returncode == 0, update.stderr
    assert "-b -u -p" in (miniforge / "conda-meta" / "history").read_text()


def test_installer_has_no_interactive_mode(tmp_path, built):
    proc = run(["bash", built["miniforge"]["path"], "-p", str(tmp_path / "x")])
    assert proc.returncode == 1 and "batch mode only (-b)" in proc.stderr


def shell(miniforge: Path, script: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CONDA")} | env
    return run(["bash", "-c", f'set +eu; . "{miniforge}/etc/profile.d/conda.sh"; {script}'], env=environ)


def test_activating_an_unknown_environment_fails_as_conda_does(miniforge):
    proc = shell(miniforge, "conda activate v9.9.9; echo rc=$?; echo prefix=${CONDA_PREFIX:-}")
    assert proc.stdout.splitlines() == ["rc=1", "prefix="]
    assert "EnvironmentNameNotFound: Could not find conda environment: v9.9.9" in proc.stderr


def test_unsupported_conda_commands_say_so(miniforge):
    proc = shell(miniforge, "conda create -n x python")
    assert proc.returncode == 2 and "vllm-fleet lab stand-in" in proc.stderr


# ---- AIModule's environment


@pytest.fixture(scope="module")
def aimodule(miniforge, built) -> Path:
    if not NODE_PYTHON.exists():
        pytest.skip(f"the environment runs {NODE_PYTHON}, which this machine lacks")
    env = miniforge / "envs" / "v1.4.2"
    env.mkdir()
    with tarfile.open(built["aimodule"]["path"]) as tar:
        tar.extractall(env, filter="tar")
    proc = run([env / "bin" / "python", env / "bin" / "conda-unpack"])
    assert proc.returncode == 0, proc.stderr
    return env


def test_conda_unpack_writes_the_real_prefix(aimodule):
    assert (aimodule / "bin" / "vllm").read_text().splitlines()[0] == f"#!{aimodule}/bin/python"
    assert build.BUILD_PREFIX not in (aimodule / "bin" / "vllm").read_text()


def test_activation_gives_the_environment_and_its_vllm(miniforge, aimodule):
    proc = shell(miniforge, 'conda activate v1.4.2 && echo "$CONDA_PREFIX" "$CONDA_DEFAULT_ENV" "$CONDA_SHLVL" '
                            '&& command -v vllm && vllm --version && conda env list && conda deactivate '
                            '&& echo "after=${CONDA_PREFIX:-} $CONDA_SHLVL"')
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [f"{aimodule} v1.4.2 1", f"{aimodule}/bin/vllm", "0.16.0+musa"]
    assert f"v1.4.2                 * {aimodule}" in lines
    assert lines[-1] == "after= 0"


def test_environment_holds_the_plugin_and_vllms_requirements(aimodule):
    probe = ("import importlib.metadata as m, json; "
             "print(json.dumps({d: m.version(d)"
             " for d in ('vllm', 'vllm_musa', 'torch', 'transformers', 'openai-harmony')}"
             " | {'plugins': [e.value for e in m.entry_points(group='vllm.platform_plugins')]}))")
    found = json.loads(run([aimodule / "bin" / "python", "-c", probe]).stdout)
    assert found == {"vllm": "0.16.0+musa", "vllm_musa": "1.4.2", "torch": "2.8.0+cpu", "transformers": "4.57.1",
                     "openai-harmony": "0.0.8", "plugins": ["vllm_musa:register"]}


# ---- the vLLM-MUSA plugin's start-up checks


@pytest.fixture
def node(tmp_path) -> Path:
    """A fake node root: the driver's version file and two GPUs."""
    (tmp_path / "usr/lib/mthreads").mkdir(parents=True)
    (tmp_path / "usr/lib/mthreads/version.info").write_text("Version=3.1.0\n")
    (tmp_path / "dev").mkdir()
    for index in (0, 1):
        (tmp_path / "dev" / f"mtgpu.{index}").touch()
    return tmp_path


SERVE = ["--host", "127.0.0.1", "--tensor-parallel-size", "1", "--block-size", "32", "--num-gpu-blocks-override", "512",
         "--max-model-len", "16384", "--max-num-seqs", "1", "--quantization", "gptq",
         "--compilation-config", '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1]}']


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(aimodule: Path, node: Path, *flags: str, ld_path: bool = True, **env) -> subprocess.CompletedProcess:
    """`vllm serve` as the unit runs it, for start-ups that fail (the process exits)."""
    environ = {"PATH": f"{aimodule}/bin:/usr/bin:/bin", "VLLM_FLEET_LAB_ROOT": str(node), "HOME": str(node),
               "MUSA_VISIBLE_DEVICES": "1", "TRITON_CACHE_DIR": str(node / "tmp/triton"),
               "VLLM_STANDIN_LOAD_SECONDS": "0", **env}
    if ld_path:
        environ["LD_LIBRARY_PATH"] = f"{aimodule}/lib"
    args = [str(aimodule / "bin" / "vllm"), "serve", str(MODELS / "hiruyun--gptq-Qwen3-8B"), *flags,
            "--port", str(free_port())]
    return run(args, env=environ)


def test_plugin_refuses_without_the_driver(aimodule, node):
    (node / "usr/lib/mthreads/version.info").unlink()
    proc = serve(aimodule, node, *SERVE)
    assert proc.returncode == 1
    assert "MUSAUnavailableError: Failed to initialize MTML: Driver Not Loaded" in proc.stderr


def test_plugin_needs_the_environments_lib_on_ld_library_path(aimodule, node):
    proc = serve(aimodule, node, *SERVE, ld_path=False)
    assert proc.returncode == 1
    assert "libmusart.so: cannot open shared object file" in proc.stderr


def test_plugin_supports_tensor_parallel_1_only(aimodule, node):
    proc = serve(aimodule, node, *[f if f != "1" or SERVE[i - 1] != "--tensor-parallel-size" else "2"
                                   for i, f in enumerate(SERVE)])
    assert proc.returncode == 1
    assert "vLLM-MUSA supports tensor_parallel_size 1 only, got 2" in proc.stderr


def test_plugin_applies_the_guides_kv_rule(aimodule, node):
    proc = serve(aimodule, node, *SERVE, "--max-num-seqs", "2")
    assert proc.returncode == 1
    assert ("max_model_len (16384) is larger than num_gpu_blocks_override (512) x block_size (32) / max_num_seqs (2) "
            "= 8192") in proc.stderr


def test_plugin_sees_only_musa_visible_devices(aimodule, node):
    proc = serve(aimodule, node, *SERVE, MUSA_VISIBLE_DEVICES="7")
    assert proc.returncode == 1
    assert "vLLM needs 1 GPUs but 0 are usable: MUSA_VISIBLE_DEVICES=7" in proc.stderr


def start(aimodule: Path, node: Path, model: str, *flags: str, **env) -> str:
    """Start `vllm serve` as the unit does; its log up to start-up (or failure), then stop it."""
    environ = {"PATH": f"{aimodule}/bin:/usr/bin:/bin", "VLLM_FLEET_LAB_ROOT": str(node), "HOME": str(node),
               "MUSA_VISIBLE_DEVICES": "1", "TRITON_CACHE_DIR": str(node / "tmp/triton"),
               "LD_LIBRARY_PATH": f"{aimodule}/lib", "VLLM_STANDIN_LOAD_SECONDS": "0", **env}
    args = [str(aimodule / "bin" / "vllm"), "serve", str(MODELS / model), *flags, "--port", str(free_port())]
    proc = subprocess.Popen(args, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    try:
        for line in proc.stdout:
            log.append(line)
            if "Application startup complete" in line or "Engine core initialization failed" in line:
                break
    finally:
        # The stand-in exits on SIGTERM; one that arrives mid start-up may go unanswered.
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return "".join(log)


def test_musa_graph_is_captured_into_the_triton_cache(aimodule, node):
    text = start(aimodule, node, "Qwen--Qwen3-30B-A3B-GPTQ-Int4", *SERVE, VLLM_MUSA_ATTN="tilelang")
    assert "Application startup complete" in text, text
    assert "Platform plugin musa is activated" in text
    assert "MUSA GPUs usable: 1 (driver 3.1.0)" in text
    assert "MUSA attention backend: tilelang" in text
    assert "compilation config: simple_cuda_graph: True, cudagraph_capture_sizes: [1]" in text
    assert "Capturing CUDA graphs" in text
    assert json.loads((node / "tmp/triton/musa_graph.json").read_text()) == {"capture_sizes": [1]}


def test_enforce_eager_turns_musa_graph_off(aimodule, node):
    text = start(aimodule, node, "hiruyun--gptq-Qwen3-8B", *SERVE, "--enforce-eager")
    assert "Application startup complete" in text, text
    assert "enforce_eager is set: MUSA Graph (simple_cuda_graph) is not captured" in text
    assert not (node / "tmp/triton").exists()


# ---- the driver package


def test_driver_package_writes_the_version_file_mthreads_gmi_reads(tmp_path, built):
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    deb = built["musa_driver"]["path"]
    info = run(["dpkg-deb", "--field", deb, "Package", "Version", "Architecture"]).stdout
    assert info.splitlines() == ["Package: musa", "Version: 3.1.0", "Architecture: amd64"]
    # What apt installs with it from the node's sources (the mirror's, on the air-gapped lab).
    assert run(["dpkg-deb", "--field", deb, "Depends"]).stdout.strip() == "libdrm2 (>= 2.4), libpciaccess0"
    assert run(["dpkg-deb", "-x", deb, str(tmp_path)]).returncode == 0
    assert (tmp_path / "usr/lib/mthreads/version.info").read_text() == "Version=3.1.0\n"
