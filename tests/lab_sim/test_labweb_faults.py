"""The lab web server's injected faults (lab/fixtures/services/labweb.py), which the fault
battery (tests/lab/faults) relies on: each must do exactly what it says, and only for its path."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

LABWEB = Path(__file__).resolve().parents[2] / "lab" / "fixtures" / "services" / "labweb.py"
DATA = bytes(range(256)) * 64  # 16 KiB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "www"
    (root / "a").mkdir(parents=True)
    (root / "a" / "file.bin").write_bytes(DATA)
    (root / "a" / "other.bin").write_bytes(DATA)
    faults = tmp_path / "faults.json"
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(LABWEB), "--root", str(root), "--port", str(port),
                             "--faults", str(faults)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield port, faults
    proc.terminate()
    proc.wait(timeout=10)


def get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    return conn.getresponse().read()


def test_cut_drops_the_connection_once_then_serves_whole(server):
    port, faults = server
    faults.write_text(json.dumps({"/a/file.bin": {"mode": "cut", "after": 1000, "times": 1}}))
    with pytest.raises(http.client.IncompleteRead) as cut:
        get(port, "/a/file.bin")
    assert len(cut.value.partial) == 1000
    assert get(port, "/a/file.bin") == DATA
    assert json.loads(faults.read_text())["/a/file.bin"] == {"mode": "cut", "after": 1000, "times": 0, "hits": 1}


def test_wrong_serves_other_bytes_of_the_same_length_for_that_path_only(server):
    port, faults = server
    faults.write_text(json.dumps({"/a/file.bin": {"mode": "wrong"}}))
    served = get(port, "/a/file.bin")
    assert len(served) == len(DATA)
    assert hashlib.sha256(served).digest() != hashlib.sha256(DATA).digest()
    assert get(port, "/a/other.bin") == DATA
    assert get(port, "/a/file.bin") != DATA  # no `times`: every request
    assert json.loads(faults.read_text())["/a/file.bin"]["hits"] == 2


def test_slow_serves_whole_but_takes_its_time(server):
    port, faults = server
    faults.write_text(json.dumps({"/a/file.bin": {"mode": "slow", "seconds": 1}}))
    start = time.monotonic()
    assert get(port, "/a/file.bin") == DATA
    assert time.monotonic() - start >= 0.9


def test_slow_ends_at_once_whole_when_the_fault_is_lifted(server):
    """The fault battery holds a download open (seconds: 900) until both nodes are struck, then
    lifts the fault: the transfer under way finishes whole at once, and never pauses long enough
    for a client's read timeout (10 s here) meanwhile."""
    port, faults = server
    faults.write_text(json.dumps({"/a/file.bin": {"mode": "slow", "seconds": 900}}))
    result = {}
    reader = threading.Thread(target=lambda: result.update(data=get(port, "/a/file.bin")))
    start = time.monotonic()
    reader.start()
    time.sleep(12)
    assert reader.is_alive(), "the slow download ended before its fault was lifted"
    faults.write_text(json.dumps({}))
    reader.join(timeout=15)
    assert not reader.is_alive(), "the download went on after the fault was lifted"
    assert result["data"] == DATA
    assert time.monotonic() - start < 30


def test_no_faults_file_serves_normally(server):
    port, _faults = server
    assert get(port, "/a/file.bin") == DATA
