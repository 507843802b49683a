"""The lab's own servers on this machine (the web root's, the registry's): started in a session of
their own with a pid file and a log under the lab's state, waited for until their port answers, and
stopped with SIGTERM. Hand-written: a few lines of subprocess, where a supervisor would be one more
service on the machine for two processes that live as long as a lab.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid(pidfile: Path) -> int | None:
    """The running process of `pidfile`, or None (a stale file is removed)."""
    try:
        number = int(pidfile.read_text())
        os.kill(number, 0)
        return number
    except FileNotFoundError:
        return None
    except (ValueError, ProcessLookupError):
        pidfile.unlink(missing_ok=True)
        return None


def start(argv: list[str], pidfile: Path, log: Path, port: int, what: str) -> None:
    """Start `argv` unless `pidfile`'s process runs, and wait up to 10 s for it to answer on `port`."""
    if pid(pidfile) is not None:
        return
    if port_open(port):
        raise RuntimeError(f"port {port} on 127.0.0.1 is taken by another program; choose another --port-base for "
                           "this lab")
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    pidfile.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start; see {log}")


def stop(pidfile: Path) -> None:
    """SIGTERM to `pidfile`'s process, waiting up to 5 s for it to end."""
    number = pid(pidfile)
    if number is None:
        return
    os.kill(number, signal.SIGTERM)
    for _ in range(50):
        try:  # reaped when this process started it (a lab's session), so it does not linger as a zombie
            if os.waitpid(number, os.WNOHANG)[0] == number:
                break
        except ChildProcessError:
            pass
        try:
            os.kill(number, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
