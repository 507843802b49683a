"""The plan's directory and files: what `vllm-fleet plan` (playbooks/plan.yml) writes.

A plan directory belongs to the plan: each plan replaces the one before it whole (so two plans
compare with `diff -r`, and a refused plan shows no earlier plan's files), and a directory that
holds anything else is refused, never emptied. Each role that writes files on a host gives the
plan the same list of files its converge writes (path, content, mode), rendered by the same
templates; here they are moved under DIR/<host>/, owned by whoever runs the plan, with every
secret of the host masked by the one rule (vllm_fleet.secrets.secret_values).
"""

from __future__ import annotations

import getpass
import grp
import os
import shutil
from pathlib import Path
from typing import Any

from vllm_fleet.plain import plain as _plain
from vllm_fleet.role_specs import role_options, secret_declarations
from vllm_fleet.secrets import is_secret_path, mask_text, secret_values

#: The file that marks a directory as a plan's (the next plan replaces the directory whole).
MARKER = ".vllm-fleet-plan"


class PlanDirError(ValueError):
    """A plan directory that holds something else than a plan."""


def problem(out_dir: str | os.PathLike) -> str:
    """Why `out_dir` cannot take a plan ('' when it can): a file, or a directory that holds
    anything but an earlier plan."""
    out = Path(out_dir).resolve()
    if out.exists() and not out.is_dir():
        return f"plan directory {out}: a file, not a directory; give a new or empty directory"
    if out.is_dir():
        entries = sorted(p.name for p in out.iterdir())
        if entries and MARKER not in entries:
            shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
            return (f"plan directory {out} holds files of no plan ({shown}); give a new or empty directory, or an "
                    f"earlier plan's (it has {MARKER}), which the plan replaces whole")
    return ""


def prepare(out_dir: str | os.PathLike) -> Path:
    """`out_dir`, new or emptied for a plan: an empty directory or an earlier plan's is
    (re)made; one that holds anything else, or a file, is refused (PlanDirError, problem())."""
    out = Path(out_dir).resolve()
    why = problem(out)
    if why:
        raise PlanDirError(why)
    if out.is_dir() and any(out.iterdir()):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by vllm-fleet plan; the next plan into this directory replaces it whole\n")
    return out


def inventory_secrets(hostvars: Any) -> list[str]:
    """The secret values among every host's variables (the declared secrets and those named like
    one: a router's configuration holds the engines' key, a monitoring host's files the models';
    and those nested in vllm-fleet's own variables: a model's secret_env under fleet_models),
    read one by one: `hostvars` may be Ansible's lazy hostvars."""
    declarations = secret_declarations()
    options = role_options()
    found: set[str] = set()
    for host in hostvars.keys():
        host_vars = hostvars[host]
        tree = {}
        for name in (str(n) for n in host_vars.keys()):
            if is_secret_path((name,), declarations) or name in options or name.startswith("fleet_"):
                try:
                    tree[name] = host_vars[name]
                except Exception:  # noqa: BLE001, S112 - a secret that cannot be rendered is in no file
                    continue
        found.update(secret_values(_plain(tree), declarations))
    return sorted(found, key=len, reverse=True)


def files(role_files: list[dict], plan_dir: str, host: str, secrets: list[str] | None = None) -> dict:
    """The arguments of one fleet_files call on the controller that writes a role's files of
    `host` (dicts of path, content, mode as the role writes them on the node) into the plan:
    under plan_dir/<host>/, the plan runner's own, every secret masked."""
    user, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name
    root = Path(plan_dir) / host
    out, directories = [], {}
    for f in role_files:
        if f.get("state") == "absent":
            continue
        path = root / str(f["path"]).lstrip("/")
        content = f.get("content", "")
        out.append({"path": str(path), "content": mask_text(str(content), secrets or []),
                    "mode": f.get("mode") or "0644", "owner": user, "group": group})
        for parent in [path.parent, *path.parent.parents]:
            if parent == root.parent:
                break
            directories[str(parent)] = {"path": str(parent), "mode": "0755"}
    return {"directories": sorted(directories.values(), key=lambda d: d["path"]), "files": out}
