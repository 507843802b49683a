"""The inventory validation: every rule rejects what it should, with host, variable, value and accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vllm_fleet.validation import validate_hosts


def test_example_inventory_is_valid(example):
    assert validate_hosts(example) == []


def problems_for(hosts, host="ascend-01"):
    return [p for p in validate_hosts(hosts) if p.startswith(f"host {host}:")]


def test_version_read_as_float_is_rejected_with_a_hint(example):
    example["ascend-01"]["fleet_matrix"]["cann_toolkit"]["version"] = 8.3
    (p,) = problems_for(example)
    assert "fleet_matrix.cann_toolkit.version = 8.3 (a number)" in p
    assert "put it in quotes" in p


@pytest.mark.parametrize("commit", ["275de34", "275DE34170654274616082721348B7EDD9741D32", "v0.11.2"])
def test_commit_must_be_40_hex(example, commit):
    example["ascend-01"]["fleet_matrix"]["vllm"]["commit"] = commit
    (p,) = problems_for(example)
    assert p == (f"host ascend-01: fleet_matrix.vllm.commit = {commit!r} (a string): "
                 "expected a full git commit id: 40 lowercase hex digits")


def test_sha256_must_be_64_hex(example):
    example["ascend-01"]["fleet_matrix"]["npu_driver"]["sha256"] = "abc"
    (p,) = problems_for(example)
    assert "fleet_matrix.npu_driver.sha256 = 'abc'" in p and "64 lowercase hex digits" in p


def test_missing_matrix_component_is_named(example):
    del example["ascend-01"]["fleet_matrix"]["torch_npu"]
    (p,) = problems_for(example)
    assert p.startswith("host ascend-01: fleet_matrix.torch_npu is missing")


def test_artifact_needs_exactly_one_location(example):
    example["ascend-01"]["fleet_matrix"]["cann_nnal"]["url"] = "https://mirror.example/nnal.run"
    (p,) = problems_for(example)
    assert "fleet_matrix.cann_nnal" in p and "exactly one of file, url or path" in p


def test_enum_lists_accepted_values(example):
    example["ascend-01"]["fleet_accelerator"]["vendor"] = "huawei"
    (p,) = problems_for(example)
    assert "fleet_accelerator.vendor = 'huawei' (a string): expected one of ascend, metax, musa, nvidia" in p


def test_unknown_model_key_suggests_the_right_one(example):
    example["ascend-01"]["fleet_models"][0]["prot"] = 8001
    (p,) = problems_for(example)
    assert "unknown key 'prot' (did you mean 'port'?)" in p


def test_unknown_kind_lists_profiles(example):
    example["ascend-01"]["fleet_models"][0]["kind"] = "chatbot"
    (p,) = problems_for(example)
    assert "kind = 'chatbot'" in p and "chat, embedding, gptq, moe, multimodal, reranker" in p


def test_tensor_parallel_larger_than_device_count(example):
    example["ascend-01"]["fleet_models"][0]["serve"]["tensor_parallel_size"] = 16
    del example["ascend-01"]["fleet_models"][0]["devices"]
    (p,) = problems_for(example)
    assert p == ("host ascend-01: model gpt-oss-120b: needs 16 devices (tensor x pipeline x data parallel sizes) "
                 "but fleet_accelerator.count is 8")


def test_devices_beyond_count(example):
    example["ascend-01"]["fleet_accelerator"]["count"] = 4
    (p,) = problems_for(example)
    assert "devices [4, 5, 6, 7] do not exist; fleet_accelerator.count is 4 (devices 0-3)" in p


def test_duplicate_ports_on_a_host(example):
    models = example["ascend-01"]["fleet_models"]
    models[0]["devices"] = [0, 1, 2, 3]
    models[0]["serve"]["tensor_parallel_size"] = 4
    models.append({"name": "second", "kind": "chat", "path": "/home/models/x", "port": 8000,
                   "devices": [4], "serve": {"served_model_name": "x"}})
    assert problems_for(example) == [
        "host ascend-01: model second: port 8000 is already used by model gpt-oss-120b; "
        "each model on a host needs its own port"]


def test_overlapping_devices(example):
    models = example["ascend-01"]["fleet_models"]
    models.append({"name": "second", "kind": "chat", "path": "/home/models/x", "devices": [7]})
    (p,) = problems_for(example)
    assert p == ("host ascend-01: model second: device 7 is already given to model gpt-oss-120b; "
                 "device sets of models on one host must not overlap")


def test_automatic_allocation_fills_free_devices(example):
    from vllm_fleet.models import resolve_models

    acc = {"vendor": "ascend", "model": "910B3", "count": 8}
    models = [
        {"name": "a", "kind": "chat", "path": "/m/a", "devices": [0, 1]},
        {"name": "b", "kind": "chat", "path": "/m/b", "serve": {"tensor_parallel_size": 4}},
        {"name": "c", "kind": "embedding", "path": "/m/c"},
    ]
    resolved, problems = resolve_models(models, acc)
    assert problems == []
    assert [(m["name"], m["port"], m["devices"]) for m in resolved] == [
        ("a", 8000, [0, 1]), ("b", 8001, [2, 3, 4, 5]), ("c", 8002, [6])]
    assert resolved[1]["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "2,3,4,5"


def test_same_address_and_port_across_hosts(example):
    example["metax-01"]["ansible_host"] = example["ascend-01"]["ansible_host"]
    example["metax-01"]["fleet_models"][0]["port"] = 8000
    problems = validate_hosts(example)
    assert any("host metax-01: model gpt-oss-20b: port 8000: port 8000 on address 192.0.2.11 is already model "
               "gpt-oss-120b of ascend-01" in p for p in problems), problems


def test_ascend_graph_mode_needs_its_env(example):
    del example["ascend-01"]["fleet_serve_env"]["IGNORE_GRAPH_UPDATE_EXCEPTIONS"]
    (p,) = problems_for(example)
    assert "cudagraph_mode = 'PIECEWISE' (graph mode) needs IGNORE_GRAPH_UPDATE_EXCEPTIONS" in p


def test_ascend_container_mode_needs_the_image(example):
    example["ascend-01"]["fleet_deploy_mode"] = "container"
    del example["ascend-01"]["fleet_matrix"]["cann_image"]
    (p,) = problems_for(example)
    assert p.startswith("host ascend-01: fleet_matrix.cann_image is missing; container mode")


def test_role_variable_typo_is_caught(example):
    example["ascend-01"]["preflight_check_modle"] = False
    (p,) = problems_for(example)
    assert "preflight_check_modle = false (a boolean): not a variable of role preflight" in p
    assert "did you mean 'preflight_check_model'?" in p


def test_role_variable_type_is_checked(example):
    example["ascend-01"]["preflight_check_disk"] = "sometimes"
    (p,) = problems_for(example)
    assert p.startswith("host ascend-01: preflight_check_disk = 'sometimes' (a string):")
    assert "accepted: true or false, unquoted" in p


def test_every_problem_of_every_host_is_reported_at_once(example):
    example["ascend-01"]["fleet_matrix"]["vllm"]["commit"] = "abc"
    example["nvidia-01"]["fleet_serve_base_port"] = "eight thousand"
    problems = validate_hosts(example)
    assert len(problems) == 2
    assert problems[0].startswith("host ascend-01:") and problems[1].startswith("host nvidia-01:")


def test_numeric_string_from_extra_vars_gets_a_hint(example):
    example["nvidia-01"]["fleet_min_free_disk_gb"] = "100000"
    (p,) = problems_for(example, "nvidia-01")
    assert "fleet_min_free_disk_gb = '100000' (a string): expected a number of GB (>= 0)" in p
    assert "in a YAML file write 100000 without quotes" in p
    assert "pass numbers as JSON, e.g. -e '{\"fleet_min_free_disk_gb\": 100000}'" in p


@pytest.mark.parametrize("text,number", [(" 0.5", "0.5"), ("+7", "7"), (".5", "0.5"), ("1e3", "1000.0")])
def test_the_hint_writes_the_number_as_yaml_and_json_read_it(example, text, number):
    """Whichever route brought the string (a quoted value in a vars file, -e key=value), the hint's number
    is one YAML and JSON both read as that number."""
    example["nvidia-01"]["fleet_min_free_disk_gb"] = text
    (p,) = problems_for(example, "nvidia-01")
    assert f"write {number} without quotes" in p and f"-e '{{\"fleet_min_free_disk_gb\": {number}}}'" in p
    assert json.loads(number) == yaml.safe_load(number) == float(text)


def test_a_quoted_number_inside_a_variable_gets_the_yaml_hint_only(example):
    example["nvidia-01"]["fleet_models"][0]["port"] = "8001"
    (p,) = problems_for(example, "nvidia-01")
    assert "write 8001 without quotes)" in p and "-e" not in p.split("without quotes")[1]


def test_a_string_that_is_no_finite_number_gets_no_hint(example):
    example["nvidia-01"]["fleet_min_free_disk_gb"] = "nan"
    (p,) = problems_for(example, "nvidia-01")
    assert "without quotes" not in p


# ------------------------------------------------------------------ NVIDIA (seed 003) and LoRA adapters

def nvidia_problems(example):
    return problems_for(example, "nvidia-01")


def test_nvidia_matrix_names_every_required_component(example):
    del example["nvidia-01"]["fleet_matrix"]["nvidia_driver"]
    (p,) = nvidia_problems(example)
    assert p == ("host nvidia-01: fleet_matrix.nvidia_driver is missing; expected a mapping with branch, version, "
                 "packages and package_version")


@pytest.mark.parametrize("version", ["570", "v570.195.03", 570.195])
def test_nvidia_driver_version_is_a_driver_version(example, version):
    example["nvidia-01"]["fleet_matrix"]["nvidia_driver"]["version"] = version
    problems = nvidia_problems(example)
    assert any("fleet_matrix.nvidia_driver.version = " in p and "the driver version nvidia-smi reports" in p
               for p in problems), problems


def test_nvidia_driver_version_must_belong_to_the_branch(example):
    example["nvidia-01"]["fleet_matrix"]["nvidia_driver"]["version"] = "550.144.03"
    problems = nvidia_problems(example)
    assert ("host nvidia-01: fleet_matrix.nvidia_driver.version = '550.144.03' is not a driver of branch '570'; "
            "accepted: a 570.x version, or branch '550' for this version") in problems


def test_nvidia_package_version_must_install_the_driver_version(example):
    example["nvidia-01"]["fleet_matrix"]["nvidia_driver"]["package_version"] = "570.172.08-0ubuntu0.22.04.1"
    (p,) = nvidia_problems(example)
    assert p.startswith("host nvidia-01: fleet_matrix.nvidia_driver.package_version = '570.172.08-0ubuntu0.22.04.1' "
                        "installs driver 570.172.08, not version '570.195.03'")
    assert "apt-cache policy nvidia-driver-570" in p


@pytest.mark.parametrize("package_version", ["570.195.03-0ubuntu0.22.04.1", "1:570.195.03-1~deb12u1", "570.195.03"])
def test_nvidia_package_versions_of_debian_and_ubuntu_are_accepted(example, package_version):
    example["nvidia-01"]["fleet_matrix"]["nvidia_driver"]["package_version"] = package_version
    assert nvidia_problems(example) == []


def test_nvidia_container_mode_needs_the_toolkit_and_the_image(example):
    example["nvidia-01"]["fleet_deploy_mode"] = "container"
    del example["nvidia-01"]["fleet_matrix"]["nvidia_container_toolkit"]
    del example["nvidia-01"]["fleet_matrix"]["vllm_image"]
    problems = nvidia_problems(example)
    assert len(problems) == 2
    assert problems[0].startswith("host nvidia-01: fleet_matrix.nvidia_container_toolkit is missing; container mode")
    assert problems[1].startswith("host nvidia-01: fleet_matrix.vllm_image is missing; container mode runs the vLLM "
                                  "OpenAI image")


@pytest.mark.parametrize("tag,ok", [("v0.11.2", True), ("v0.11.2-cu128", True), ("0.11.2", True),
                                    ("v0.11.1", False), ("v0.11.20", False), ("latest", False)])
def test_nvidia_image_tag_names_the_matrix_release(example, tag, ok):
    example["nvidia-01"]["fleet_matrix"]["vllm_image"]["tag"] = tag
    problems = nvidia_problems(example)
    if ok:
        assert problems == []
    else:
        (p,) = problems
        assert f"fleet_matrix.vllm_image.tag = {tag!r} does not name vLLM 0.11.2" in p


def test_apt_repository_of_the_inventory_is_checked_against_the_role_spec(example):
    del example["nvidia-01"]["nvidia_driver_apt_repositories"][0]["suites"]
    (p,) = nvidia_problems(example)
    assert p.startswith("host nvidia-01: nvidia_driver_apt_repositories = ")
    assert p.endswith("missing required arguments: suites found in nvidia_driver_apt_repositories")


def test_lora_adapters_need_enable_lora(example):
    example["nvidia-01"]["fleet_models"][0]["serve"]["enable_lora"] = False
    (p,) = nvidia_problems(example)
    assert p == ("host nvidia-01: fleet_models[0] (gpt-oss-20b).serve.enable_lora = false, but lora_adapters lists "
                 "3 adapter(s) and vLLM loads adapters only with --enable-lora; accepted: leave enable_lora out "
                 "(models with adapters get it) or true")


def test_lora_modules_are_written_as_lora_adapters(example):
    example["nvidia-01"]["fleet_models"][0]["serve"]["lora_modules"] = ["x=/home/models/x"]
    (p,) = nvidia_problems(example)
    assert p == ("host nvidia-01: fleet_models[0] (gpt-oss-20b).serve.lora_modules: set it as the model's "
                 "`lora_adapters` field instead")


def test_lora_adapter_names_are_unique_and_differ_from_served_names(example):
    adapters = example["nvidia-01"]["fleet_models"][0]["lora_adapters"]
    adapters[1]["name"] = adapters[0]["name"]
    adapters[2]["name"] = "gpt-oss-20b"
    problems = nvidia_problems(example)
    assert ("host nvidia-01: fleet_models[0] (gpt-oss-20b).lora_adapters: the name 'gpt-oss-20b-support' is used "
            "more than once; each adapter needs its own name") in problems
    assert ("host nvidia-01: model gpt-oss-20b: LoRA adapter name 'gpt-oss-20b' is also a served model name on "
            "the host; clients choose an adapter by its name, so it must differ from every served_model_name"
            ) in problems


def test_lora_adapter_shape_is_checked(example):
    example["nvidia-01"]["fleet_models"][0]["lora_adapters"][0] = {"name": "has space", "path": "relative/path"}
    problems = nvidia_problems(example)
    assert any("fleet_models[0].lora_adapters[0].name = 'has space'" in p for p in problems), problems
    assert any("fleet_models[0].lora_adapters[0].path = 'relative/path'" in p for p in problems), problems


def test_lora_adapter_from_a_hub_needs_its_client(example):
    del example["nvidia-01"]["fleet_matrix"]["huggingface_hub"]
    example["nvidia-01"]["fleet_models"][0]["source"] = {"type": "path"}
    (p,) = nvidia_problems(example)
    assert p == ("host nvidia-01: model gpt-oss-20b: source type huggingface needs fleet_matrix.huggingface_hub "
                 "(the version of the huggingface_hub client nodes download with); accepted: a version string")


def test_placeholder_checksums_are_found_at_any_depth():
    from vllm_fleet.validation import placeholder_checksums

    placeholder = "0" * 62 + "13"
    matrix = {
        "maca_driver": {"version": "3.2.1.3", "sha256": placeholder},
        "maca_sdk": {"version": "3.2.1.3", "sha256": "ab" * 32},
        "vllm_overlays": [{"name": "vllm", "sha256": "cd" * 32}, {"name": "code_generator", "sha256": placeholder}],
        "tiktoken_o200k": {"sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"},
    }
    assert placeholder_checksums(matrix) == ["fleet_matrix.maca_driver", "fleet_matrix.vllm_overlays[1]"]


def test_the_example_inventory_names_its_overlay_placeholders():
    import yaml

    from vllm_fleet.validation import placeholder_checksums

    root = Path(__file__).resolve().parents[2]
    matrix_file = root / "inventories/example/group_vars/metax-nodes/matrix.yml"
    matrix = yaml.safe_load(matrix_file.read_text())["fleet_matrix"]
    assert "fleet_matrix.vllm_overlays[0]" in placeholder_checksums(matrix)
    assert "fleet_matrix.tiktoken_o200k" not in placeholder_checksums(matrix)
