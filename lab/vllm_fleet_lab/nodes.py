"""Lab nodes: systemd-nspawn containers with systemd as PID 1 and sshd on 127.0.0.1.

A node is a directory under the lab's state dir:

    nodes/<name>/upper, work   overlay layers over the cached rootfs
    nodes/<name>/root          the mounted overlay the container boots from
    nodes/<name>/pci           fake PCI tree, bind-mounted read-only over /sys/bus/pci/devices
    nodes/<name>/node.json     what the lab knows about the node (vendor, ports)
    nodes/<name>/run.sh        supervisor: boots the container and boots it again after a reboot
    nodes/<name>/console.log   the container's console
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from vllm_fleet_lab import hardware
from vllm_fleet_lab.paths import LabPaths

#: The kind (Node.vendor) of a lab node that is no fleet node but a router (roles/services/router).
ROUTER = "router"
#: The kind of a lab node that runs Prometheus for the others (roles/services/monitoring).
MONITORING = "monitoring"
#: The kind of a lab node that serves the fleet's own mirror (roles/services/mirror): the lab as an air-gapped site.
MIRROR = "mirror"
#: podman's settings on a node in container mode, the node's own (a site's host configuration, written by
#: `lab up`, not by a role): vfs storage (a node has no /dev/fuse for overlay), no session keyring (nspawn's
#: seccomp refuses crun's), no cgroups of its own (a node sees cgroup v1 without the pids controller).
CONTAINERS_CONF = {
    "etc/containers/storage.conf": '[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\n'
                                   'graphroot = "/var/lib/containers/storage"\n',
    "etc/containers/containers.conf": '[containers]\nkeyring = false\ncgroups = "disabled"\n',
}
#: Kinds of lab nodes without accelerators (no fleet nodes).
SERVICE_KINDS = (ROUTER, MONITORING, MIRROR)
# systemd-nspawn exits with this status when the container asked for a reboot.
NSPAWN_REBOOT_STATUS = 133


@dataclass
class Node:
    name: str
    vendor: str
    index: int
    ssh_port: int
    machine: str
    # Container mode (`lab up` with container_nodes): the node runs its engine in upstream's image with
    # podman, set by its host_vars; the node has podman's settings of the lab (CONTAINERS_CONF).
    container: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def node_dir(paths: LabPaths, name: str) -> Path:
    return paths.nodes_dir / name


def load_nodes(paths: LabPaths) -> list[Node]:
    nodes = []
    for meta in sorted(paths.nodes_dir.glob("*/node.json")):
        nodes.append(Node(**json.loads(meta.read_text())))
    return sorted(nodes, key=lambda n: n.index)


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as fh:
        return any(line.split()[4] == target for line in fh)


def create_node(paths: LabPaths, node: Node, rootfs: Path) -> None:
    """Lay out the node's overlay and configure it (idempotent)."""
    d = node_dir(paths, node.name)
    for sub in ("upper", "work", "root"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    if not is_mounted(d / "root"):
        opts = f"lowerdir={rootfs},upperdir={d / 'upper'},workdir={d / 'work'}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(d / "root")], check=True)
    root = d / "root"
    (root / "etc/hostname").write_text(node.name + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{node.name}\n"
                                    "::1\tlocalhost ip6-localhost ip6-loopback\n")
    _configure_ssh(paths, node, root)
    if node.vendor in SERVICE_KINDS:
        hardware.install_none(d / "pci")
    else:
        hardware.install(node.vendor, node.index, root, d / "pci")
    if node.container:
        for rel, text in CONTAINERS_CONF.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("# Written by vllm-fleet lab: podman on a systemd-nspawn node.\n" + text)
    (d / "node.json").write_text(node.to_json())
    _write_supervisor(paths, node, d)


def _configure_ssh(paths: LabPaths, node: Node, root: Path) -> None:
    conf = root / "etc/ssh/sshd_config.d/50-vllm-fleet-lab.conf"
    conf.write_text(
        "# Written by vllm-fleet lab: every node shares the host's loopback, so each\n"
        "# listens on its own port.\n"
        f"Port {node.ssh_port}\n"
        "ListenAddress 127.0.0.1\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "UseDNS no\n"
    )
    if not list((root / "etc/ssh").glob("ssh_host_*_key")):
        # -A with -f writes every host key type under <root>/etc/ssh.
        subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(paths.ssh_key.with_suffix(".pub").read_text())
    auth.chmod(0o600)


def _write_supervisor(paths: LabPaths, node: Node, d: Path) -> None:
    nspawn = [
        "systemd-nspawn", "--quiet", "-D", str(d / "root"), "-M", node.machine,
        "--boot", "--register=no", "--keep-unit", "--console=read-only",
        f"--bind-ro={d / 'pci'}:/sys/bus/pci/devices",
    ]
    script = f"""#!/bin/bash
# Supervisor of lab node {node.name}: a reboot inside the container ends
# systemd-nspawn with status {NSPAWN_REBOOT_STATUS}; boot it again, as the machine would.
cd {shlex.quote(str(d))}
rm -f stop
while :; do
  {' '.join(shlex.quote(a) for a in nspawn)} </dev/null >>console.log 2>&1
  rc=$?
  echo "[vllm-fleet lab] container exited with status $rc" >>console.log
  [[ -e stop || $rc -ne {NSPAWN_REBOOT_STATUS} ]] && break
done
rm -f supervisor.pid
"""
    run = d / "run.sh"
    run.write_text(script)
    run.chmod(0o755)


def _supervisor_pid(d: Path) -> int | None:
    pidfile = d / "supervisor.pid"
    if not pidfile.exists():
        return None
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        pidfile.unlink(missing_ok=True)
        return None
    return pid


def is_running(paths: LabPaths, node: Node) -> bool:
    return _supervisor_pid(node_dir(paths, node.name)) is not None


#: Kernel limits every container's systemd (PID 1, journald, logind, ...) draws on: inotify
#: instances and watches are counted per user, and every container's processes are the
#: host's root. The kernel's default of 128 instances runs out at about 15 booted nodes
#: (several labs side by side: the test suite's), and systemd then fails to start with
#: "Too many open files". Raised, never lowered, when a node boots.
INOTIFY_LIMITS = {"/proc/sys/fs/inotify/max_user_instances": 8192,
                  "/proc/sys/fs/inotify/max_user_watches": 1048576}


def raise_inotify_limits(limits: dict[str, int] | None = None) -> None:
    for path, wanted in (limits or INOTIFY_LIMITS).items():
        try:
            if int(Path(path).read_text()) < wanted:
                Path(path).write_text(f"{wanted}\n")
        except (OSError, ValueError):
            pass  # not ours to change (a container, a read-only /proc/sys): boot as far as it goes


def start_node(paths: LabPaths, node: Node) -> None:
    d = node_dir(paths, node.name)
    if _supervisor_pid(d) is not None:
        return
    raise_inotify_limits()
    proc = subprocess.Popen([str(d / "run.sh")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    (d / "supervisor.pid").write_text(f"{proc.pid}\n")


def stop_node(paths: LabPaths, node: Node, timeout: float = 30) -> None:
    """Shut the container down cleanly (SIGTERM makes nspawn halt the container's systemd)."""
    d = node_dir(paths, node.name)
    pid = _supervisor_pid(d)
    if pid is None:
        return
    (d / "stop").touch()
    for child in _children(pid):
        _signal(child, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        for child in _children(pid):
            _signal(child, signal.SIGKILL)
        _signal(pid, signal.SIGKILL)
    (d / "supervisor.pid").unlink(missing_ok=True)


def destroy_node(paths: LabPaths, node_path: Path) -> None:
    """Remove every trace of a node: stop it, unmount its overlay, delete its directory."""
    meta = node_path / "node.json"
    if meta.exists():
        stop_node(paths, Node(**json.loads(meta.read_text())))
    root = node_path / "root"
    if root.exists() and is_mounted(root):
        subprocess.run(["umount", str(root)], check=False)
        if is_mounted(root):
            subprocess.run(["umount", "-l", str(root)], check=True)
    shutil.rmtree(node_path, ignore_errors=True)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie left by our own Popen still "exists"; reap it.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_ready(paths: LabPaths, node: Node, timeout: float = 120) -> str:
    """Wait until sshd answers and systemd finished booting; return its state."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            state = run_on(paths, node, "systemctl is-system-running --wait", timeout=60).strip()
            if state in ("running", "degraded"):
                return state
            last_error = RuntimeError(f"systemd state {state!r}")
        except OSError as exc:  # SSHError, TimeoutError
            last_error = exc
        time.sleep(0.5)
    console = node_dir(paths, node.name) / "console.log"
    tail = "\n".join(console.read_text(errors="replace").splitlines()[-15:]) if console.exists() else ""
    raise RuntimeError(f"node {node.name} did not come up on 127.0.0.1:{node.ssh_port}: {last_error}\n{tail}")


#: What ssh says when the node ends a session that was already running a command.
SESSION_CLOSED = re.compile(r"^Connection to \S+ closed by remote host", re.MULTILINE)


class SSHError(ConnectionError):
    """ssh could not run the command on the node: refused, unknown host key, login rejected."""


def ssh_options(paths: LabPaths) -> list[str]:
    """OpenSSH options for reaching the lab's nodes, shared by Ansible (the inventory's
    ansible_ssh_common_args) and run_on: trust only the host keys `up` wrote, offer only
    the lab's key, and skip compression on loopback."""
    return ["-o", f"UserKnownHostsFile={paths.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "IdentitiesOnly=yes", "-o", "Compression=no"]


def host_keys(paths: LabPaths, node: Node) -> list[str]:
    """The node's public host keys (`ssh-keygen -A` made one per type) as "type base64"."""
    keys = []
    for pub in sorted((node_dir(paths, node.name) / "root/etc/ssh").glob("ssh_host_*_key.pub")):
        keytype, blob = pub.read_text().split()[:2]
        keys.append(f"{keytype} {blob}")
    if not keys:
        raise RuntimeError(f"node {node.name} has no SSH host key under {node_dir(paths, node.name) / 'root/etc/ssh'}")
    return keys


def known_hosts_lines(port: int, keys: list[str]) -> list[str]:
    """known_hosts entries of a node on 127.0.0.1: OpenSSH names a host on a port other than
    22 as [host]:port."""
    return [f"[127.0.0.1]:{port} {key}" for key in keys]


def write_known_hosts(paths: LabPaths, nodes: list[Node]) -> None:
    """Write the lab's known_hosts from the nodes' host keys, replacing the previous one:
    a node created again has new keys."""
    lines = [line for node in nodes for line in known_hosts_lines(node.ssh_port, host_keys(paths, node))]
    target = paths.known_hosts
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(f"# Host keys of lab {paths.name}'s nodes, written by `vllm-fleet lab up`.\n"
                   + "\n".join(lines) + "\n")
    tmp.replace(target)


def run_on(paths: LabPaths, node: Node, command: str, timeout: float = 30) -> str:
    """Run a command on a node with the OpenSSH client (like Ansible) and return its stdout.

    The command's exit status is not checked: callers read what it printed. Raises SSHError
    when ssh fails (status 255) before the command ran, TimeoutError after `timeout` seconds.
    """
    argv = ["ssh", *ssh_options(paths), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            # Never share (or leave behind) a master connection: nodes reboot under tests.
            "-o", "ControlPath=none",
            "-i", str(paths.ssh_key), "-p", str(node.ssh_port), "-l", "root", "--", "127.0.0.1", command]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"{node.name}: {command!r} still running after {timeout}s") from exc
    # 255 is ssh's own failure (or a command that exits 255). A command that takes the node
    # down (`systemctl reboot`) may lose its session: that is not a failure to run it.
    if proc.returncode == 255 and not SESSION_CLOSED.search(proc.stderr):
        raise SSHError(f"ssh to {node.name} (127.0.0.1:{node.ssh_port}) failed: {proc.stderr.strip()}")
    return proc.stdout
