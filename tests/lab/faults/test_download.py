"""Faults of the artifact server, through the download role on a real node: a download cut
in the middle is fetched again and ends whole and checked; a server that serves a wrong
file stops that host with nothing at the final path, and its neighbour is untouched."""

from __future__ import annotations

from ..conftest import recap
from .conftest import LAB, artifact_path, run_playbook

CACHE = "/var/cache/vllm-fleet/downloads"


def test_download_cut_in_the_middle_ends_whole_and_checked(lab, faults):
    art = lab.manifest(LAB)["artifacts"]["cann_toolkit"]
    path = artifact_path(lab, "cann_toolkit")
    faults({path: {"mode": "cut", "after": 4096, "times": 1}})
    proc = run_playbook("-l", "ascend-01", "-e", "fault_artifact=cann_toolkit", playbook="download.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap(proc.stdout)["ascend-01"]["failed"] == 0
    # The cut struck (once), and the role went back for the file.
    assert lab.faults(LAB)[path]["hits"] == 1
    assert "FAILED - RETRYING" in proc.stdout
    assert lab.run(LAB, "ascend-01", f"sha256sum {CACHE}/{art['file']}").split()[0] == art["sha256"]
    # Nothing else was left in the cache (no partial copy next to the whole one).
    assert lab.run(LAB, "ascend-01", f"ls -A {CACHE}").split() == [art["file"]]


def test_server_serving_a_wrong_file_stops_that_host_with_nothing_at_the_final_path(lab, faults):
    art = lab.manifest(LAB)["artifacts"]["npu_firmware"]
    path = artifact_path(lab, "npu_firmware")
    faults({path: {"mode": "wrong"}})
    proc = run_playbook("-l", "ascend-02", "-e", "fault_artifact=npu_firmware", playbook="download.yml")
    assert recap(proc.stdout)["ascend-02"]["failed"] == 1, proc.stdout[-3000:]
    assert f"ascend-02: could not fetch {art['file']} (version {art['version']})" in proc.stdout
    assert "sha256 mismatch, expected " + art["sha256"] in proc.stdout
    assert lab.faults(LAB)[path]["hits"] == 1  # a checksum mismatch is not retried: the mirror lies
    left = lab.run(LAB, "ascend-02",
                   f"ls -A {CACHE} 2>&1; find / -xdev -name '{art['file']}*' -o -name 'tmp*{art['file']}*'")
    assert art["file"] not in left, left
    # The same file from an honest server: the host goes on.
    faults({})
    again = run_playbook("-l", "ascend-02", "-e", "fault_artifact=npu_firmware", playbook="download.yml")
    assert recap(again.stdout)["ascend-02"]["failed"] == 0, again.stdout[-3000:]
    assert lab.run(LAB, "ascend-02", f"sha256sum {CACHE}/{art['file']}").split()[0] == art["sha256"]
