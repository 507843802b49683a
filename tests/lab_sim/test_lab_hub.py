"""The lab's model hub against the real download clients.

A web root holding only the hub is built in a temporary directory
(``vllm_fleet_lab.www.build_hub``) and served by the lab's own web server
(``lab/fixtures/services/labweb.py``) on a free 127.0.0.1 port. The clients nodes
use then download from it exactly as on a node: ``huggingface_hub`` (API and the
``hf`` CLI), ``modelscope`` (API and CLI) and ``git clone`` with ``git lfs``, each
in its own process with only the endpoint variables pointing it at the lab.

Every downloaded file is compared (name, size, sha256) with the fixture it came
from. Resuming is proven with the hub's fault plan: a cut transfer, then a run
that completes, with the server's log showing what was fetched again.

Every client process gets a proxy that records any request it receives: a
request that is not for 127.0.0.1 would reach it, and the tests fail if one does.
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
import time
from pathlib import Path

import pytest

from tests.conftest import OffLoopbackTrap, load_module, start_labweb
from vllm_fleet_lab import www

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "lab" / "fixtures" / "models"
LABWEB = REPO / "lab" / "fixtures" / "services" / "labweb.py"
BIN = Path(sys.executable).parent

EXPECTED_REPOS = {
    "unsloth/gpt-oss-120b-BF16", "unsloth/gpt-oss-20b-BF16", "openai/gpt-oss-20b", "Qwen/Qwen3-4B",
    "hiruyun/gptq-Qwen3-8B", "Qwen/Qwen3-30B-A3B-GPTQ-Int4", "potter001/gptq-Qwen3-VL-8B-Instruct-4bit-group",
    "deepseek-ai/DeepSeek-OCR-2", "BAAI/bge-m3", "BAAI/bge-reranker-v2-m3",
}
# LoRA adapters (adapter_config.json instead of config.json), published like models.
EXPECTED_ADAPTERS = {"vllm-fleet-lab/gpt-oss-20b-lora-support", "vllm-fleet-lab/gpt-oss-20b-lora-coding"}
HUB_LINE = re.compile(r"^hub: (?P<api>\S+) (?P<repo>\S+) (?P<file>\S+) bytes=(?P<start>\d+)-(?P<end>\d+) "
                      r"sent=(?P<sent>\d+)(?P<cut> CUT)?$")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fixture_files(repo_id: str) -> dict[str, tuple[int, str]]:
    """name -> (size, sha256) of a fixture, computed here independently of the builder."""
    root = MODELS / repo_id.replace("/", "--")
    return {p.relative_to(root).as_posix(): (p.stat().st_size, sha256(p))
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def expected_files(hub, repo_id: str) -> dict[str, tuple[int, str]]:
    """What a complete download holds: the fixture plus the published .gitattributes."""
    attrs = hub.section[repo_id]["files"][".gitattributes"]
    return {**fixture_files(repo_id), ".gitattributes": (attrs["size"], attrs["sha256"])}


def downloaded_files(root: Path) -> dict[str, tuple[int, str]]:
    """name -> (size, sha256) under a download, without the clients' own metadata folders."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in (".cache", ".git") or not p.is_file():
            continue
        out[rel.as_posix()] = (p.stat().st_size, sha256(p))
    return out


# ------------------------------------------------------------------ fixtures

_Trap = OffLoopbackTrap


class Hub:
    """A running lab web server over a hub-only web root, and how to run clients against it."""

    def __init__(self, root: Path, section: dict, url: str, log: Path, trap: _Trap, hub_module):
        self.root, self.section, self.url, self.log, self.trap, self.module = root, section, url, log, trap, hub_module

    def set_faults(self, faults: list[dict]) -> None:
        (self.root / "hub" / "_faults.json").write_text(json.dumps({"faults": faults}))

    def faults(self) -> list[dict]:
        return json.loads((self.root / "hub" / "_faults.json").read_text())["faults"]

    def log_offset(self) -> int:
        return self.log.stat().st_size

    def transfers(self, since: int = 0) -> list[dict]:
        """The hub's per-download log lines written since a log offset.

        The server logs a transfer after its last byte, which the client may have
        read already: wait until the log has been quiet for a moment.
        """
        size, deadline = -1, time.monotonic() + 5
        while self.log.stat().st_size != size and time.monotonic() < deadline:
            size = self.log.stat().st_size
            time.sleep(0.1)
        with open(self.log, "rb") as fh:
            fh.seek(since)
            lines = fh.read().decode().splitlines()
        return [m.groupdict() for m in map(HUB_LINE.match, lines) if m]

    def env(self, tmp: Path, **extra: str) -> dict:
        trap = f"http://127.0.0.1:{self.trap.server_address[1]}"
        home = tmp / "home"
        home.mkdir(exist_ok=True)
        env = {
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home), "LANG": "C.UTF-8",
            # The endpoints a node's inventory sets.
            "HF_ENDPOINT": f"{self.url}/huggingface",
            "MODELSCOPE_ENDPOINT": f"{self.url}/modelscope",
            # Caches and settings stay in the test's directory.
            "HF_HOME": str(tmp / "hf-home"), "MODELSCOPE_CACHE": str(tmp / "ms-cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
            # Anything not for 127.0.0.1 goes to the trap instead of the network.
            "HTTP_PROXY": trap, "HTTPS_PROXY": trap, "ALL_PROXY": trap,
            "http_proxy": trap, "https_proxy": trap, "all_proxy": trap,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        }
        env.update(extra)
        return env

    def run(self, args: list[str], env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert self.trap.hits == [], f"a client sent traffic off the loopback: {self.trap.hits}"
        return proc

    def python(self, code: str, env: dict, *args: str) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "-c", code, *args], env)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    section = www.build_hub(root)
    trap = _Trap()
    threading.Thread(target=trap.serve_forever, daemon=True).start()
    log = root.parent / "labweb.log"
    proc, url = start_labweb(root, log)
    module = load_module(LABWEB.parent / "hub.py", "lab_hub_under_test")
    try:
        yield Hub(root, section, url, log, trap, module)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        trap.shutdown()
        trap.server_close()


@pytest.fixture(autouse=True)
def _no_faults(request):
    """Each test starts without a fault plan."""
    yield
    if "hub" in request.fixturenames:
        (request.getfixturevalue("hub").root / "hub" / "_faults.json").unlink(missing_ok=True)


# ------------------------------------------------------------------ fixtures and builder

def _engine_config():
    """The engine stand-in's checks (what `vllm serve` refuses), loaded without its package."""
    path = REPO / "lab" / "fixtures" / "repos" / "vllm" / "vllm" / "config.py"
    # Registered: its dataclasses resolve annotations through sys.modules.
    return load_module(path, "engine_standin_config", register=True)


def test_fixture_models_are_complete_for_the_engine():
    engine = _engine_config()
    dirs = {p.name for p in MODELS.iterdir() if p.is_dir()}
    assert dirs == {r.replace("/", "--") for r in EXPECTED_REPOS | EXPECTED_ADAPTERS}
    total = sum(p.stat().st_size for p in MODELS.rglob("*") if p.is_file())
    assert total < 1_000_000
    for repo_id in sorted(EXPECTED_REPOS):
        model_dir = MODELS / repo_id.replace("/", "--")
        config = json.loads((model_dir / "config.json").read_text())
        assert config["model_type"] and config["architectures"], repo_id
        weights = engine.check_weights(str(model_dir))  # every shard of the index, each >= 8 bytes
        for path in weights:  # a valid safetensors header, data exactly as long as it declares
            blob = path.read_bytes()
            header_len = int.from_bytes(blob[:8], "little")
            header = json.loads(blob[8:8 + header_len])
            end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
            assert 8 + header_len + end == len(blob), path
        assert engine.derive_max_model_len(engine.load_hf_config(str(model_dir)), None) >= 8192, repo_id
    def config_of(repo_id: str) -> dict:
        return json.loads((MODELS / repo_id.replace("/", "--") / "config.json").read_text())

    sharded = {r for r in EXPECTED_REPOS if (MODELS / r.replace("/", "--") / "model.safetensors.index.json").exists()}
    assert sharded == {"unsloth/gpt-oss-120b-BF16", "openai/gpt-oss-20b", "Qwen/Qwen3-4B",
                       "Qwen/Qwen3-30B-A3B-GPTQ-Int4"}
    for repo_id in ("hiruyun/gptq-Qwen3-8B", "Qwen/Qwen3-30B-A3B-GPTQ-Int4",
                    "potter001/gptq-Qwen3-VL-8B-Instruct-4bit-group"):
        assert config_of(repo_id)["quantization_config"]["quant_method"] == "gptq", repo_id
    assert config_of("openai/gpt-oss-20b")["quantization_config"]["quant_method"] == "mxfp4"
    assert "quantization_config" not in config_of("unsloth/gpt-oss-120b-BF16")
    vl = config_of("potter001/gptq-Qwen3-VL-8B-Instruct-4bit-group")
    assert "max_position_embeddings" not in vl and vl["text_config"]["max_position_embeddings"] == 262144
    assert config_of("BAAI/bge-m3")["hidden_size"] == 1024
    assert config_of("BAAI/bge-reranker-v2-m3")["architectures"] == ["XLMRobertaForSequenceClassification"]
    assert config_of("unsloth/gpt-oss-120b-BF16")["model_type"] == "gpt_oss"


def test_fixture_adapters_are_peft_lora_adapters_of_gpt_oss_20b():
    """What the engine stand-in (and vLLM) read of an adapter: its config and its lora_A/lora_B tensors."""
    for repo_id in sorted(EXPECTED_ADAPTERS):
        adapter_dir = MODELS / repo_id.replace("/", "--")
        assert not (adapter_dir / "config.json").exists(), repo_id
        config = json.loads((adapter_dir / "adapter_config.json").read_text())
        assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == "openai/gpt-oss-20b"
        blob = (adapter_dir / "adapter_model.safetensors").read_bytes()
        header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        assert tensors and all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in tensors), repo_id
        assert {v["shape"][0] for k, v in tensors.items() if "lora_A" in k} == {config["r"]}, repo_id


def test_builder_publishes_every_fixture_with_a_deterministic_revision(hub, tmp_path):
    assert set(hub.section) == EXPECTED_REPOS | EXPECTED_ADAPTERS
    for repo_id, entry in hub.section.items():
        assert re.fullmatch(r"[0-9a-f]{40}", entry["revision"]), repo_id
        files = {name: (f["size"], f["sha256"]) for name, f in entry["files"].items()}
        assert files == expected_files(hub, repo_id)
        assert entry["size_gb"] == round(sum(size for size, _ in files.values()) / 1e9, 9)
    attrs = hub.root / "hub" / "Qwen" / "Qwen3-4B" / ".gitattributes"
    assert "*.safetensors filter=lfs diff=lfs merge=lfs -text\n" in attrs.read_text()
    again = www.build_hub(tmp_path / "www")
    assert {r: e["revision"] for r, e in again.items()} == {r: e["revision"] for r, e in hub.section.items()}


# ------------------------------------------------------------------ Hugging Face

HF_SNAPSHOTS = """
import json, sys
from huggingface_hub import snapshot_download
for repo_id, (local_dir, revision) in json.loads(sys.argv[1]).items():
    snapshot_download(repo_id, local_dir=local_dir, revision=revision)
"""


def test_huggingface_snapshot_download_of_every_model(hub, tmp_path):
    # The gpt-oss-120b download is seed 001's call (no revision: the default branch);
    # the others are pinned to the revision the lab's manifest reports.
    plan = {repo_id: (str(tmp_path / "models" / repo_id),
                      None if repo_id == "unsloth/gpt-oss-120b-BF16" else entry["revision"])
            for repo_id, entry in hub.section.items()}
    proc = hub.python(HF_SNAPSHOTS, hub.env(tmp_path), json.dumps(plan))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for repo_id in EXPECTED_REPOS | EXPECTED_ADAPTERS:
        assert downloaded_files(tmp_path / "models" / repo_id) == expected_files(hub, repo_id), repo_id
    assert (tmp_path / "models" / "openai/gpt-oss-20b" / "original" / "model.safetensors").is_file()


def test_hf_cli_download_resumes_after_a_failed_run(hub, tmp_path):
    repo_id, victim = "Qwen/Qwen3-4B", "model-00002-of-00003.safetensors"
    size = hub.section[repo_id]["files"][victim]["size"]
    dest = tmp_path / "Qwen3-4B"
    # The client retries a cut transfer 5 times within one run; 6 cuts make the run fail.
    hub.set_faults([{"repo": repo_id, "file": victim, "after_bytes": 100, "times": 6, "api": "huggingface"}])
    cmd = [str(BIN / "hf"), "download", repo_id, "--local-dir", str(dest)]
    start = hub.log_offset()
    first = hub.run(cmd, hub.env(tmp_path))
    assert first.returncode != 0
    assert hub.faults()[0]["times"] == 0 and hub.faults()[0]["fired"] == 6
    assert not (dest / victim).exists()
    cuts = [t for t in hub.transfers(start) if t["file"] == victim]
    assert len(cuts) == 6 and all(t["cut"] and t["sent"] == "100" for t in cuts)
    complete = {n for n in expected_files(hub, repo_id) if n != victim}
    assert {n for n in downloaded_files(dest)} == complete

    start = hub.log_offset()
    second = hub.run(cmd, hub.env(tmp_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert downloaded_files(dest) == expected_files(hub, repo_id)
    again = hub.transfers(start)
    # Only the file that failed is fetched again; complete files are not.
    assert [(t["file"], t["start"], t["sent"], t["cut"]) for t in again] == [(victim, "0", str(size), None)]


def test_huggingface_protocol_errors(hub):
    import urllib.error
    import urllib.request

    def call(url: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None):
        req = urllib.request.Request(hub.url + url, method=method, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    status, headers, _ = call("/huggingface/api/models/nobody/nothing")
    assert (status, headers["X-Error-Code"]) == (404, "RepoNotFound")
    status, headers, _ = call("/huggingface/api/models/Qwen/Qwen3-4B/revision/v0")
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    revision = hub.section["Qwen/Qwen3-4B"]["revision"]
    status, headers, _ = call("/huggingface/Qwen/Qwen3-4B/resolve/main/missing.json", "HEAD")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", revision)
    weights = hub.section["Qwen/Qwen3-4B"]["files"]["model-00001-of-00003.safetensors"]
    status, headers, _ = call("/huggingface/Qwen/Qwen3-4B/resolve/main/model-00001-of-00003.safetensors", "HEAD")
    assert status == 200 and headers["X-Repo-Commit"] == revision
    assert headers["X-Linked-Etag"] == f'"{weights["sha256"]}"' and headers["X-Linked-Size"] == str(weights["size"])
    status, headers, body = call("/huggingface/Qwen/Qwen3-4B/resolve/main/model-00001-of-00003.safetensors",
                                 headers={"Range": "bytes=10-"})
    assert status == 206 and headers["Content-Range"] == f"bytes 10-{weights['size'] - 1}/{weights['size']}"
    assert body == (hub.root / "hub" / "Qwen" / "Qwen3-4B" / "model-00001-of-00003.safetensors").read_bytes()[10:]
    status, _, _ = call("/huggingface/Qwen/Qwen3-4B/resolve/main/config.json", headers={"Range": "bytes=99999-"})
    assert status == 416
    batch = json.dumps({"operation": "upload", "objects": [{"oid": weights["sha256"], "size": weights["size"]}]})
    status, _, _ = call("/modelscope-git/Qwen/Qwen3-4B.git/info/lfs/objects/batch", "POST", batch.encode(),
                        {"Content-Type": "application/vnd.git-lfs+json"})
    assert status == 403


# ------------------------------------------------------------------ ModelScope

MS_SNAPSHOT = """
import sys
from modelscope import snapshot_download
print(snapshot_download(sys.argv[1], local_dir=sys.argv[2]))
"""


def test_modelscope_cli_and_api(hub, tmp_path):
    env = hub.env(tmp_path)
    dest = tmp_path / "GPT-OSS"
    # Seed 001's command, verbatim but for the directory.
    proc = hub.run([str(BIN / "modelscope"), "download", "--model=unsloth/gpt-oss-120b-BF16",
                    f"--local_dir={dest}"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert downloaded_files(dest) == expected_files(hub, "unsloth/gpt-oss-120b-BF16")
    for repo_id in ("BAAI/bge-m3", "deepseek-ai/DeepSeek-OCR-2"):
        proc = hub.python(MS_SNAPSHOT, env, repo_id, str(tmp_path / repo_id))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert downloaded_files(tmp_path / repo_id) == expected_files(hub, repo_id)


def test_modelscope_resumes_a_cut_file_with_a_range_request(hub, tmp_path):
    repo_id, victim = "Qwen/Qwen3-30B-A3B-GPTQ-Int4", "model-00002-of-00002.safetensors"
    size = hub.section[repo_id]["files"][victim]["size"]
    dest = tmp_path / "Qwen3-30B-A3B-GPTQ-Int4"
    hub.set_faults([{"repo": repo_id, "file": victim, "after_bytes": 96, "times": 1, "api": "modelscope"}])
    env = hub.env(tmp_path, MODELSCOPE_DOWNLOAD_MAX_RETRIES="0")  # fail the run at the first cut
    first = hub.python(MS_SNAPSHOT, env, repo_id, str(dest))
    assert first.returncode != 0 and victim in first.stderr
    assert (dest / f"{victim}.incomplete").stat().st_size == 96
    start = hub.log_offset()
    second = hub.python(MS_SNAPSHOT, env, repo_id, str(dest))
    assert second.returncode == 0, second.stderr[-3000:]
    assert downloaded_files(dest) == expected_files(hub, repo_id)
    again = [(t["file"], t["start"], t["sent"], t["cut"]) for t in hub.transfers(start)]
    assert again == [(victim, "96", str(size - 96), None)]


# ------------------------------------------------------------------ git + git-lfs

@pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed (apt-get install git-lfs)")
def test_git_lfs_clone_resumes_a_cut_object(hub, tmp_path):
    repo_id = "potter001/gptq-Qwen3-VL-8B-Instruct-4bit-group"
    size = hub.section[repo_id]["files"]["model.safetensors"]["size"]
    env = hub.env(tmp_path)
    assert hub.run(["git", "lfs", "install"], env).returncode == 0
    hub.set_faults([{"repo": repo_id, "file": "model.safetensors", "after_bytes": 100, "times": 1, "api": "lfs"}])
    start = hub.log_offset()
    # Seed 004's clone, with the lab's prefix in place of the hub's host.
    proc = hub.run(["git", "clone", f"{hub.url}/modelscope-git/{repo_id}.git"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    clone = tmp_path / repo_id.split("/")[1]
    assert downloaded_files(clone) == expected_files(hub, repo_id)
    head = hub.run(["git", "rev-parse", "HEAD"], env, cwd=clone).stdout.strip()
    assert head == hub.section[repo_id]["revision"]
    lfs_files = hub.run(["git", "lfs", "ls-files", "--name-only"], env, cwd=clone).stdout.split()
    assert {"model.safetensors", "tokenizer.json"} <= set(lfs_files)
    weights = [(t["start"], t["sent"], t["cut"]) for t in hub.transfers(start)
               if t["api"] == "lfs" and t["file"] == "model.safetensors"]
    # The cut transfer, then git-lfs resuming from the byte where it stopped.
    assert weights == [("0", "100", " CUT"), ("100", str(size - 100), None)]

    # The same repositories sit next to the ModelScope API, as on the real site.
    other = "hiruyun/gptq-Qwen3-8B"
    proc = hub.run(["git", "clone", "-q", f"{hub.url}/modelscope/{other}.git", "other"], env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert downloaded_files(tmp_path / "other") == expected_files(hub, other)
