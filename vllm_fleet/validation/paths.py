"""Paths: one rule for every path variable, wherever it sits.

A path is any value of a role option typed `path`, of a variable or key named `path`,
`*_path` or `*_dir`, at any depth (fleet_models[].path, a LoRA adapter's path, overlay
paths, fleet_base_dir, container_image_dir, ...). Each must be absolute and normal (no `..`,
no `.`, no doubled or trailing slash: the form the roles compare), and must not be a system
directory nor lie inside one of the system's own trees; the vllm-fleet roles create, chown,
fill and move these paths as root. A model's path (and its adapters') must not equal, hold
or lie inside another model's path or a directory of the fleet it does not belong to.
"""

from __future__ import annotations

import re
from typing import Any

from vllm_fleet.role_specs import role_options
from vllm_fleet.validation.classes import class_of
from vllm_fleet.validation.problem import Problem, leaves

#: Directories of the system: never a path of vllm-fleet's (it would take them over: owner,
#: mode, contents), though a directory of its own may lie below them.
SYSTEM_DIRS = frozenset([
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/lib64",
    "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/sbin",
    "/usr/share", "/var", "/var/cache", "/var/lib", "/var/log", "/var/tmp", "/var/spool", "/var/opt", "/var/mail",
    "/snap", "/lost+found", "/var/lib/prometheus"])
#: Trees that belong to the system as a whole: no path of vllm-fleet's lies inside them,
#: except its own configuration directory below /etc.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
                "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/include",
                "/usr/share", "/etc", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/systemd", "/root/.ssh")
#: What vllm-fleet may own inside a system tree: its own configuration directory.
OWN_IN_TREES = ("/etc/vllm-fleet",)
_TEMPLATED = re.compile(r"\{\{|\{%")
_PATH_KEY = re.compile(r"^(path|.*_path|.*_dir|.*_venv|.*_prefix|.*_script|.*_cdi_spec|.*_docker_config|.*_python)$")
#: Programs vllm-fleet runs but never writes (an interpreter): they may live in /usr/bin.
_EXECUTABLE_KEY = re.compile(r"_python$")
#: Trees no program of the fleet's is taken from.
EXECUTABLE_TREES = ("/boot", "/dev", "/etc", "/proc", "/run", "/sys")
ACCEPTED = ("an absolute, normal path (no '..', '.', '//' or trailing '/') outside the system's directories, "
            "e.g. /home/models/<name> for a model or /opt/vllm-fleet for the fleet's own")


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def path_rule(value: Any, executable: bool = False) -> str | None:
    """Why `value` is no acceptable path (`executable`: a program the fleet runs); None when it is."""
    if not isinstance(value, str):
        return "is not a path (a string)"
    if _TEMPLATED.search(value):
        return None  # a role's own derived default, checked where it is derived
    if not value.startswith("/"):
        return "is not absolute"
    parts = value.split("/")[1:]
    if ".." in parts:
        return "has '..', which may leave the directory it names"
    if value != "/" and ("" in parts or "." in parts):
        return "is not in normal form (a '.', '//' or a trailing '/'); the roles compare paths as written"
    if value in SYSTEM_DIRS:
        return "is a system directory, which vllm-fleet would take over (owner, mode and contents)"
    for tree in EXECUTABLE_TREES if executable else SYSTEM_TREES:
        if _inside(value, tree) and not any(_inside(value, own) for own in OWN_IN_TREES):
            return f"lies inside {tree}, which belongs to the system"
    return None


def is_path_variable(name: str) -> bool:
    """A top-level variable of class path or executable (declared: roles/<layer>/<role>/meta/classes.yml;
    a variable no role declares: by its name)."""
    cls = class_of(name)
    if cls is not None:
        return cls in ("path", "executable")
    spec = role_options().get(name)
    return bool(_PATH_KEY.match(name)) or bool(spec and spec[1].get("type") == "path")


def _executable(path: tuple) -> bool:
    cls = class_of(str(path[0])) if len(path) == 1 else None
    return cls == "executable" if cls is not None else bool(_EXECUTABLE_KEY.search(str(path[-1])))


def path_leaves(host_vars: dict):
    """(variable path, value) of every path of the host, at any depth."""
    for name in sorted(host_vars):
        value = host_vars[name]
        if is_path_variable(name) and not isinstance(value, (dict, list)):
            if value not in ("", None):
                yield (name,), value
            continue
        for path, leaf in leaves(value, (name,)):
            if path[-1] is None or len(path) < 2:
                continue
            key = path[-1] if isinstance(path[-1], str) else next(
                (p for p in reversed(path) if isinstance(p, str)), "")
            if isinstance(path[-1], str) and _PATH_KEY.match(key) and leaf not in ("", None):
                yield path, leaf


def path_problems(host_vars: dict) -> list[str]:
    problems = []
    for path, value in path_leaves(host_vars):
        why = path_rule(value, executable=_executable(path))
        if why:
            problems.append(str(Problem(path, value, why, ACCEPTED)))
    return problems


def _normal(path: Any) -> str | None:
    return path if isinstance(path, str) and path.startswith("/") and not _TEMPLATED.search(path) else None


def model_path_problems(host_vars: dict, models: list[dict]) -> list[str]:
    """A model's (or adapter's) path neither equals, holds nor lies inside another model's, nor a
    fleet directory other than the models' own (fleet_models_dir); enabled or not."""
    owned: list[tuple[str, str]] = []
    for m in models:
        if _normal(m.get("path")):
            owned.append((f"model {m['name']}: path", m["path"]))
        for i, adapter in enumerate(m.get("lora_adapters") or []):
            if isinstance(adapter, dict) and _normal(adapter.get("path")):
                owned.append((f"model {m['name']}: lora_adapters[{i}].path", adapter["path"]))
    fleet_dirs = [(name, value) for name, value in sorted(host_vars.items())
                  if name.endswith("_dir") and name != "fleet_models_dir" and _normal(value)]
    models_dir = _normal(host_vars.get("fleet_models_dir"))
    problems = []
    for i, (who, path) in enumerate(owned):
        for other, theirs in owned[:i]:
            if path == theirs or _inside(path, theirs) or _inside(theirs, path):
                problems.append(f"{who} = {path!r} {'is' if path == theirs else 'overlaps'} {other} = {theirs!r}; "
                                "accepted: a directory of its own for each model and adapter, neither inside the "
                                "other (fetching or removing one would touch the other)")
        if models_dir and _inside(models_dir, path):
            problems.append(f"{who} = {path!r} {'is' if path == models_dir else 'holds'} fleet_models_dir = "
                            f"{models_dir!r}, where every model has its own directory; accepted: a directory of its "
                            "own below it, e.g. " + models_dir.rstrip("/") + "/<model>")
        for name, directory in fleet_dirs:
            if _inside(path, directory) or _inside(directory, path):
                problems.append(f"{who} = {path!r} overlaps {name} = {directory!r}, a directory of the fleet that is "
                                "not the models'; accepted: a directory of its own, e.g. below fleet_models_dir")
    return problems
