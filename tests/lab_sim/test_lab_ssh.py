"""How the controller reaches nodes: OpenSSH everywhere, host keys checked.

The lab's known_hosts (written by `lab up` from each node's host keys), the options the
lab inventory and `run_on` pass to ssh, and the connection settings of ansible.cfg and
the example inventory. No lab needed: nodes are directories with real `ssh-keygen -A` keys.
"""

from __future__ import annotations

import configparser
import importlib
import os
import shlex
import subprocess
import sys

import jinja2
import pytest
import yaml

from tests.conftest import EXAMPLE, ROOT
from vllm_fleet_lab import inventory, nodes
from vllm_fleet_lab.nodes import Node


@pytest.fixture()
def paths(tmp_path, monkeypatch):
    """A lab named `unit` whose state lives under tmp_path."""
    monkeypatch.setenv("VLLM_FLEET_LAB_DIR", str(tmp_path / "state"))
    import vllm_fleet_lab.paths as module

    module = importlib.reload(module)
    yield module.LabPaths("unit", 30000)
    monkeypatch.delenv("VLLM_FLEET_LAB_DIR")
    importlib.reload(module)


def make_node(paths, name: str, index: int) -> Node:
    """A node directory with host keys made as nodes._configure_ssh makes them."""
    node = Node(name=name, vendor=name.split("-")[0], index=index, ssh_port=paths.ssh_port(index),
                machine=f"vf-unit-{name}")
    root = nodes.node_dir(paths, name) / "root"
    (root / "etc/ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, capture_output=True)
    return node


def pub_keys(paths, node: Node) -> dict[str, str]:
    """{key type: base64} of the node's host keys, read straight from the .pub files."""
    found = {}
    for pub in (nodes.node_dir(paths, node.name) / "root/etc/ssh").glob("ssh_host_*_key.pub"):
        keytype, blob = pub.read_text().split()[:2]
        found[keytype] = blob
    return found


def ssh_keygen_find(known_hosts, host: str) -> str:
    """What OpenSSH itself finds for `host` in a known_hosts file."""
    proc = subprocess.run(["ssh-keygen", "-F", host, "-f", str(known_hosts)], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


# ------------------------------------------------------------------ known_hosts

def test_known_hosts_lists_every_host_key_of_every_node_at_its_port(paths):
    lab_nodes = [make_node(paths, "ascend-01", 0), make_node(paths, "nvidia-01", 1)]
    nodes.write_known_hosts(paths, lab_nodes)

    assert paths.known_hosts == paths.root / "ssh" / "known_hosts"
    entries = [line.split() for line in paths.known_hosts.read_text().splitlines() if not line.startswith("#")]
    for node in lab_nodes:
        keys = pub_keys(paths, node)
        assert {"ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"} <= set(keys)
        mine = sorted((keytype, blob) for host, keytype, blob in entries if host == f"[127.0.0.1]:{node.ssh_port}")
        assert mine == sorted(keys.items())
    assert len(entries) == sum(len(pub_keys(paths, n)) for n in lab_nodes)
    # OpenSSH reads the file the same way: each node under [127.0.0.1]:port, nothing for port 22.
    assert "ssh-ed25519 " + pub_keys(paths, lab_nodes[1])["ssh-ed25519"] in ssh_keygen_find(
        paths.known_hosts, f"[127.0.0.1]:{lab_nodes[1].ssh_port}")
    assert ssh_keygen_find(paths.known_hosts, "127.0.0.1") == ""


def test_known_hosts_is_rewritten_when_a_node_gets_new_keys(paths):
    node = make_node(paths, "nvidia-01", 0)
    other = make_node(paths, "nvidia-02", 1)
    nodes.write_known_hosts(paths, [node, other])
    old = pub_keys(paths, node)["ssh-ed25519"]

    # The node is created again (`lab down` + `lab up`): new host keys.
    for key in (nodes.node_dir(paths, node.name) / "root/etc/ssh").glob("ssh_host_*"):
        key.unlink()
    subprocess.run(["ssh-keygen", "-A", "-f", str(nodes.node_dir(paths, node.name) / "root")], check=True,
                   capture_output=True)
    new = pub_keys(paths, node)["ssh-ed25519"]
    assert new != old
    nodes.write_known_hosts(paths, [node])

    text = paths.known_hosts.read_text()
    assert new in text and old not in text
    assert f"[127.0.0.1]:{other.ssh_port}" not in text  # a node no longer in the lab is forgotten
    assert not list(paths.known_hosts.parent.glob("*.tmp"))


def test_a_node_without_host_keys_is_an_error_not_an_empty_entry(paths):
    node = Node(name="musa-01", vendor="musa", index=0, ssh_port=30001, machine="vf-unit-musa-01")
    (nodes.node_dir(paths, node.name) / "root/etc/ssh").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="musa-01 has no SSH host key"):
        nodes.write_known_hosts(paths, [node])


def test_known_hosts_lines_use_the_bracketed_port_form():
    assert nodes.known_hosts_lines(22101, ["ssh-ed25519 AAAAC3", "ssh-rsa AAAAB3"]) == [
        "[127.0.0.1]:22101 ssh-ed25519 AAAAC3", "[127.0.0.1]:22101 ssh-rsa AAAAB3"]


# ------------------------------------------------------------------ what ssh is told

def render_connection(paths) -> dict:
    node = Node(name="nvidia-01", vendor="nvidia", index=0, ssh_port=paths.ssh_port(0), machine="vf-unit-nvidia-01")
    ctx = inventory.render_context(paths, [node], manifest={})
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "lab" / "inventory")),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return yaml.safe_load(env.get_template("group_vars/all/connection.yml.j2").render(**ctx))


def test_the_lab_inventory_uses_openssh_with_the_labs_known_hosts(paths):
    conn = render_connection(paths)
    assert conn["ansible_connection"] == "ssh"
    assert conn["ansible_ssh_private_key_file"] == str(paths.ssh_key)
    assert conn["ansible_ssh_host_key_checking"] is True
    args = shlex.split(conn["ansible_ssh_common_args"])
    assert args == nodes.ssh_options(paths)  # the same options as run_on
    options = dict(a.split("=", 1) for a in args if a != "-o")
    assert options == {"UserKnownHostsFile": str(paths.known_hosts), "StrictHostKeyChecking": "yes",
                       "IdentitiesOnly": "yes", "Compression": "no"}


def fake_ssh(tmp_path, monkeypatch, script: str):
    """Put an `ssh` on PATH that records its arguments and then runs `script`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(f"#!/bin/bash\nprintf '%s\\n' \"$@\" > {tmp_path / 'argv'}\n{script}\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "argv"


NODE = Node(name="ascend-01", vendor="ascend", index=0, ssh_port=30001, machine="vf-unit-ascend-01")


def test_run_on_calls_ssh_strictly_and_returns_stdout_whatever_the_status(paths, tmp_path, monkeypatch):
    argv = fake_ssh(tmp_path, monkeypatch, "echo out; echo err >&2; exit 3")
    assert nodes.run_on(paths, NODE, "ls -d /nope; true") == "out\n"
    args = argv.read_text().splitlines()
    assert args[-3:] == ["--", "127.0.0.1", "ls -d /nope; true"]
    joined = " ".join(args)
    for option in (f"UserKnownHostsFile={paths.known_hosts}", "StrictHostKeyChecking=yes", "BatchMode=yes",
                   "IdentitiesOnly=yes", "ControlPath=none"):
        assert f"-o {option}" in joined
    assert f"-i {paths.ssh_key}" in joined and "-p 30001" in joined and "-l root" in joined
    assert "StrictHostKeyChecking=no" not in joined


def test_run_on_raises_when_ssh_cannot_run_the_command(paths, tmp_path, monkeypatch):
    fake_ssh(tmp_path, monkeypatch, "echo 'Host key verification failed.' >&2; exit 255")
    with pytest.raises(nodes.SSHError, match="Host key verification failed") as err:
        nodes.run_on(paths, NODE, "true")
    assert isinstance(err.value, OSError)  # wait_ready retries on OSError


def test_run_on_accepts_a_session_the_node_closed_while_going_down(paths, tmp_path, monkeypatch):
    fake_ssh(tmp_path, monkeypatch, "echo bye; echo 'Connection to 127.0.0.1 closed by remote host.' >&2; exit 255")
    assert nodes.run_on(paths, NODE, "systemctl reboot") == "bye\n"


def test_run_on_times_out_with_an_oserror(paths, tmp_path, monkeypatch):
    fake_ssh(tmp_path, monkeypatch, "exec sleep 30")
    with pytest.raises(TimeoutError, match="still running after 0.5s"):
        nodes.run_on(paths, NODE, "sleep 30", timeout=0.5)


def test_run_on_against_a_closed_port_fails_with_the_real_ssh(paths, tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = Node(name="ascend-01", vendor="ascend", index=0, ssh_port=port, machine="vf-unit-ascend-01")
    with pytest.raises(nodes.SSHError, match="Connection refused"):
        nodes.run_on(paths, node, "true")


# ------------------------------------------------------------------ ansible.cfg and the example

def ansible_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    return cfg


def test_ansible_cfg_keeps_masters_and_pipelines_without_trusting_unknown_hosts():
    cfg = ansible_cfg()
    assert not cfg.has_section("paramiko_connection")
    ssh = cfg["ssh_connection"]
    assert ssh.getboolean("pipelining")
    args = shlex.split(ssh["ssh_args"])
    assert "ControlMaster=auto" in args and any(a.startswith("ControlPersist=") for a in args)
    # -C would override the lab's Compression=no (ssh's -C wins over -o Compression=no).
    assert "-C" not in args
    assert ssh["control_path"] == "%(directory)s/%%C"
    socket_path = os.path.expanduser(ssh["control_path_dir"]) + "/" + "0" * 40 + ".XXXXXXXXXXXXXXXX"
    assert len(socket_path) < 104  # sun_path, with room for ssh's temporary suffix
    for section in ("defaults", "ssh_connection"):
        assert cfg.get(section, "host_key_checking", fallback="True").lower() not in ("false", "no", "0")


@pytest.mark.ansible
def test_ansible_reads_the_control_path_unexpanded():
    """ansible.cfg is read without interpolation; the ssh plugin fills in %(directory)s."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    ansible_config = os.path.join(os.path.dirname(sys.executable), "ansible-config")
    out = subprocess.run([ansible_config, "dump", "--only-changed", "-t", "connection"],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    assert "control_path(" in out and "= %(directory)s/%%C" in out
    assert "pipelining(" in out and "ControlPersist=" in out


def test_the_example_inventory_uses_openssh_and_checks_host_keys():
    conn = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "connection.yml").read_text())
    assert conn["ansible_connection"] == "ssh"
    for path in [ROOT / "ansible.cfg", *EXAMPLE.rglob("*.yml"), *(ROOT / "lab" / "inventory").rglob("*.j2")]:
        text = path.read_text()
        assert "StrictHostKeyChecking=no" not in text, path
        assert "paramiko" not in text, path
