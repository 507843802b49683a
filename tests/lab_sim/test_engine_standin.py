"""The lab's inference-engine stand-in (lab/fixtures/repos/vllm) and its vllm-ascend plugin.

Nothing is installed: every test runs the stand-in from its source tree
(``PYTHONPATH=lab/fixtures/repos/vllm``) in a subprocess, on a free 127.0.0.1
port, against a tiny model directory made in tmp. The vllm-ascend plugin is made
discoverable through a hand-written ``.dist-info`` with its entry point, and the
hardware it checks is a fake /dev under ``VLLM_FLEET_LAB_ROOT``.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
VLLM_SRC = ROOT / "lab" / "fixtures" / "repos" / "vllm"
ASCEND_SRC = ROOT / "lab" / "fixtures" / "repos" / "vllm-ascend"
VERSION_BASE = (VLLM_SRC / "VERSION_BASE").read_text().strip()
# What the source tree reports: it sits inside vllm-fleet's repository, not in a checkout of its own.
SOURCE_VERSION = f"{VERSION_BASE}.dev0"
API_KEY = "test-key-123"
# What the lab's torch-npu stand-in raises next to torch 2.8.0, like the real torch_npu.
WRONG_TORCH = "torch_npu 2.7.1 requires torch 2.7.1, but torch 2.8.0+cpu is installed"

# Variables of the developer's shell that would change what the stand-in does.
_INHERITED_PREFIXES = ("VLLM_", "ASCEND_", "TIKTOKEN_", "HCCL_", "CUDA_", "HF_", "PYTHON")


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_model(
    directory: Path,
    *,
    model_type: str = "qwen3",
    architecture: str = "Qwen3ForCausalLM",
    hidden_size: int = 16,
    max_position_embeddings: int = 4096,
    shards: int = 0,
) -> Path:
    """A model directory as the engine reads it; ``shards`` > 0 writes an index and that many shards."""
    directory.mkdir(parents=True)
    config = {
        "model_type": model_type,
        "architectures": [architecture],
        "hidden_size": hidden_size,
        "max_position_embeddings": max_position_embeddings,
    }
    (directory / "config.json").write_text(json.dumps(config))
    weights = b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"__metadata__":{}}'
    if shards:
        names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        index = {"weight_map": {f"layer.{i}.weight": name for i, name in enumerate(names)}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
        for name in names:
            (directory / name).write_bytes(weights)
    else:
        (directory / "model.safetensors").write_bytes(weights)
    return directory


def make_adapter(directory: Path, *, rank: int = 8) -> Path:
    """A LoRA adapter directory as PEFT saves it (adapter_config.json and its weights)."""
    directory.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "bias": "none",
              "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": "Qwen/Qwen3-8B"}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    (directory / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"__metadata__":{}}')
    return directory


def standin_env(tmp_path: Path, extra_paths: tuple[Path, ...] = (), **overrides: str) -> dict[str, str]:
    """A clean environment: source tree on PYTHONPATH, no load delay, an empty fake /dev, no plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    lab_root = tmp_path / "labroot"
    (lab_root / "dev").mkdir(parents=True, exist_ok=True)
    env.update(
        PYTHONPATH=os.pathsep.join(str(p) for p in (VLLM_SRC, *extra_paths)),
        PYTHONDONTWRITEBYTECODE="1",  # keep the fixture source tree free of __pycache__
        VLLM_STANDIN_LOAD_SECONDS="0",
        VLLM_FLEET_LAB_ROOT=str(lab_root),
        VLLM_PLUGINS="",
    )
    env.update(overrides)
    return env


def vllm_cli(args: list[str], env: dict[str, str], timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run ``vllm ARGS`` from the source tree to completion (for start-ups that must fail)."""
    return subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Server:
    """A running `vllm serve`, with a small HTTP client."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def request(
        self, method: str, path: str, body: object = None, key: str | None = API_KEY
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()  # http.client undoes the chunked transfer encoding of streams
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def post(self, path: str, body: object, key: str | None = API_KEY) -> tuple[int, object]:
        status, _, data = self.request("POST", path, body, key)
        return status, json.loads(data)

    def get(self, path: str, key: str | None = API_KEY) -> tuple[int, object]:
        status, _, data = self.request("GET", path, None, key)
        return status, json.loads(data) if data else None

    def stream(self, path: str, body: dict) -> list[object]:
        """The events of a streamed answer: decoded chunks, then the literal "[DONE]"."""
        status, headers, data = self.request("POST", path, {**body, "stream": True})
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: ") :] for line in data.decode().split("\n\n") if line]
        return [event if event == "[DONE]" else json.loads(event) for event in events]


@contextmanager
def serving(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> Iterator[Server]:
    """Start `vllm serve ARGS --port <free>`, wait for /health, and on exit stop it with SIGTERM (must exit 0)."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *args, "--port", str(port)],
            env=env or standin_env(tmp_path),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, log)
    try:
        deadline = time.monotonic() + 15
        while True:
            assert process.poll() is None, f"server exited {process.returncode}:\n{log.read_text()}"
            try:
                if server.request("GET", "/health", key=None)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"server not healthy in time:\n{log.read_text()}"
            time.sleep(0.05)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, log.read_text()


def parse_commands(tmp_path: Path, commands: list[list[str]]) -> list[dict]:
    """Parse command lines with the stand-in's parser; each result is the Namespace as a dict."""
    script = (
        "import json, sys\n"
        "from vllm.engine.arg_utils import parse_serve_args\n"
        "print(json.dumps([vars(parse_serve_args(c)) for c in json.loads(sys.argv[1])]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)],
        env=standin_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def load_setup_module():
    """lab/fixtures/repos/vllm/setup.py as a module (its build only runs as __main__)."""
    return load_module(VLLM_SRC / "setup.py", "vllm_standin_setup")


# --------------------------------------------------------------------------- command line


def test_version_flag_prints_the_version(tmp_path):
    done = vllm_cli(["--version"], standin_env(tmp_path))
    assert done.returncode == 0
    assert done.stdout == f"{SOURCE_VERSION}\n"


def test_unknown_flag_is_rejected_with_exit_code_2(tmp_path):
    model = make_model(tmp_path / "model")
    done = vllm_cli(["serve", str(model), "--gpu-memory-utilisation", "0.9"], standin_env(tmp_path))
    assert done.returncode == 2
    assert "error: unrecognized arguments: --gpu-memory-utilisation 0.9" in done.stderr


def test_abbreviated_flag_is_rejected(tmp_path):
    done = vllm_cli(["serve", "m", "--max-model", "100"], standin_env(tmp_path))
    assert done.returncode == 2
    assert "unrecognized arguments: --max-model 100" in done.stderr


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--compilation-config", '{"cudagraph_mode": ', "argument --compilation-config/-O: Value"),
        ("--compilation_config", "PIECEWISE", "argument --compilation-config/-O: Value PIECEWISE cannot be converted"),
        ("--hf-overrides", "[1, 2]", "argument --hf-overrides: Value [1, 2] must be a JSON object, got list"),
        ("--limit-mm-per-prompt", "image=1", "argument --limit-mm-per-prompt: Value image=1 cannot be converted"),
        ("--additional-config", "{'a': 1}", "argument --additional-config: Value {'a': 1} cannot be converted"),
    ],
)
def test_invalid_json_values_are_rejected(tmp_path, flag, value, message):
    done = vllm_cli(["serve", "m", flag, value], standin_env(tmp_path))
    assert done.returncode == 2
    assert message in done.stderr


def test_underscores_aliases_and_booleans_parse_like_vllm(tmp_path):
    [args] = parse_commands(
        tmp_path,
        [
            [
                "serve",
                "/models/x",
                "--gpu_memory_utilization",
                "0.7",
                "--compilation_config",
                '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [4, 2, 1]}',
                "-tp",
                "8",
                "-pp",
                "2",
                "-q",
                "gptq",
                "--block_size=32",
                "--swap_space",
                "0",
                "--no-enable-prefix-caching",
                "--trust-remote-code",
                "--enforce-eager",
                "--served-model-name",
                "a",
                "b",
                "--max-model-len",
                "16k",
                "--lora-modules",
                "sql=/loras/sql",
                '{"name": "chat", "path": "/loras/chat"}',
                "--runner",
                "pooling",
                "--convert",
                "embed",
            ]
        ],
    )
    assert args["model"] == "/models/x"
    assert args["gpu_memory_utilization"] == 0.7
    assert args["compilation_config"] == {"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [4, 2, 1]}
    assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (8, 2)
    assert args["quantization"] == "gptq"
    assert (args["block_size"], args["swap_space"]) == (32, 0.0)
    assert (args["enable_prefix_caching"], args["trust_remote_code"], args["enforce_eager"]) == (False, True, True)
    assert args["served_model_name"] == ["a", "b"]
    assert args["max_model_len"] == 16000
    assert args["lora_modules"] == [{"name": "sql", "path": "/loras/sql"}, {"name": "chat", "path": "/loras/chat"}]
    assert (args["runner"], args["convert"]) == ("pooling", "embed")


def test_o_level_shorthand(tmp_path):
    o3, o_json = parse_commands(tmp_path, [["serve", "m", "-O3"], ["serve", "m", "-O", '{"level": 0}']])
    assert o3["compilation_config"] == {"level": 3}
    assert o_json["compilation_config"] == {"level": 0}


def test_every_seed_launch_command_parses(tmp_path):
    """The `vllm serve` lines of seeds 001 (Ascend gpt-oss) and 004 (Moore Threads templates)."""
    musa_common = [
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "-tp",
        "1",
        "--gpu_memory_utilization",
        "0.7",
        "--dtype",
        "bfloat16",
        "--block_size",
        "32",
        "--num-gpu-blocks-override",
        "512",
        "--max-model-len",
        "16384",
        "--max-num-seqs",
        "1",
        "--swap_space",
        "0",
        "--no-enable-prefix-caching",
        "--trust-remote-code",
        "--compilation-config",
        '{"simple_cuda_graph": true, "cudagraph_capture_sizes": [1]}',
    ]
    pooling = [
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "-tp",
        "1",
        "--gpu_memory_utilization",
        "0.7",
        "--dtype",
        "float16",
        "--max-num-seqs",
        "1",
        "--swap_space",
        "0",
        "--no-enable-prefix-caching",
        "--trust-remote-code",
        "--runner",
        "pooling",
        "--enforce-eager",
    ]
    commands = [
        [
            "serve",
            "/model/GPT-OSS",
            "--served-model-name",
            "gpt-oss-120b-bf16",
            "--gpu-memory-utilization",
            "0.95",
            "--tensor-parallel-size",
            "8",
            "--max-model-len",
            "16384",
            "--compilation_config",
            '{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1024,512,256,128,64,16,4,2,1]}',
        ],
        ["serve", "/m", *musa_common],
        ["serve", "/m", *musa_common, "--quantization", "gptq"],
        [
            "serve",
            "/m",
            *musa_common,
            "--limit-mm-per-prompt",
            '{"image":1}',
            "--hf-overrides",
            '{"text_config":{"tie_word_embeddings":false}}',
        ],
        ["serve", "/m", *pooling, "--convert", "embed"],
        ["serve", "/m", *pooling, "--convert", "classify"],
        ["serve", "/m", "--enable-prefix-caching", "--max-num-seqs", "256"],
    ]
    parsed = parse_commands(tmp_path, commands)
    assert [p["tensor_parallel_size"] for p in parsed] == [8, 1, 1, 1, 1, 1, 1]
    assert parsed[0]["compilation_config"]["cudagraph_capture_sizes"] == [1024, 512, 256, 128, 64, 16, 4, 2, 1]
    assert parsed[3]["limit_mm_per_prompt"] == {"image": 1}
    assert [p["convert"] for p in parsed[4:6]] == ["embed", "classify"]
    assert parsed[6]["enable_prefix_caching"] is True


# --------------------------------------------------------------------------- start-up failures


def test_model_that_is_not_a_directory_fails(tmp_path):
    done = vllm_cli(["serve", str(tmp_path / "absent")], standin_env(tmp_path))
    assert done.returncode == 1
    assert f"Invalid repository ID or local directory specified: '{tmp_path / 'absent'}'" in done.stderr


def test_missing_shard_fails_like_a_partial_download(tmp_path):
    model = make_model(tmp_path / "model", shards=3)
    (model / "model-00002-of-00003.safetensors").unlink()
    done = vllm_cli(["serve", str(model)], standin_env(tmp_path))
    assert done.returncode == 1
    assert (
        f"ModelLoadError: [Errno 2] No such file or directory: '{model / 'model-00002-of-00003.safetensors'}'"
        in done.stderr
    )
    assert "Application startup complete." not in done.stderr


def test_model_without_weights_fails(tmp_path):
    model = make_model(tmp_path / "model")
    (model / "model.safetensors").unlink()
    done = vllm_cli(["serve", str(model)], standin_env(tmp_path))
    assert done.returncode == 1
    assert f"ModelLoadError: Cannot find any model weights with `{model}`" in done.stderr


def test_max_model_len_beyond_the_model_fails(tmp_path):
    model = make_model(tmp_path / "model", max_position_embeddings=4096)
    done = vllm_cli(["serve", str(model), "--max-model-len", "8192"], standin_env(tmp_path))
    assert done.returncode == 1
    assert (
        "User-specified max_model_len (8192) is greater than the derived max_model_len "
        "(max_position_embeddings=4096 or model_max_length=None in model's config.json)"
    ) in done.stderr


def test_kv_cache_too_small_for_one_sequence_fails(tmp_path):
    model = make_model(tmp_path / "model")
    done = vllm_cli(
        ["serve", str(model), "--num-gpu-blocks-override", "10", "--block-size", "32"], standin_env(tmp_path)
    )
    assert done.returncode == 1
    assert (
        "The model's max seq len (4096) is larger than the maximum number of tokens that can be stored "
        "in KV cache (320)" in done.stderr
    )


def test_lora_adapter_that_was_never_fetched_fails(tmp_path):
    model = make_model(tmp_path / "model")
    done = vllm_cli(["serve", str(model), "--enable-lora", "--lora-modules", f"support={tmp_path / 'absent'}"],
                    standin_env(tmp_path))
    assert done.returncode == 1
    assert f"Loading lora support failed: No adapter found for {tmp_path / 'absent'}" in done.stderr


def test_lora_adapter_of_a_higher_rank_than_allowed_fails(tmp_path):
    model = make_model(tmp_path / "model")
    adapter = make_adapter(tmp_path / "lora", rank=32)
    done = vllm_cli(["serve", str(model), "--enable-lora", "--max-lora-rank", "16", "--lora-modules",
                     f"coding={adapter}"], standin_env(tmp_path))
    assert done.returncode == 1
    assert "LoRA rank 32 is greater than max_lora_rank 16." in done.stderr


def test_lora_adapter_named_twice_fails(tmp_path):
    model = make_model(tmp_path / "model")
    adapter = make_adapter(tmp_path / "lora")
    done = vllm_cli(["serve", str(model), "--enable-lora", "--lora-modules", f"a={adapter}", f"a={adapter}"],
                    standin_env(tmp_path))
    assert done.returncode == 1
    assert "The lora adapter 'a' has already been loaded." in done.stderr


def test_pooling_conversion_needs_the_pooling_runner(tmp_path):
    model = make_model(tmp_path / "model")
    done = vllm_cli(["serve", str(model), "--convert", "embed"], standin_env(tmp_path))
    assert done.returncode == 1
    assert "--convert embed requires --runner pooling (got --runner auto)" in done.stderr


def test_gpt_oss_without_tokenizer_file_fails_without_downloading(tmp_path):
    model = make_model(tmp_path / "gpt-oss", model_type="gpt_oss", architecture="GptOssForCausalLM")
    empty_cache = tmp_path / "tiktoken"
    empty_cache.mkdir()
    done = vllm_cli(["serve", str(model)], standin_env(tmp_path, TIKTOKEN_RS_CACHE_DIR=str(empty_cache)))
    assert done.returncode == 1
    assert "openai_harmony.HarmonyError: error downloading or loading vocab file" in done.stderr
    assert "The tokenizer could not be downloaded: this node is offline." in done.stderr
    assert f"TIKTOKEN_RS_CACHE_DIR={empty_cache}" in done.stderr


def test_gpt_oss_loads_the_harmony_encoding_and_counts_with_it(tmp_path):
    """With the vocabulary in place, the engine loads HARMONY_GPT_OSS and counts tokens with it."""
    model = make_model(tmp_path / "gpt-oss", model_type="gpt_oss", architecture="GptOssForCausalLM")
    cache = tmp_path / "tiktoken"
    cache.mkdir()
    (cache / "fb374d419588a4632f3f557e76b4b70aebbca790").write_text("vocabulary")
    # A stand-in openai_harmony that encodes one token per character and records what was loaded.
    fake = tmp_path / "fake_harmony" / "openai_harmony"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import enum, os\n"
        "class HarmonyEncodingName(enum.Enum):\n"
        "    HARMONY_GPT_OSS = 'HarmonyGptOss'\n"
        "class _Encoding:\n"
        "    def encode(self, text):\n"
        "        return list(text)\n"
        "def load_harmony_encoding(name):\n"
        "    assert name is HarmonyEncodingName.HARMONY_GPT_OSS\n"
        "    print('HARMONY LOADED', os.environ['HTTPS_PROXY'], flush=True)\n"
        "    return _Encoding()\n"
    )
    env = standin_env(tmp_path, (tmp_path / "fake_harmony",), TIKTOKEN_RS_CACHE_DIR=str(cache))
    with serving(tmp_path, [str(model), "--served-model-name", "gpt-oss-120b-bf16"], env) as server:
        status, body = server.post(
            "/v1/chat/completions",
            {"model": "gpt-oss-120b-bf16", "messages": [{"role": "user", "content": "who are you"}]},
            key=None,
        )
        cut = server.post(
            "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}, key=None
        )[1]
    assert status == 200
    message = body["choices"][0]["message"]
    assert (
        message["reasoning_content"] == 'The user said "who are you". I should say who I am and repeat what they said.'
    )
    assert message["reasoning"] == message["reasoning_content"]
    assert message["content"] == 'I am gpt-oss-120b-bf16, served by the vLLM stand-in. You said: "who are you"'
    # One token per character: the counts come from the encoding, not from words.
    assert body["usage"]["prompt_tokens"] == len("<|user|> who are you\n<|assistant|>")
    assert body["usage"]["completion_tokens"] == len(message["reasoning_content"]) + len(message["content"])
    # A small budget is spent on reasoning first: it is cut and no answer follows.
    assert cut["choices"][0]["message"]["reasoning_content"] == 'The user said "hi".'  # 19 of 20 characters
    assert cut["choices"][0]["message"]["content"] == ""
    assert cut["choices"][0]["finish_reason"] == "length"
    # Any download the real library might still attempt goes to a dead local port.
    assert "HARMONY LOADED http://127.0.0.1:9" in server.log.read_text()


def test_port_in_use_fails(tmp_path):
    model = make_model(tmp_path / "model")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = vllm_cli(["serve", str(model), "--host", "127.0.0.1", "--port", str(port)], standin_env(tmp_path))
    assert done.returncode == 1
    assert "OSError: [Errno 98] Address already in use" in done.stderr


def test_sigterm_while_loading_exits_0_before_the_port_opens(tmp_path):
    model = make_model(tmp_path / "model")
    port = free_port()
    log = tmp_path / "load.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--port", str(port)],
            env=standin_env(tmp_path, VLLM_STANDIN_LOAD_SECONDS="30"),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 10
    while "Using max model len" not in log.read_text():
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()
        time.sleep(0.05)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    process.send_signal(signal.SIGTERM)
    # Without the signal it would load for 30 s, then serve until killed: any finite wait tells. A
    # long one, because CI runs this beside five labs on two cores (10 s was once too short).
    assert process.wait(timeout=60) == 0
    assert "Received SIGTERM, shutting down." in log.read_text()


def test_secrets_never_reach_the_log(tmp_path):
    env = standin_env(
        tmp_path,
        HF_TOKEN="hf-secret-1",
        MODELSCOPE_API_TOKEN="ms-secret-2",
        VLLM_API_KEY="vllm-secret-3",
        HCCL_PASSWORD="hccl-secret-4",
        TIKTOKEN_RS_CACHE_DIR="/model/tiktoken_cache",
        ASCEND_RT_VISIBLE_DEVICES="0,1,2,3,4,5,6,7",
        HCCL_INTRA_ROCE_ENABLE="1",
        PYTORCH_NPU_ALLOC_CONF="max_split_size_mb:256",
        VLLM_USE_MODELSCOPE="True",
        UNRELATED_SETTING="not-logged",
    )
    done = vllm_cli(["serve", str(tmp_path / "absent"), "--api-key", "cli-secret-5"], env)
    assert done.returncode == 1
    log = done.stderr
    for line in (
        "Environment: ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
        "Environment: HCCL_INTRA_ROCE_ENABLE=1",
        "Environment: PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256",
        "Environment: TIKTOKEN_RS_CACHE_DIR=/model/tiktoken_cache",
        "Environment: VLLM_USE_MODELSCOPE=True",
        "'api_key': '<redacted>'",
    ):
        assert line in log
    for secret in ("hf-secret-1", "ms-secret-2", "vllm-secret-3", "hccl-secret-4", "cli-secret-5", "not-logged"):
        assert secret not in log


# --------------------------------------------------------------------------- serving a chat model


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp("chat")
    model = make_model(tmp_path / "Qwen3-8B", max_position_embeddings=4096)
    adapter = make_adapter(tmp_path / "loras" / "sql")
    args = [
        str(model),
        "--served_model_name",
        "qwen-test",
        "alias",
        "--gpu_memory_utilization",
        "0.7",
        "--compilation_config",
        '{"cudagraph_mode": "PIECEWISE"}',
        "--max-model-len",
        "2048",
        "--api-key",
        API_KEY,
        "--limit-mm-per-prompt",
        '{"image": 1}',
        "--enable-lora",
        "--lora-modules",
        f"sql-lora={adapter}",
    ]
    with serving(tmp_path, args) as server:
        server.model_path = str(model)  # type: ignore[attr-defined]
        server.adapter_path = str(adapter)  # type: ignore[attr-defined]
        yield server


def test_health_version_and_models(chat_server):
    status, _, body = chat_server.request("GET", "/health", key=None)
    assert (status, body) == (200, b"")
    assert chat_server.get("/version", key=None) == (200, {"version": SOURCE_VERSION})
    status, models = chat_server.get("/v1/models")
    assert status == 200
    assert models["object"] == "list"
    assert [(m["id"], m["root"], m["parent"], m["max_model_len"], m["owned_by"]) for m in models["data"]] == [
        ("qwen-test", chat_server.model_path, None, 2048, "vllm"),
        ("alias", chat_server.model_path, None, 2048, "vllm"),
        ("sql-lora", chat_server.adapter_path, "qwen-test", 2048, "vllm"),
    ]


def test_api_key_is_required_on_v1_routes_only(chat_server):
    assert chat_server.get("/v1/models", key=None) == (401, {"error": "Unauthorized"})
    assert chat_server.post("/v1/chat/completions", {"messages": []}, key="wrong") == (401, {"error": "Unauthorized"})
    assert chat_server.request("GET", "/health", key=None)[0] == 200
    assert chat_server.request("GET", "/metrics", key=None)[0] == 200


def test_chat_completion(chat_server):
    status, body = chat_server.post(
        "/v1/chat/completions", {"model": "qwen-test", "messages": [{"role": "user", "content": "who are you"}]}
    )
    assert status == 200
    assert body["id"].startswith("chatcmpl-") and len(body["id"]) == len("chatcmpl-") + 32
    assert (body["object"], body["model"]) == ("chat.completion", "qwen-test")
    [choice] = body["choices"]
    assert choice["message"] == {
        "role": "assistant",
        "content": 'I am qwen-test, served by the vLLM stand-in. You said: "who are you"',
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning": None,
        "reasoning_content": None,
    }
    assert (choice["index"], choice["finish_reason"], choice["stop_reason"]) == (0, "stop", None)
    # Prompt "<|user|> who are you\n<|assistant|>": 5 words; the answer: 13.
    assert body["usage"] == {
        "prompt_tokens": 5,
        "total_tokens": 18,
        "completion_tokens": 13,
        "prompt_tokens_details": None,
    }


def test_chat_alias_answers_with_the_first_served_name_and_lora_with_its_own(chat_server):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ping"}]
    assert chat_server.post("/v1/chat/completions", {"model": "alias", "messages": messages})[1]["model"] == "qwen-test"
    lora = chat_server.post("/v1/chat/completions", {"model": "sql-lora", "messages": messages})[1]
    assert lora["model"] == "sql-lora"
    assert lora["choices"][0]["message"]["content"] == 'I am sql-lora, served by the vLLM stand-in. You said: "ping"'


def test_chat_respects_max_tokens(chat_server):
    status, body = chat_server.post(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "who are you"}], "max_tokens": 4}
    )
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "I am qwen-test, served"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4


def test_chat_stream(chat_server):
    events = chat_server.stream(
        "/v1/chat/completions",
        {
            "model": "qwen-test",
            "messages": [{"role": "user", "content": "who are you"}],
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == 'I am qwen-test, served by the vLLM stand-in. You said: "who are you"'
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]][-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 5,
        "total_tokens": 18,
        "completion_tokens": 13,
        "prompt_tokens_details": None,
    }


def test_completions(chat_server):
    status, body = chat_server.post("/v1/completions", {"model": "qwen-test", "prompt": "hello there"})
    assert status == 200
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    [choice] = body["choices"]
    assert choice["text"] == 'I am qwen-test, served by the vLLM stand-in. You said: "hello there"'
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {
        "prompt_tokens": 2,
        "total_tokens": 14,
        "completion_tokens": 12,
        "prompt_tokens_details": None,
    }
    # vLLM's default max_tokens for completions is 16: a long echo is cut there.
    long_prompt = " ".join(f"w{i}" for i in range(30))
    cut = chat_server.post("/v1/completions", {"prompt": long_prompt})[1]
    assert cut["usage"]["completion_tokens"] == 16
    assert cut["choices"][0]["finish_reason"] == "length"


def test_completions_stream(chat_server):
    events = chat_server.stream("/v1/completions", {"prompt": ["one", "two"], "max_tokens": 3})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    texts = {0: "", 1: ""}
    finish = {}
    for chunk in chunks:
        assert chunk["object"] == "text_completion"
        [choice] = chunk["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            finish[choice["index"]] = choice["finish_reason"]
    assert texts == {0: "I am qwen-test,", 1: "I am qwen-test,"}
    assert finish == {0: "length", 1: "length"}


def test_unknown_model_is_404(chat_server):
    status, body = chat_server.post(
        "/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}
    )
    assert status == 404
    assert body == {
        "error": {
            "message": "The model `gpt-4` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


def test_generate_model_refuses_pooling_apis(chat_server):
    assert chat_server.post("/v1/embeddings", {"input": "x"}) == (
        400,
        {
            "error": {
                "message": "The model does not support Embeddings API",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    )
    status, body = chat_server.post("/v1/score", {"text_1": "a", "text_2": "b"})
    assert (status, body["error"]["message"]) == (400, "The model does not support Score API")


def test_images_up_to_the_limit(chat_server):
    def ask(images: int) -> tuple[int, object]:
        parts = [{"type": "text", "text": "describe"}] + [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}} for _ in range(images)
        ]
        return chat_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": parts}]})

    status, body = ask(1)
    assert status == 200
    assert (
        body["choices"][0]["message"]["content"]
        == 'I am qwen-test, served by the vLLM stand-in. You said: "describe <image>"'
    )
    status, body = ask(2)
    assert status == 400
    assert body["error"]["message"] == "At most 1 image(s) may be provided in one prompt."


def test_request_longer_than_the_context_is_400(chat_server):
    status, body = chat_server.post(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2046}
    )
    assert status == 400
    assert body["error"]["message"] == (
        "This model's maximum context length is 2048 tokens. However, you requested 2049 tokens "
        "(3 in the messages, 2046 in the completion). Please reduce the length of the messages or completion."
    )


def test_unknown_route_and_bad_json(chat_server):
    assert chat_server.get("/nope", key=None) == (404, {"detail": "Not Found"})
    status, _, data = chat_server.request("GET", "/v1/chat/completions")
    assert (status, json.loads(data)) == (405, {"detail": "Method Not Allowed"})
    conn = http.client.HTTPConnection("127.0.0.1", chat_server.port, timeout=10)
    conn.request("POST", "/v1/completions", body=b"{not json", headers={"Authorization": f"Bearer {API_KEY}"})
    response = conn.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["error"]["message"].startswith("JSON decode error")
    conn.close()


def test_metrics_count_requests(chat_server):
    _, _, before = chat_server.request("GET", "/metrics", key=None)
    chat_server.post("/v1/completions", {"prompt": "a b c", "max_tokens": 2})
    _, _, after = chat_server.request("GET", "/metrics", key=None)

    def value(text: bytes, name: str) -> float:
        prefix = f'vllm:{name}{{engine="0",model_name="qwen-test"}} '
        return float(next(line for line in text.decode().splitlines() if line.startswith(prefix))[len(prefix) :])

    assert value(after, "prompt_tokens_total") - value(before, "prompt_tokens_total") == 3
    assert value(after, "generation_tokens_total") - value(before, "generation_tokens_total") == 2


def test_metrics_gauges_count_a_stream_while_it_runs(chat_server):
    """vLLM's gauge names (what `vllm-fleet status` reads), parsed by Prometheus' own parser:
    a request being answered (here: its body still arriving) runs and holds a KV slot; none once
    it is answered."""
    from prometheus_client.parser import text_string_to_metric_families

    def gauges() -> dict[str, float]:
        _, _, text = chat_server.request("GET", "/metrics", key=None)
        return {s.name: s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples
                if s.labels == {"engine": "0", "model_name": "qwen-test"}}

    idle = gauges()
    assert (idle["vllm:num_requests_running"], idle["vllm:num_requests_waiting"], idle["vllm:kv_cache_usage_perc"]) \
        == (0, 0, 0)
    assert "vllm:generation_tokens_total" in idle
    body = json.dumps({"model": "qwen-test", "prompt": "a b c", "max_tokens": 4}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", chat_server.port, timeout=10)
    conn.putrequest("POST", "/v1/completions")
    for name, value in (("Authorization", f"Bearer {API_KEY}"), ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body)))):
        conn.putheader(name, value)
    conn.endheaders(body[:5])
    try:
        deadline = time.monotonic() + 5
        while (busy := gauges())["vllm:num_requests_running"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        conn.send(body[5:])
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert busy["vllm:num_requests_running"] == 1
    assert busy["vllm:kv_cache_usage_perc"] == 1 / 256
    # The handler's thread counts the request out after its last byte reached the client, so the
    # client may ask /metrics a moment before: wait for the gauge (the CI of 2026-12-02 saw 1 there).
    deadline = time.monotonic() + 5
    while (after := gauges())["vllm:num_requests_running"] != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert after["vllm:num_requests_running"] == 0


# --------------------------------------------------------------------------- pooling models


def test_embedding_model(tmp_path):
    model = make_model(tmp_path / "bge-m3", architecture="XLMRobertaModel", model_type="xlm-roberta", hidden_size=24)
    args = [str(model), "--runner", "pooling", "--convert", "embed", "--served-model-name", "bge-m3"]
    # The key comes from VLLM_API_KEY this time, as vLLM reads it when --api-key is absent.
    with serving(tmp_path, args, standin_env(tmp_path, VLLM_API_KEY="env-key")) as server:
        status, body = server.post("/v1/embeddings", {"model": "bge-m3", "input": ["hello world", "other"]}, "env-key")
        again = server.post("/v1/embeddings", {"input": "hello world"}, "env-key")[1]
        chat = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, "env-key")
        wrong_size = server.post("/v1/embeddings", {"input": "x", "dimensions": 8}, "env-key")
        unauthorized = server.post("/v1/embeddings", {"input": "x"}, key=None)
        base64_body = server.post("/v1/embeddings", {"input": "hello world", "encoding_format": "base64"}, "env-key")[1]
    assert unauthorized == (401, {"error": "Unauthorized"})
    assert status == 200
    assert body["id"].startswith("embd-")
    assert (body["object"], body["model"]) == ("list", "bge-m3")
    assert [(d["index"], d["object"], len(d["embedding"])) for d in body["data"]] == [
        (0, "embedding", 24),
        (1, "embedding", 24),
    ]
    for item in body["data"]:
        assert math.isclose(math.sqrt(sum(v * v for v in item["embedding"])), 1.0, rel_tol=1e-9)
    assert again["data"][0]["embedding"] == body["data"][0]["embedding"]
    assert body["data"][0]["embedding"] != body["data"][1]["embedding"]
    assert body["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 3,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
    assert chat[0] == 400
    assert chat[1]["error"]["message"] == "The model does not support Chat Completions API"
    assert wrong_size[0] == 400
    packed = base64.b64decode(base64_body["data"][0]["embedding"])
    assert list(struct.unpack("<24f", packed)) == pytest.approx(body["data"][0]["embedding"], rel=1e-6)


def test_reranker_model(tmp_path):
    model = make_model(tmp_path / "bge-reranker-v2-m3", architecture="XLMRobertaForSequenceClassification")
    args = [str(model), "--runner", "pooling", "--convert", "classify", "--served-model-name", "bge-reranker"]
    with serving(tmp_path, args) as server:
        request = {
            "model": "bge-reranker",
            "text_1": "the cat sat",
            "text_2": ["the cat sat", "a dog ran", "the cat ran"],
        }
        status, body = server.post("/v1/score", request, key=None)
        bare = server.post("/score", request, key=None)[1]
        mismatch = server.post("/v1/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}, key=None)
        rerank = server.post(
            "/v1/rerank", {"query": "the cat sat", "documents": ["a dog ran", "the cat ran"]}, key=None
        )[1]
        embed = server.post("/v1/embeddings", {"input": "x"}, key=None)
    assert status == 200
    assert body["id"].startswith("score-")
    assert (body["object"], body["model"]) == ("list", "bge-reranker")
    assert body["data"] == [
        {"index": 0, "object": "score", "score": 1.0},
        {"index": 1, "object": "score", "score": 0.0},
        {"index": 2, "object": "score", "score": 0.5},
    ]
    assert body["usage"] == {
        "prompt_tokens": 18,
        "total_tokens": 18,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
    assert bare["data"] == body["data"]
    assert mismatch == (
        400,
        {
            "error": {
                "message": "Input lengths must be either 1:1, 1:N or N:N",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    )
    assert [(r["index"], r["relevance_score"]) for r in rerank["results"]] == [(1, 0.5), (0, 0.0)]
    assert embed[1]["error"]["message"] == "The model does not support Embeddings API"


# --------------------------------------------------------------------------- build: setup.py


def test_build_files_reference_github_for_the_mirror_rewrite():
    for relative, count in (
        ("CMakeLists.txt", 3),
        ("cmake/cpu_extension.cmake", 1),
        ("requirements/test.in", 2),
        ("requirements/test.txt", 2),
        ("setup.py", 1),
    ):
        assert (VLLM_SRC / relative).read_text().count("https://github.com/") == count, relative


def test_cmake_fetch_from_github_fails_offline():
    setup = load_setup_module()
    assert setup.fetch_content_urls(VLLM_SRC) == [
        ("CMakeLists.txt", "cutlass", "https://github.com/nvidia/cutlass.git"),
        ("CMakeLists.txt", "flashmla", "https://github.com/vllm-project/FlashMLA"),
        ("CMakeLists.txt", "vllm-flash-attn", "https://github.com/vllm-project/flash-attention.git"),
        ("cmake/cpu_extension.cmake", "oneDNN", "https://github.com/oneapi-src/oneDNN.git"),
    ]
    out = io.StringIO()
    with pytest.raises(
        setup.CMakeFetchError, match=r"Failed to clone repository: 'https://github.com/nvidia/cutlass.git'"
    ):
        setup.simulate_cmake_fetch(VLLM_SRC, out=out)
    assert (
        "fatal: unable to access 'https://github.com/nvidia/cutlass.git/': Could not resolve host: github.com"
        in out.getvalue()
    )


def test_cmake_fetch_through_mirrors_succeeds(tmp_path):
    setup = load_setup_module()
    tree = tmp_path / "vllm"
    shutil.copytree(VLLM_SRC, tree, ignore=shutil.ignore_patterns("__pycache__"))
    cmake = tree / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("https://github.com/", "https://githubfast.com/"))
    cpu = tree / "cmake" / "cpu_extension.cmake"
    cpu.write_text(cpu.read_text().replace("https://github.com/", "http://127.0.0.1:8080/github/https://github.com/"))
    assert setup.simulate_cmake_fetch(tree, out=io.StringIO()) == [
        "https://githubfast.com/nvidia/cutlass.git",
        "https://githubfast.com/vllm-project/FlashMLA",
        "https://githubfast.com/vllm-project/flash-attention.git",
        "http://127.0.0.1:8080/github/https://github.com/oneapi-src/oneDNN.git",
    ]


def test_package_version(tmp_path, monkeypatch):
    setup = load_setup_module()
    tree = tmp_path / "vllm"
    shutil.copytree(VLLM_SRC, tree, ignore=shutil.ignore_patterns("__pycache__"))
    assert setup.package_version(tree) == f"{VERSION_BASE}.dev0"  # not a git checkout

    git = ["git", "-c", "user.name=lab", "-c", "user.email=lab@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tree, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tree, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fixed commit"], cwd=tree, check=True)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert setup.package_version(tree) == f"{VERSION_BASE}.dev0+g{sha[:9]}"

    # Rewriting tracked files (the GitHub mirror edit) makes the tree dirty: setuptools-scm adds the date.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1765324800")  # 2025-12-10
    (tree / "setup.py").write_text((tree / "setup.py").read_text().replace("github.com", "githubfast.com"))
    assert setup.package_version(tree) == f"{VERSION_BASE}.dev0+g{sha[:9]}.d20251210"

    (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.16.0'\n")
    assert setup.package_version(tree) == "0.16.0"


# --------------------------------------------------------------------------- vllm-ascend platform plugin


def ascend_env(
    tmp_path: Path, *, devices: int = 2, manager: bool = True, torch_npu: str | None = "ok", **overrides: str
) -> dict[str, str]:
    """A fake Ascend node under tmp: /dev, CANN toolkit dir, torch_npu, and the plugin's entry point."""
    lab_root = tmp_path / "labroot"
    (lab_root / "dev").mkdir(parents=True, exist_ok=True)
    if manager:
        (lab_root / "dev" / "davinci_manager").touch()
    for n in range(devices):
        (lab_root / "dev" / f"davinci{n}").touch()
    (lab_root / "usr/local/Ascend/ascend-toolkit/latest").mkdir(parents=True, exist_ok=True)
    # The plugin is found like an installed one: a dist-info with its entry point.
    site = tmp_path / "site"
    dist_info = site / "vllm_ascend-0.11.0rc1.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm_ascend\nVersion: 0.11.0rc1\n")
    (dist_info / "entry_points.txt").write_text("[vllm.platform_plugins]\nascend = vllm_ascend:register\n")
    paths = [ASCEND_SRC, site]
    if torch_npu is not None:
        module = tmp_path / "torch_npu_mod" / "torch_npu"
        module.mkdir(parents=True, exist_ok=True)
        code = {
            "ok": "__version__ = '2.7.1'\n",
            "wrong-torch": f"raise ImportError({WRONG_TORCH!r})\n",
        }[torch_npu]
        (module / "__init__.py").write_text(code)
        paths.append(module.parent)
    settings = {
        "VLLM_PLUGINS": "ascend",
        "ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest",
        **overrides,
    }
    env = standin_env(tmp_path, tuple(paths), **settings)
    return {k: v for k, v in env.items() if v != "<unset>"}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"manager": False}, "NPUUnavailableError: No Ascend NPU found: /dev/davinci_manager does not exist."),
        (
            {"ASCEND_RT_VISIBLE_DEVICES": "1,5"},
            "vLLM needs 2 NPUs (tensor_parallel_size x pipeline_parallel_size x data_parallel_size) but 1 are usable: "
            "ASCEND_RT_VISIBLE_DEVICES=1,5, present: /dev/davinci0, /dev/davinci1.",
        ),
        ({"devices": 1}, "vLLM needs 2 NPUs"),
        ({"ASCEND_TOOLKIT_HOME": "<unset>"}, "The CANN environment is not loaded (ASCEND_TOOLKIT_HOME is not set)."),
        ({"ASCEND_TOOLKIT_HOME": "/opt/nowhere"}, "ASCEND_TOOLKIT_HOME=/opt/nowhere does not exist"),
        ({"torch_npu": None}, "Failed to import torch_npu: ModuleNotFoundError: No module named 'torch_npu'"),
        (
            {"torch_npu": "wrong-torch"},
            f"Failed to import torch_npu: ImportError: {WRONG_TORCH}",
        ),
    ],
)
def test_ascend_platform_vetoes_startup(tmp_path, node, message):
    model = make_model(tmp_path / "model")
    done = vllm_cli(["serve", str(model), "--tensor-parallel-size", "2"], ascend_env(tmp_path, **node))
    assert done.returncode == 1
    assert "Platform plugin ascend is activated" in done.stderr
    assert message in done.stderr
    assert "Application startup complete." not in done.stderr


def test_ascend_platform_serves_when_the_stack_is_complete(tmp_path):
    model = make_model(tmp_path / "model")
    # 32 blocks hold 4096 tokens only with vllm-ascend's default block size (128).
    args = [str(model), "-tp", "2", "--num-gpu-blocks-override", "32"]
    env = ascend_env(tmp_path, devices=8, ASCEND_RT_VISIBLE_DEVICES="6,7")
    with serving(tmp_path, args, env) as server:
        status, body = server.post("/v1/completions", {"prompt": "ni hao", "max_tokens": 3}, key=None)
    log = server.log.read_text()
    assert status == 200
    assert body["choices"][0]["text"] == "I am " + str(model) + ","
    assert "- ascend -> vllm_ascend:register" in log
    assert "Platform: npu (device type 'npu')" in log
    assert "Ascend NPUs usable: 6, 7 (torch_npu 2.7.1, CANN at /usr/local/Ascend/ascend-toolkit/latest)" in log


def test_ascend_node_without_the_plugin_cannot_infer_the_device(tmp_path):
    model = make_model(tmp_path / "model")
    done = vllm_cli(["serve", str(model)], ascend_env(tmp_path, VLLM_PLUGINS=""))
    assert done.returncode == 1
    assert "No platform detected, vLLM is running on UnspecifiedPlatform" in done.stderr
    assert "RuntimeError: Failed to infer device type" in done.stderr


def test_builtin_cuda_platform_checks_gpu_count(tmp_path):
    model = make_model(tmp_path / "model")
    env = standin_env(tmp_path)
    dev = Path(env["VLLM_FLEET_LAB_ROOT"]) / "dev"
    for name in ("nvidiactl", "nvidia0", "nvidia1"):
        (dev / name).touch()
    done = vllm_cli(["serve", str(model), "-tp", "2"], {**env, "CUDA_VISIBLE_DEVICES": "1"})
    assert done.returncode == 1
    assert "Automatically detected platform cuda." in done.stderr
    assert (
        "World size (2) is larger than the number of available GPUs (1) in this node (CUDA_VISIBLE_DEVICES=1)."
        in done.stderr
    )
