"""The models' disk filling up during a model fetch: a tmpfs of 8 KiB mounted over the
node's models directory (the model declares its true size, about 7 KB, so preflight's
estimate would let it through, but the files' blocks do not fit). The host fails with a
message that says the disk is full, where and how much is free; the model's path holds
nothing (the fetch stays in its staging directory); once space is freed the re-run
resumes and converges, and a third run fetches nothing."""

from __future__ import annotations

import time

import pytest

from ..conftest import recap
from .conftest import LAB, run_playbook

NODE = "ascend-01"
MODELS = "/home/models"
MODEL = f"{MODELS}/GPT-OSS"
REPO = "unsloth/gpt-oss-120b-BF16"


@pytest.fixture()
def small_disk(lab):
    """An 8 KiB filesystem over the models directory (whatever was there stays hidden under it)."""
    lab.run(LAB, NODE, f"mkdir -p {MODELS} && mount -t tmpfs -o size=8k,mode=0755 vllm-fleet-fault {MODELS}")
    try:
        yield
    finally:
        lab.run(LAB, NODE, f"umount {MODELS}")


def test_disk_full_during_a_model_fetch_fails_clearly_and_writes_nothing_to_the_model_path(lab, small_disk):
    start = time.monotonic()
    full = run_playbook("-l", NODE, playbook="models.yml")
    print(f"disk-full run: {time.monotonic() - start:.0f} s")
    assert recap(full.stdout)[NODE]["failed"] == 1, full.stdout[-4000:]
    out = " ".join(full.stdout.split())  # the message as one line, whatever the callback's wrapping
    assert f"{NODE}: could not fetch gpt-oss-120b from modelscope: the disk is full: {MODEL}.partial " \
           f"(filesystem {MODELS}) has 0 bytes free, and the model declares size_gb 6.872e-06" in out, out[-4000:]
    assert f"Nothing was written to {MODEL}; what was fetched stays in {MODEL}.partial" in out
    # Nothing at the model's path; the client's partial files are in the staging directory.
    assert lab.run(LAB, NODE, f"test -e {MODEL} && echo there || echo absent").strip() == "absent"
    staged = lab.run(LAB, NODE, f"ls -A {MODEL}.partial").split()
    assert any(name.endswith(".incomplete") for name in staged), staged

    # Space freed (the filesystem grown under the files): the re-run resumes and converges.
    lab.run(LAB, NODE, f"mount -o remount,size=1m {MODELS}")
    start = time.monotonic()
    again = run_playbook("-l", NODE, playbook="models.yml")
    print(f"re-run after freeing space: {time.monotonic() - start:.0f} s")
    assert again.returncode == 0, again.stdout[-4000:]
    assert lab.run(LAB, NODE, f"ls -A {MODELS}").split() == ["GPT-OSS"]
    files = lab.manifest(LAB)["hub"][REPO]["files"]
    listing = lab.run(LAB, NODE, f"cd {MODEL} && find . -type f ! -name '.vllm-fleet-*' -printf '%P\\n' "
                                 f"| sort | xargs -d '\\n' sha256sum --").splitlines()
    assert {name: digest for digest, name in (line.split(maxsplit=1) for line in listing)} == \
        {name: f["sha256"] for name, f in files.items()}
    assert lab.run(LAB, NODE, f"test -s {MODEL}/.vllm-fleet-complete && echo marked").strip() == "marked"

    third = run_playbook("-l", NODE, playbook="models.yml")
    assert third.returncode == 0, third.stdout[-4000:]
    assert "Download from ModelScope" not in third.stdout
