"""Accounts: the service user the models run as.

vllm-fleet creates fleet_service_user as a nologin system account and gives it the fleet's
directories. It must therefore be an account nobody else uses: not root, not an account of
the system or of a daemon, and not the account Ansible connects as (ansible_user,
ansible_ssh_user, remote_user) nor another login account the inventory names: turning that
one into a nologin account would lock Ansible and the admin out.
"""

from __future__ import annotations

import re

from vllm_fleet.validation.classes import class_of
from vllm_fleet.validation.problem import Problem

#: Accounts of the system (Debian's base-passwd and common daemons): never the service user.
SYSTEM_ACCOUNTS = frozenset([
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "_apt", "sshd", "messagebus", "systemd-network", "systemd-resolve",
    "systemd-timesync", "systemd-coredump", "polkitd", "syslog", "uuidd", "tcpdump", "dnsmasq", "avahi", "postfix",
    "ntp", "chrony", "_chrony", "statd", "tss", "usbmux", "rtkit", "colord", "pulse", "lightdm", "gdm", "dbus",
    "adm", "operator", "halt", "shutdown", "ftp", "docker", "HwHiAiUser", "prometheus", "haproxy", "admin",
    "debian", "ubuntu", "ec2-user", "centos", "cloud-user", "vagrant", "ansible"])
#: The variables that name the account Ansible connects as.
CONNECTION_USERS = ("ansible_user", "ansible_ssh_user", "remote_user")
ACCEPTED = "a user name only vllm-fleet uses, e.g. 'vllm' (it is created as a nologin system account)"
#: A POSIX account name (the vendors' own accounts, such as Ascend's HwHiAiUser, have capitals).
ACCOUNT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,31}\Z")
#: Groups whose members are root in all but name: never given to a service account.
PRIVILEGED_GROUPS = frozenset(["root", "sudo", "wheel", "admin", "adm", "docker", "lxd", "disk", "shadow", "kmem",
                               "systemd-journal", "libvirt"])
#: Variables naming accounts and groups that no role declares, by their name (a role option's
#: declared class says: account, accounts).
_ACCOUNT_VARIABLE = re.compile(r"_(user|group|groups)$")


def _account_name_problems(host_vars: dict) -> list[str]:
    """Every account and group a role variable names: a POSIX name, not root, and no group
    that makes its members root in all but name."""
    problems = []
    for name in sorted(host_vars):
        declared = class_of(name)
        is_account = declared in ("account", "accounts") if declared is not None else bool(
            _ACCOUNT_VARIABLE.search(name))
        if not is_account or name in CONNECTION_USERS or name == "fleet_service_user":
            continue
        value = host_vars[name]
        items = [((name, i), v) for i, v in enumerate(value)] if isinstance(value, list) else [((name,), value)]
        for path, item in items:
            if not isinstance(item, str) or not ACCOUNT_NAME.match(item):
                problems.append(str(Problem(path, item, "is not an account or group name",
                                            "a POSIX name: a letter or '_', then letters, digits, '_' or '-' "
                                            "(at most 32)")))
            elif item in PRIVILEGED_GROUPS:
                problems.append(str(Problem(path, item, "is root, or a group whose members are root in all but name",
                                            "an unprivileged account or group (the vendor's device group, e.g. "
                                            "HwHiAiUser, render, video)")))
    return problems


def _connection_user_problems(host_vars: dict) -> list[str]:
    """The accounts Ansible connects as (CONNECTION_USERS): POSIX names."""
    return [str(Problem((name,), host_vars[name], "is not a user name", "a POSIX user name such as root or admin"))
            for name in CONNECTION_USERS
            if name in host_vars and not (isinstance(host_vars[name], str) and ACCOUNT_NAME.match(host_vars[name]))]


def account_problems(host_vars: dict) -> list[str]:
    return _account_name_problems(host_vars) + _connection_user_problems(host_vars) + _service_user_problems(host_vars)


def _service_user_problems(host_vars: dict) -> list[str]:
    user = host_vars.get("fleet_service_user")
    if not isinstance(user, str):
        return []  # the schema says what a user name is
    if user in SYSTEM_ACCOUNTS or user.startswith("systemd-"):
        what = "root" if user == "root" else "an account of the system, a daemon or a cloud image's admin"
        return [str(Problem(("fleet_service_user",), user, f"is {what}; the models run as an unprivileged account "
                            "of their own, which vllm-fleet makes nologin and gives the fleet's directories",
                            ACCEPTED))]
    for name in CONNECTION_USERS:
        if host_vars.get(name) == user:
            return [str(Problem(("fleet_service_user",), user, f"is the account Ansible connects as ({name}); making "
                                "it a nologin system account would lock Ansible and the admin out", ACCEPTED))]
    return []
