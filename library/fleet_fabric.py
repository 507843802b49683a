#!/usr/bin/python
# Copyright (c) vllm-fleet contributors
# Apache-2.0 (see pyproject.toml)
"""Ansible module: check a spanning model's network fabric from one of its members."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_fabric
short_description: Check, from one member of a model that spans nodes, the network its Ray cluster needs
description:
  - Runs on a member of a model that spans nodes (C(fleet_models[].span)), before its Ray
    member starts, the checks that vllm-ascend's multi-node guide and vLLM's distributed
    troubleshooting ask for by hand, and fails naming the member and everything it found wrong.
  - O(address) is an address of this node (it can be bound), which Ray and the collective
    libraries bind.
  - Every interface that O(interfaces) names exists and is up. The values are those of
    C(NCCL_SOCKET_IFNAME), C(HCCL_SOCKET_IFNAME), C(GLOO_SOCKET_IFNAME) and the like, in
    NCCL's syntax; a value excluding interfaces (C(^...)) names none to check.
  - Every O(reach) target answers a TCP connection from O(address) within O(timeout)
    seconds. A refused connection counts as reached (the host answered; nothing listens
    there yet, as before the Ray head starts); a timeout, or a host or network that cannot
    be reached, does not.
  - Every O(device_checks) command, run once per device of O(devices) with C({device}) in
    its arguments replaced, exits 0 with output matching its C(expect) pattern (on Ascend,
    C(hccn_tool -i N -link -g) and C(-net_health -g), as the vendor's contract lists them).
  - Never changes anything, so it runs the same in check mode.
  - Written for vllm-fleet because no module of ansible.builtin does this;
    M(ansible.builtin.wait_for) connects from whatever address the kernel picks and cannot
    tell a refused connection (reached) from one that was never answered.
version_added: "0.1.0"
author:
  - vllm-fleet contributors
options:
  member:
    description: The inventory name of the member the checks run on, for the messages.
    type: str
    required: true
  address:
    description: The member's cluster address (C(fleet_cluster_address)); V("") checks none.
    type: str
    default: ""
  interfaces:
    description:
      - Socket interface settings as C(NAME=VALUE), VALUE in NCCL's syntax (a comma-separated
        list of name prefixes; C(=) before the list for exact names; C(^) to exclude).
    type: list
    elements: str
    default: []
  reach:
    description:
      - TCP endpoints that must answer from O(address), each with C(name) (for the message),
        C(host) and C(port).
    type: list
    elements: dict
    default: []
  devices:
    description: The model's devices on this node, by index.
    type: list
    elements: int
    default: []
  device_checks:
    description:
      - Commands run once per device, each with C(argv) (C({device}) replaced by the index)
        and C(expect) (a regular expression searched in the output).
    type: list
    elements: dict
    default: []
  timeout:
    description: Seconds each connection and each command may take.
    type: float
    default: 3
"""

EXAMPLES = r"""
- name: The member reaches the Ray head and its NPU links are up
  fleet_fabric:
    member: ascend-02
    address: 10.0.0.12
    interfaces: ["HCCL_SOCKET_IFNAME=enp189s0f0", "GLOO_SOCKET_IFNAME=enp189s0f0"]
    reach: [{name: "Ray head ascend-01", host: 10.0.0.11, port: 6379}]
    devices: [0, 1, 2, 3, 4, 5, 6, 7]
    device_checks:
      - {argv: [hccn_tool, -i, "{device}", -link, -g], expect: "link status: UP"}
"""

RETURN = r"""
problems:
  description: What was found wrong, one sentence each (empty when every check passed).
  returned: always
  type: list
  elements: str
checked:
  description: How many checks ran, by kind (address, interfaces, reach, device).
  returned: always
  type: dict
"""

import os  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

SYS_NET = "/sys/class/net"
IFF_UP = 0x1


def parse_ifname(value):
    """NCCL's *_SOCKET_IFNAME syntax: (exact, names); names empty when the value excludes."""
    value = value.strip()
    if not value or value.startswith("^"):
        return False, []
    exact = value.startswith("=")
    if exact:
        value = value[1:]
    return exact, [name.strip() for name in value.split(",") if name.strip()]


def interface_problems(settings, sys_net=SYS_NET):
    """Each NAME=VALUE whose interfaces are missing or down, as sentences."""
    try:
        present = sorted(os.listdir(sys_net))
    except OSError as exc:
        return [f"cannot list the network interfaces ({sys_net}: {exc.strerror})"]
    problems = []
    for setting in settings:
        variable, _, value = setting.partition("=")
        exact, names = parse_ifname(value)
        for name in names:
            matching = [i for i in present if (i == name if exact else i.startswith(name))]
            if not matching:
                problems.append(f"{variable} names interface {name}, which this node does not have "
                                f"(it has {', '.join(present) or 'none'})")
                continue
            up = [i for i in matching if _is_up(os.path.join(sys_net, i))]
            if not up:
                problems.append(f"{variable} names interface {name}, which is down ({', '.join(matching)})")
    return problems


def _is_up(path):
    try:
        with open(os.path.join(path, "flags"), encoding="ascii") as handle:
            return bool(int(handle.read().strip(), 16) & IFF_UP)
    except (OSError, ValueError):
        return False


def address_problem(address):
    """None when `address` is this node's (it can be bound), else a sentence."""
    if not address:
        return None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            return f"its cluster address {address} is not an address of this node ({exc.strerror})"
    return None


def reach_problem(target, source, timeout):
    """None when target's host answers a TCP connection from `source`, else a sentence."""
    host, port = str(target["host"]), int(target["port"])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            if source:
                sock.bind((source, 0))
            sock.connect((host, port))
        except ConnectionRefusedError:
            return None  # the host answered: nothing listens there yet
        except TimeoutError:
            return _unreached(target, source, f"no answer within {timeout:g} s")
        except OSError as exc:  # no route to the host or its network, a firewall's reject, ...
            return _unreached(target, source, exc.strerror or str(exc))
    return None


def _unreached(target, source, why):
    return (f"cannot reach {target.get('name') or 'its peer'} at {target['host']}:{target['port']}"
            f"{' from ' + source if source else ''} ({why})")


def device_problems(checks, devices, timeout, env=None):
    """Each (check, device) whose command fails or prints something else, as sentences."""
    problems = []
    for check in checks:
        pattern = re.compile(check["expect"])
        for device in devices:
            argv = [str(arg).replace("{device}", str(device)) for arg in check["argv"]]
            shown = " ".join(argv)
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
            except FileNotFoundError:
                problems.append(f"{argv[0]} is not installed, so `{shown}` cannot run")
                break
            except subprocess.TimeoutExpired:
                problems.append(f"`{shown}` did not finish within {timeout:g} s")
                continue
            output = (proc.stdout + proc.stderr).strip()
            if proc.returncode != 0 or not pattern.search(proc.stdout):
                last = output.splitlines()[-1] if output else "no output"
                problems.append(f"device {device}: `{shown}` printed {last!r}"
                                f"{'' if proc.returncode == 0 else f' (exit {proc.returncode})'}, expected {check['expect']!r}")
    return problems


def check(params, env=None):
    """Every check of the spec; (problems, checked)."""
    timeout = float(params["timeout"])
    problems = []
    bad_address = address_problem(params["address"])
    if bad_address:
        problems.append(bad_address)
    problems += interface_problems(params["interfaces"])
    if not bad_address:
        for target in params["reach"]:
            problem = reach_problem(target, params["address"], timeout)
            if problem:
                problems.append(problem)
    problems += device_problems(params["device_checks"], params["devices"], timeout, env)
    checked = {"address": int(bool(params["address"])), "interfaces": len(params["interfaces"]),
               "reach": len(params["reach"]), "device": len(params["device_checks"]) * len(params["devices"])}
    return problems, checked


def main():
    module = AnsibleModule(
        argument_spec={
            "member": {"type": "str", "required": True},
            "address": {"type": "str", "default": ""},
            "interfaces": {"type": "list", "elements": "str", "default": []},
            "reach": {"type": "list", "elements": "dict", "default": []},
            "devices": {"type": "list", "elements": "int", "default": []},
            "device_checks": {"type": "list", "elements": "dict", "default": []},
            "timeout": {"type": "float", "default": 3},
        },
        supports_check_mode=True,
    )
    for target in module.params["reach"]:
        if not {"host", "port"} <= set(target):
            module.fail_json(msg=f"every reach entry needs host and port: {target}")
    for entry in module.params["device_checks"]:
        if not {"argv", "expect"} <= set(entry):
            module.fail_json(msg=f"every device check needs argv and expect: {entry}")
    env = {**os.environ, "LC_ALL": "C"}
    problems, checked = check(module.params, env)
    result = {"changed": False, "problems": problems, "checked": checked}
    if problems:
        module.fail_json(msg=f"{module.params['member']}: " + "; ".join(problems) + ".", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
