"""A fresh run interrupted twice over, on two nodes at once, then re-run: ascend-01's run
(the CLI, `vllm-fleet provision`) gets Ctrl-C and ascend-02 is rebooted, both while an
installer is on its way to them (the CANN kernels package; the web server serves it slowly, so both faults strike
mid-download, after the driver and firmware were installed). The re-run converges both
(a third run changes nothing), with every artifact whole and nothing half-installed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.conftest import venv_tool

from ..conftest import lab_env as env
from ..conftest import recap
from .conftest import INVENTORY, LAB, ROOT, artifact_path, playbook_cmd, run_playbook

CACHE = "/var/cache/vllm-fleet/downloads"


def boot_id(lab, node: str) -> str:
    return lab.run(LAB, node, "cat /proc/sys/kernel/random/boot_id").strip()


def wait_back(lab, node: str, before: str, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            now = lab.run(LAB, node, "systemctl is-system-running --wait >/dev/null; "
                                     "cat /proc/sys/kernel/random/boot_id", timeout=30).strip()
            if now and now != before:
                return now
        except Exception:  # noqa: BLE001 - the node is down while it reboots
            pass
        time.sleep(1)
    raise AssertionError(f"{node} did not come back from its reboot")


@pytest.fixture(scope="module")
def interrupted(lab):
    """Interrupt both runs mid-download; return what each said, then re-run both."""
    slow = artifact_path(lab, "cann_kernels")  # not fetched by test_download
    # Every request for it is slow while the faults strike, not just the first two, and held
    # open until the fault is lifted (at most 900 s, a piece every 5 s at most, within get_url's
    # timeout), so that the first node's download is still on its way when the second node's
    # begins, however far apart CI's load puts them: with a fixed 60 s, then 180 s, the test saw
    # ascend-01's whole file in the cache before the Ctrl-C.
    lab.set_faults(LAB, {slow: {"mode": "slow", "seconds": 900, "times": 20}})
    before = boot_id(lab, "ascend-02")
    cli = subprocess.Popen([venv_tool("vllm-fleet"), "provision", "-i", str(INVENTORY),
                            "-l", "ascend-01"], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    play = subprocess.Popen(playbook_cmd("-l", "ascend-02"), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        # A run that fails before the download ends the wait at once (below); the deadline only
        # bounds a run that hangs, so it leaves room for a loaded machine's slow fresh runs.
        deadline = time.monotonic() + 1200
        while lab.faults(LAB)[slow].get("hits", 0) < 2:
            assert time.monotonic() < deadline, "the nodes never reached the installer download"
            assert cli.poll() is None and play.poll() is None, "a run ended before the download"
            time.sleep(0.5)
        time.sleep(2)  # both downloads under way
        struck = time.monotonic()
        lab.run(LAB, "ascend-02", "systemctl reboot", timeout=10)
        os.killpg(cli.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
        cli_out, _ = cli.communicate(timeout=120)
        cli_seconds = time.monotonic() - struck
        # Read at once: the transfer the node's module had begun may go on after the controller
        # stopped, and ends whole (atomic rename) once the fault is lifted (finally, below).
        cache_after_cut = lab.run(LAB, "ascend-01", f"ls -A {CACHE}")
        play_out, _ = play.communicate(timeout=300)
    finally:
        lab.set_faults(LAB, {})
        for proc in (cli, play):
            if proc.poll() is None:
                proc.kill()
    after = wait_back(lab, "ascend-02", before)
    # No ansible-playbook of the interrupted CLI run still at work on the node.
    left = subprocess.run(["pgrep", "-f", "ansible-playbook .*-l ascend-01"], capture_output=True, text=True).stdout
    start = time.monotonic()
    rerun = run_playbook("-l", "ascend-01,ascend-02")
    print(f"re-run of both nodes: {time.monotonic() - start:.0f} s")
    return {"cli": cli, "cli_out": cli_out, "cli_seconds": cli_seconds, "left": left, "play": play,
            "cache_after_cut": cache_after_cut, "play_out": play_out, "before": before, "after": after, "rerun": rerun}


def whole_artifacts(lab, node: str) -> None:
    """Every file in the download cache is the matrix's file, checksum and all."""
    arts = lab.manifest(LAB)["artifacts"]
    expected = {a["file"]: a["sha256"] for k, a in arts.items() if "file" in a}
    listing = lab.run(LAB, node, f"cd {CACHE} && sha256sum -- *").splitlines()
    assert listing, f"{node}: nothing in {CACHE}"
    for line in listing:
        digest, name = line.split(maxsplit=1)
        assert expected.get(name) == digest, f"{node}: {CACHE}/{name} is not the matrix's file"


def test_ctrl_c_stops_the_cli_run_and_leaves_no_partial_download(lab, interrupted):
    assert interrupted["cli"].returncode == 130, interrupted["cli_out"][-3000:]
    assert "(limit ascend-01): canceled in " in interrupted["cli_out"], interrupted["cli_out"][-3000:]
    assert interrupted["cli_seconds"] < 60, "Ctrl-C did not stop the run promptly"
    assert interrupted["left"] == "", f"the interrupted run is still at work: {interrupted['left']}"
    # The toolkit was on its way when Ctrl-C came: the cache held no copy of it, whole or partial.
    toolkit = lab.manifest(LAB)["artifacts"]["cann_kernels"]["file"]
    assert toolkit not in interrupted["cache_after_cut"], interrupted["cache_after_cut"]


def test_reboot_mid_run_fails_only_that_run(lab, interrupted):
    assert interrupted["after"] != interrupted["before"]
    counts = recap(interrupted["play_out"])["ascend-02"]
    assert counts["unreachable"] + counts["failed"] >= 1, interrupted["play_out"][-3000:]


@pytest.mark.parametrize("node", ["ascend-01", "ascend-02"])
def test_the_rerun_converges_with_nothing_half_installed(lab, interrupted, node):
    rerun = interrupted["rerun"]
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert recap(rerun.stdout)[node]["failed"] == 0
    whole_artifacts(lab, node)
    assert lab.run(LAB, node, "systemctl is-active vllm-gpt-oss-120b.service").strip() == "active"


def test_dead_first_git_mirror_the_next_one_serves(lab, interrupted):
    """The lab's matrix lists a dead mirror (nothing listens on port 9) before the real one."""
    git = lab.manifest(LAB)["git"]["vllm"]
    assert interrupted["rerun"].returncode == 0
    assert "http://127.0.0.1:9/vllm-project/vllm.git" in interrupted["rerun"].stdout  # it was tried first
    for node in ("ascend-01", "ascend-02"):
        out = lab.run(LAB, node,
                      "cd /opt/vllm-fleet/current/src/vllm && git remote get-url origin && git rev-parse HEAD")
        assert out.split() == [git["url"], git["pinned"]], out
