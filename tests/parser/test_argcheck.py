"""vllm_fleet_dev.argcheck's own machinery, without building a real environment (fast).

The real parsers are exercised in test_vllm_parser.py; here: which requirements of a
wheel are installed, which releases are accepted, where torch may come from, and that
concurrent callers share one atomic build.
"""

from __future__ import annotations

import json
import threading
import time
import zipfile
from pathlib import Path

import pytest

from vllm_fleet_dev import argcheck

pytestmark = pytest.mark.parser


def make_wheel(path: Path, requires: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        meta = ("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n"
                + "".join(f"Requires-Dist: {r}\n" for r in requires))
        zf.writestr("vllm-9.9.9.dist-info/METADATA", meta)
    return path


def test_wheel_requirements_leave_out_gpu_packages_extras_and_foreign_markers(tmp_path):
    wheel = make_wheel(tmp_path / "vllm-9.9.9-cp38-abi3-manylinux1_x86_64.whl", [
        "regex",
        "pydantic>=2.12.0",
        'xgrammar==0.1.25; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'importlib_metadata; python_version < "3.10"',
        "torch==2.9.0",
        "torchvision==0.24.0",
        "ray[cgraph]>=2.48.0",
        "flashinfer-python==0.5.2",
        "nvidia-cutlass-dsl>=4",
        'xformers==0.0.33; platform_system == "Linux" and platform_machine == "x86_64"',
        'pandas; extra == "bench"',
    ])
    wanted, left_out = argcheck.wheel_requirements(wheel)
    assert wanted[:2] == ["regex", "pydantic>=2.12.0"]
    assert "importlib_metadata" not in " ".join(wanted)  # its marker is false on Python 3.11
    assert not any(r.startswith(("pandas", "torch", "ray", "flashinfer", "nvidia", "xformers")) for r in wanted)
    assert all(";" not in r for r in wanted)  # markers were evaluated, not passed on
    assert set(left_out) == {"torch==2.9.0", "torchvision==0.24.0", "ray[cgraph]>=2.48.0", "flashinfer-python==0.5.2",
                             "nvidia-cutlass-dsl>=4",
                             'xformers==0.0.33; platform_system == "Linux" and platform_machine == "x86_64"'}
    assert all(left_out.values())  # each says why


@pytest.mark.parametrize("release", ["0.11.2", "0.10.1.1", "0.8.5.post1", "0.32.0+cpu"])
def test_release_names_accepted(release):
    assert argcheck._check_release(release) == release


@pytest.mark.parametrize("release", ["", "0.11", "latest", "0.11.2; rm -rf /", "../0.11.2", 0.11, "0.32.0+cu128"])
def test_release_names_rejected(release):
    with pytest.raises(ValueError, match="expected a vLLM release"):
        argcheck._check_release(release)


def test_torch_wheel_named_by_the_environment_must_fit(tmp_path, monkeypatch):
    bogus = tmp_path / "torch-2.13.0+cpu-cp27-cp27mu-win32.whl"
    bogus.write_bytes(b"")
    monkeypatch.setenv("VLLM_FLEET_TORCH_WHEEL", str(bogus))
    with pytest.raises(argcheck.TorchUnavailable, match="not a torch wheel for this interpreter"):
        argcheck.find_cpu_torch()


def test_no_cpu_torch_anywhere_is_torch_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_FLEET_TORCH_WHEEL", raising=False)
    monkeypatch.setattr(argcheck, "_pip_find_links", lambda: [tmp_path])
    # A CUDA wheel is no substitute: it would pull the nvidia-* stack.
    (tmp_path / "torch-2.9.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with pytest.raises(argcheck.TorchUnavailable, match="no CPU torch wheel"):
        argcheck.find_cpu_torch(tmp_path / "wheelhouse")


def test_concurrent_prepare_builds_once_and_atomically(tmp_path, monkeypatch):
    builds = []
    seen_partial = []

    def fake_build(root, build, release, vllm_wheel, torch_wheel, offline):
        builds.append(build)
        (build / "venv" / "bin").mkdir(parents=True)
        time.sleep(0.3)  # long enough for the other caller to arrive and wait on the lock
        seen_partial.append((root / release).exists())
        (build / "venv" / "bin" / "python").write_text("")
        (build / "manifest.json").write_text(json.dumps({"recipe": argcheck.RECIPE_VERSION}))

    torch_wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    torch_wheel.write_bytes(b"")
    monkeypatch.setattr(argcheck, "_build", fake_build)
    monkeypatch.setattr(argcheck, "find_cpu_torch", lambda wheelhouse=None: torch_wheel)
    monkeypatch.setattr(argcheck, "_vllm_wheel", lambda root, release, offline: tmp_path / "vllm.whl")
    results = []
    threads = [threading.Thread(target=lambda: results.append(argcheck.prepare("0.11.2", cache_dir=tmp_path)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = tmp_path / "argcheck" / "0.11.2"
    assert results == [final, final]
    assert len(builds) == 1 and seen_partial == [False]  # one build, invisible until renamed
    assert not list((tmp_path / "argcheck").glob(".0.11.2.build-*"))
    assert json.loads((final / "manifest.json").read_text())["build_seconds"] >= 0.3


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    def failing_build(root, build, release, vllm_wheel, torch_wheel, offline):
        raise argcheck.ArgcheckError("dependencies of vllm 0.11.2: these requirements cannot be installed: x")

    monkeypatch.setattr(argcheck, "_build", failing_build)
    monkeypatch.setattr(argcheck, "find_cpu_torch", lambda wheelhouse=None: tmp_path / "torch.whl")
    monkeypatch.setattr(argcheck, "_vllm_wheel", lambda root, release, offline: tmp_path / "vllm.whl")
    (tmp_path / "torch.whl").write_bytes(b"")
    with pytest.raises(argcheck.ArgcheckError, match="cannot be installed: x"):
        argcheck.prepare("0.11.2", cache_dir=tmp_path)
    assert not (tmp_path / "argcheck" / "0.11.2").exists()
    assert not list((tmp_path / "argcheck").glob(".0.11.2.build-*"))


MUSA_GRAPH = '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1]}'


@pytest.mark.parametrize("flag", ["--compilation-config", "--compilation_config", "-cc", "-O"])
def test_fork_keys_are_taken_out_of_every_spelling_of_the_flag(flag):
    argv = ["vllm", "serve", "/m", flag, MUSA_GRAPH, "--max-num-seqs", "1"]
    stripped, keys = argcheck.strip_fork_keys(argv, ["simple_cuda_graph"])
    assert stripped == ["vllm", "serve", "/m", flag, '{"cudagraph_capture_sizes": [1]}', "--max-num-seqs", "1"]
    assert keys == ["--compilation-config.simple_cuda_graph"]


def test_fork_keys_in_the_equals_form():
    stripped, keys = argcheck.strip_fork_keys(["vllm", "serve", "-cc=" + MUSA_GRAPH], ["simple_cuda_graph"])
    assert stripped == ["vllm", "serve", '-cc={"cudagraph_capture_sizes": [1]}']
    assert keys == ["--compilation-config.simple_cuda_graph"]


@pytest.mark.parametrize("argv", [
    ["vllm", "serve", "/m", "--compilation-config", MUSA_GRAPH],           # no fork keys declared
    ["vllm", "serve", "/m", "-O", "3"],                                    # a level, not JSON
    ["vllm", "serve", "/m", "--compilation-config", '{"simple_cuda_graph": '],  # malformed: the parser's to say
    ["vllm", "serve", "/m", "--hf-overrides", '{"simple_cuda_graph": true}'],  # another flag's JSON
    ["vllm", "serve", "/m", "--compilation-config"],                       # no value at all
])
def test_anything_else_is_left_to_the_parser(argv):
    keys = [] if argv[-1] == MUSA_GRAPH else ["simple_cuda_graph"]
    assert argcheck.strip_fork_keys(argv, keys) == (argv, [])


def test_check_reports_the_fork_keys_it_left_out(monkeypatch):
    seen = []

    def fake_run_checker(release, argvs, **kwargs):
        seen.extend(argvs)
        return {"results": [{"ok": True, "error": None, "warnings": [], "dropped_keys": []} for _ in argvs]}

    monkeypatch.setattr(argcheck, "run_checker", fake_run_checker)
    lines = [["vllm", "serve", "/m", "--compilation-config", MUSA_GRAPH], ["vllm", "serve", "/m", "--enforce-eager"]]
    results = argcheck.check("0.16.0", lines, fork_compilation_keys=["simple_cuda_graph"])
    assert seen == [["vllm", "serve", "/m", "--compilation-config", '{"cudagraph_capture_sizes": [1]}'], lines[1]]
    assert [r["unchecked_fork_keys"] for r in results] == [["--compilation-config.simple_cuda_graph"], []]
    assert results[0]["warnings"] == ["--compilation-config.simple_cuda_graph is the vendor fork's extension; "
                                      "vLLM 0.16.0's parser did not check it"]
