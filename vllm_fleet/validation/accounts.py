"""Accounts: the service user the models run as.

vllm-fleet creates fleet_service_user as a nologin system account and gives it the fleet's
directories. It must therefore be an account nobody else uses: not root, not an account of
the system or of a daemon, and not the account Ansible connects as (ansible_user,
ansible_ssh_user, remote_user) nor another login account the inventory names: turning that
one into a nologin account would lock Ansible and the admin out.
"""

from __future__ import annotations

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


def account_problems(host_vars: dict) -> list[str]:
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
