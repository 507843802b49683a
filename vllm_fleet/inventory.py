"""The one reader of an inventory's hosts and variables outside a playbook run (status, bench,
canaries, rollouts): Ansible's own classes (InventoryManager, VariableManager, Templar), so
group and host vars, vault, templates and --limit patterns mean what they mean to
ansible-playbook. Ansible is imported on first use only: it takes about half a second to load.

The checks of the inventory's files before a run (YAML, keys given twice, vault payloads) are
validation's (`vllm_fleet.validation.files`); this module reads what those checks let through.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_fleet.project import PROJECT_DIR

#: What the readers of a node's served models (status, bench, canaries) need of its variables,
#: rendered: how to reach it, and what vllm_fleet.router.served_models resolves its models from.
HOST_KEYS = ("ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file", "ansible_private_key_file",
             "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_host_key_checking",
             "ansible_host_key_checking", "ansible_become", "ansible_connection", "fleet_accelerator", "fleet_models",
             "fleet_serve_defaults", "fleet_serve_env", "fleet_launch_profiles", "fleet_serve_base_port",
             "fleet_serve_listen", "fleet_serve_api_key", "fleet_serve_unauthenticated", "groups")

_PLUGINS_READY = False


class InventoryError(ValueError):
    """Ansible cannot read the inventory, a host's variable cannot be rendered, or no host matches."""


def vault_secrets() -> tuple[list, list[str]]:
    """The vault secrets the run's Ansible would use, from ANSIBLE_VAULT_PASSWORD_FILE and
    ANSIBLE_VAULT_IDENTITY_LIST of this environment (ansible-runner hands it on; the project's
    ansible.cfg sets neither), and why each source that gives none is unusable."""
    from ansible.errors import AnsibleError  # noqa: PLC0415 - Ansible loads slowly: only when needed
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.parsing.vault import get_file_vault_secret  # noqa: PLC0415

    sources = [(None, f) for f in [os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE", "")] if f]
    for item in os.environ.get("ANSIBLE_VAULT_IDENTITY_LIST", "").split(","):
        label, _, source = item.strip().rpartition("@")
        if source:
            sources.append((label or None, source))
    secrets, unusable = [], []
    for label, source in sources:
        if source in ("prompt", "prompt_ask_vault_pass"):
            unusable.append(f"{source}: vllm-fleet cannot prompt for it")
            continue
        try:
            secret = get_file_vault_secret(filename=source, vault_id=label, loader=DataLoader())
            secret.load()
        except (AnsibleError, OSError) as exc:
            unusable.append(f"{source}: {' '.join(str(exc).split())}")
            continue
        secrets.append((label or "default", secret))
    return secrets, unusable


def read(inventory: str | os.PathLike):
    """(loader, InventoryManager) of the inventory, with the vault secrets a run would have."""
    # The project's Ansible configuration, as every run through the API gets it (read on import).
    os.environ.setdefault("ANSIBLE_CONFIG", str(PROJECT_DIR / "ansible.cfg"))
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 - Ansible loads slowly
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    loader = DataLoader()
    secrets, _unusable = vault_secrets()
    if secrets:
        loader.set_vault_secrets(secrets)
    return loader, InventoryManager(loader=loader, sources=[str(Path(inventory).resolve())])


def hosts(inventory: str | os.PathLike, limit: str | None = None, pattern: str = "fleet") -> list[str]:
    """The hosts of `pattern` a run with `limit` targets, in inventory order."""
    _loader, manager = read(inventory)
    if limit:
        manager.subset(limit)
    return [host.name for host in manager.get_hosts(pattern)]


def host_vars(inventory: str | os.PathLike, limit: str | None = None, pattern: str = "fleet",
              keys: tuple[str, ...] = HOST_KEYS, extra: dict | None = None,
              optional: frozenset[str] | tuple[str, ...] = (), defaults: dict | None = None) -> dict[str, dict]:
    """The `keys` of each host of `pattern` (within `limit`), rendered as a play would see them;
    `extra` (extra vars, secrets) wins over the inventory, as -e does. InventoryError when a value
    cannot be rendered (an undefined variable, a vault without its password) or no host matches.
    `optional` names more variables, rendered where they can be and left out where they cannot
    (validation refuses those on a run, naming them). `defaults` (roles' defaults, from
    vllm_fleet.role_specs.role_default) stand under the inventory's values, as in a play, and are
    rendered the same way (model_fetch_share_dir's default names fleet_base_dir)."""
    from ansible.errors import AnsibleError  # noqa: PLC0415 - Ansible loads slowly
    from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    global _PLUGINS_READY  # noqa: PLW0603 - Ansible's plugin loader is set up once per process
    if not _PLUGINS_READY:
        init_plugin_loader()
        _PLUGINS_READY = True
    try:
        loader, manager = read(inventory)
        variables = VariableManager(loader=loader, inventory=manager)
        if limit:
            manager.subset(limit)
        selected = manager.get_hosts(pattern)
    except AnsibleError as exc:
        raise InventoryError(f"inventory {inventory}: Ansible cannot read it: {' '.join(str(exc).split())}") from None
    out = {}
    for host in selected:
        raw = {**(defaults or {}), **variables.get_vars(host=host, include_hostvars=False), **(extra or {})}
        templar = Templar(loader=loader, variables=raw)
        try:
            out[host.name] = {k: templar.template(raw[k]) for k in keys if k in raw}
        except AnsibleError as exc:
            raise InventoryError(f"host {host.name}: {exc.message}") from None
        for k in sorted(set(optional) - set(keys)):
            if k in raw:
                try:
                    out[host.name][k] = templar.template(raw[k])
                except AnsibleError:
                    continue
    if not out:
        raise InventoryError(f"no host of the group {pattern} in {inventory}"
                             + (f" matches the limit {limit!r}" if limit else ""))
    return out
