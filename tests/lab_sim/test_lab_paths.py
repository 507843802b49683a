"""The lab's port registry: one block per lab, kept apart even when labs boot at once."""

from __future__ import annotations

import importlib
from concurrent.futures import ProcessPoolExecutor

import pytest


@pytest.fixture()
def paths(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FLEET_LAB_DIR", str(tmp_path))
    import vllm_fleet_lab.paths as module

    return importlib.reload(module)


def _reserve(args):
    state_dir, name = args
    import os

    os.environ["VLLM_FLEET_LAB_DIR"] = state_dir
    import vllm_fleet_lab.paths as module

    module = importlib.reload(module)
    return module.lab_paths(name).port_base


def test_labs_get_distinct_blocks_and_keep_them(paths):
    first = paths.lab_paths("lab")
    second = paths.lab_paths("molecule-fleet")
    assert first.port_base == paths.FIRST_PORT_BASE
    assert second.port_base == paths.FIRST_PORT_BASE + paths.PORT_BLOCK
    assert paths.lab_paths("lab").port_base == first.port_base
    assert paths.known_labs() == ["lab", "molecule-fleet"]


def test_a_released_block_is_reused(paths):
    paths.lab_paths("a")
    paths.lab_paths("b")
    paths.release_ports("a")
    assert paths.known_labs() == ["b"]
    assert paths.lab_paths("c").port_base == paths.FIRST_PORT_BASE


def test_a_block_taken_by_another_lab_is_refused(paths):
    paths.lab_paths("a")
    with pytest.raises(ValueError, match="used by another lab"):
        paths.lab_paths("b", port_base=paths.FIRST_PORT_BASE)


def test_bad_names_are_refused(paths):
    with pytest.raises(ValueError, match="lowercase"):
        paths.lab_paths("Lab_1")


def test_labs_reserved_at_the_same_moment_never_share_a_block(tmp_path):
    names = [f"lab-{i}" for i in range(12)]
    with ProcessPoolExecutor(max_workers=6) as pool:
        bases = list(pool.map(_reserve, [(str(tmp_path), n) for n in names]))
    assert len(set(bases)) == len(names), bases
