"""The lab's own servers (vllm_fleet_lab.daemons: the web root's, the registry's): started once, waited
for on their port, refused on a taken port, named with their log when they die at start, stopped."""

from __future__ import annotations

import socket
import sys

import pytest

from vllm_fleet_lab import daemons


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_starts_once_answers_and_stops(tmp_path):
    port, pidfile = free_port(), tmp_path / "server.pid"
    server = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    daemons.start(server, pidfile, tmp_path / "server.log", port, "the test's server")
    first = daemons.pid(pidfile)
    assert first and daemons.port_open(port)
    daemons.start(server, pidfile, tmp_path / "server.log", port, "the test's server")  # running: left as it is
    assert daemons.pid(pidfile) == first
    # Another program on the port of a server that is not running is named, not waited for.
    with pytest.raises(RuntimeError, match=f"port {port} on 127.0.0.1 is taken"):
        daemons.start(server, tmp_path / "other.pid", tmp_path / "other.log", port, "another")
    daemons.stop(pidfile)
    assert daemons.pid(pidfile) is None and not pidfile.exists() and not daemons.port_open(port)


def test_a_server_that_dies_at_start_is_named_with_its_log_and_a_stale_pid_file_is_dropped(tmp_path):
    port = free_port()
    with pytest.raises(RuntimeError, match=f"the registry did not start; see {tmp_path / 'registry.log'}"):
        daemons.start([sys.executable, "-c", "print('no config'); raise SystemExit(3)"], tmp_path / "registry.pid",
                      tmp_path / "registry.log", port, "the registry")
    assert "no config" in (tmp_path / "registry.log").read_text()
    assert daemons.pid(tmp_path / "registry.pid") is None and not (tmp_path / "registry.pid").exists()
