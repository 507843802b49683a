"""roles/blocks/container_image's setting of the node's container engine for the fleet's mirror's registry
(plain HTTP): docker's daemon configuration (merged), podman's drop-in of registries.conf.d; each task file
run on localhost against a directory of the test's, the paths overridden."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import ansible_playbook

pytestmark = pytest.mark.ansible

MIRROR = "http://192.0.2.7:8081"
# What nvidia-ctk writes (`nvidia-ctk runtime configure --runtime=docker`), and a registry of the site's own.
NVIDIA = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


def run(tmp_path: Path, tasks_from: str, mirror: str, *extra: str) -> tuple[str, int]:
    """The role's task file on localhost with the mirror at `mirror` ("" without one): its output and
    how many tasks changed; a fake systemctl logs its calls to tmp_path/systemctl.log."""
    book = tmp_path / "registry.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The engine's registries", "ansible.builtin.include_role": {
            "name": "blocks/container_image", "tasks_from": tasks_from, "rolespec_validate": False}}]}]))
    bin_dir = tmp_path / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/systemctl.log\n')
        (bin_dir / "systemctl").chmod(0o755)
    variables = {"fleet_mirror_url": mirror, "container_image_docker_config": str(tmp_path / "docker/daemon.json"),
                 "container_image_registries_dir": str(tmp_path / "containers/registries.conf.d")}
    proc = ansible_playbook("-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                            "-e", json.dumps(variables), str(book), *extra,
                            env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("localhost"))
    return out, int(recap.split("changed=")[1].split()[0])


def reloads(tmp_path: Path) -> list[str]:
    log = tmp_path / "systemctl.log"
    return log.read_text().splitlines() if log.is_file() else []


def test_podmans_drop_in_names_the_mirrors_registry_and_leaves_with_it(tmp_path):
    conf = tmp_path / "containers/registries.conf.d/50-vllm-fleet-mirror.conf"
    run(tmp_path, "registry_podman.yml", MIRROR, "--check")
    assert not conf.exists(), "check mode wrote podman's drop-in"
    _, changed = run(tmp_path, "registry_podman.yml", MIRROR)
    assert changed == 2
    assert tomllib.loads(conf.read_text()) == {"registry": [{"location": "192.0.2.7:8081", "insecure": True}]}
    assert run(tmp_path, "registry_podman.yml", MIRROR)[1] == 0
    run(tmp_path, "registry_podman.yml", "")
    assert not conf.exists()


def test_dockers_insecure_registries_take_the_mirrors_once_and_keep_every_other_key(tmp_path):
    config = tmp_path / "docker/daemon.json"
    config.parent.mkdir()
    config.write_text(json.dumps({**NVIDIA, "insecure-registries": ["10.0.0.1:5000"]}, indent=4))
    before = config.read_text()

    run(tmp_path, "registry_docker.yml", MIRROR, "--check")
    assert config.read_text() == before and reloads(tmp_path) == [], "check mode wrote or reloaded"

    _, changed = run(tmp_path, "registry_docker.yml", MIRROR)
    assert changed >= 2
    assert json.loads(config.read_text()) == {**NVIDIA, "insecure-registries": ["10.0.0.1:5000", "192.0.2.7:8081"]}
    assert reloads(tmp_path) == ["try-reload-or-restart docker.service"]

    # Again: nothing to write, no reload, the registry still there once.
    assert run(tmp_path, "registry_docker.yml", MIRROR)[1] == 0
    assert json.loads(config.read_text())["insecure-registries"] == ["10.0.0.1:5000", "192.0.2.7:8081"]
    assert len(reloads(tmp_path)) == 1

    # The mirror moves: its old entry goes, the site's stays.
    run(tmp_path, "registry_docker.yml", "http://192.0.2.8:8081")
    assert json.loads(config.read_text()) == {**NVIDIA, "insecure-registries": ["10.0.0.1:5000", "192.0.2.8:8081"]}

    # No mirror: the fleet's entry goes, everything else stays.
    run(tmp_path, "registry_docker.yml", "")
    assert json.loads(config.read_text()) == {**NVIDIA, "insecure-registries": ["10.0.0.1:5000"]}
    assert not (tmp_path / "docker/vllm-fleet-mirror-registry").exists()
    assert len(reloads(tmp_path)) == 3


def test_docker_without_a_configuration_gets_one_and_loses_the_key_again(tmp_path):
    config = tmp_path / "docker/daemon.json"
    run(tmp_path, "registry_docker.yml", MIRROR)
    assert json.loads(config.read_text()) == {"insecure-registries": ["192.0.2.7:8081"]}
    config.write_text(json.dumps({**json.loads(config.read_text()), **NVIDIA}))  # nvidia-ctk, after the fleet
    run(tmp_path, "registry_docker.yml", "")
    assert json.loads(config.read_text()) == NVIDIA
