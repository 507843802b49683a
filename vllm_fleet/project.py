"""Where the project's files are (roles, playbooks, module_utils, ansible.cfg): the checkout
holding site.yml. Re-exported as vllm_fleet.PROJECT_DIR."""

import hashlib
import importlib.util
import sys
import threading
from pathlib import Path

#: Root of the vllm-fleet project (the checkout holding site.yml).
PROJECT_DIR = Path(__file__).resolve().parent.parent
ROLES_DIR = PROJECT_DIR / "roles"
#: The roles' layers, each a folder of roles/ (roles/README.md): a role's path says where in a run
#: it stands. Ansible finds a role by that path (`role: blocks/vllm_service`); its name, which
#: prefixes its variables, is the last part.
ROLE_LAYERS = ("stages", "vendors", "blocks", "services", "tools")

#: What a run of the playbooks reads of the project itself: a change to any of it may change
#: what a node gets, so it is part of each node's inputs digest (vllm_fleet.state.inputs_digest).
CODE_PATHS = ("site.yml", "ansible.cfg", "playbooks", "roles", "library", "module_utils", "filter_plugins",
              "vllm_fleet")


def code_digest(root: Path = PROJECT_DIR) -> str:
    """sha256 over the path and content of every file of CODE_PATHS (bytecode caches left out)."""
    digest = hashlib.sha256()
    for top in CODE_PATHS:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


_MODULE_UTILS_LOCK = threading.Lock()


def module_util(name: str):
    """module_utils/<name>.py, loaded from its file once per process (threads that ask at once
    get the same module): Ansible ships these files to nodes as ansible.module_utils.*, which is
    no package of ours on the controller."""
    key = f"vllm_fleet_module_utils_{name}"
    with _MODULE_UTILS_LOCK:
        if key not in sys.modules:
            spec = importlib.util.spec_from_file_location(key, PROJECT_DIR / "module_utils" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[key]
                raise
        return sys.modules[key]


def role_dirs(roles_dir: Path = ROLES_DIR) -> list[Path]:
    """Every role's folder, layer by layer (roles/<layer>/<role>)."""
    return [p for layer in ROLE_LAYERS if (roles_dir / layer).is_dir()
            for p in sorted((roles_dir / layer).iterdir()) if p.is_dir()]


def role_dir(name: str) -> Path:
    """A role's folder by its name (vllm_service -> roles/blocks/vllm_service)."""
    for path in role_dirs():
        if path.name == name:
            return path
    raise KeyError(f"no role {name!r} under {ROLES_DIR}/<{'|'.join(ROLE_LAYERS)}>")
