"""The Debian 12 root filesystem every lab node boots from.

Built once with debootstrap and cached under CACHE_DIR/rootfs/<key>; nodes get a
writable overlay on top of it, so ten nodes cost one rootfs.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from vllm_fleet_lab.paths import CACHE_DIR, cache_lock

SUITE = "bookworm"
# What a freshly racked inference server of our users has, plus what Ansible needs
# (python3) and what the lab itself needs (systemd as PID 1, sshd). Roles still
# declare every package they rely on; these are here so nodes work offline.
PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "sudo", "ca-certificates",
    "python3", "python3-venv", "python3-pip", "python3-apt",
    "git", "git-lfs", "curl", "iproute2", "procps", "pciutils", "kmod", "xz-utils",
    "less", "lsof", "file",
]
# Bumped whenever the post-install fix-ups below change, so caches are rebuilt.
FIXUP_REVISION = 2


def cache_key() -> str:
    text = f"{SUITE}|{','.join(sorted(PACKAGES))}|{FIXUP_REVISION}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses for the main archive.

    Read from the host's own apt sources (deb822 `.sources` files or the classic
    `sources.list`), so the lab uses whatever mirror the machine is allowed to reach.
    """
    candidates: list[str] = []
    for path in sorted(sources_dir.glob("sources.list.d/*.sources")):
        uris, suites = [], []
        for line in path.read_text().splitlines():
            if line.startswith("URIs:"):
                uris = line.split()[1:]
            elif line.startswith("Suites:"):
                suites = line.split()[1:]
            elif not line.strip():
                if SUITE in suites:
                    candidates += uris
                uris, suites = [], []
        if SUITE in suites:
            candidates += uris
    lists = [sources_dir / "sources.list", *sorted(sources_dir.glob("sources.list.d/*.list"))]
    for path in lists:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                url_index = next(i for i, p in enumerate(parts[1:], 1) if not p.startswith("["))
                if parts[url_index + 1] == SUITE:
                    candidates.append(parts[url_index])
    for uri in candidates:
        if "security" not in uri:
            return uri
    raise RuntimeError(f"no Debian {SUITE} mirror found in {sources_dir}/sources.list(.d); "
                       "the lab builds its nodes from the same mirror apt uses")


def ensure_rootfs(log=print) -> Path:
    """Return the cached rootfs directory, building it first if needed (once, under the cache's lock)."""
    target = CACHE_DIR / "rootfs" / cache_key()
    if (target / ".vllm-fleet-complete").exists():
        return target
    with cache_lock(target):
        if not (target / ".vllm-fleet-complete").exists():
            _build_rootfs(target, log)
    return target


def _build_rootfs(target: Path, log) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: run scripts/setup (apt-get install debootstrap)")
    mirror = debian_mirror()
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the lab's Debian {SUITE} rootfs with debootstrap from {mirror} (about a minute, once)")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as tmp:
        build = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(build), mirror]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n{tail}")
        _fixup(build)
        (build / ".vllm-fleet-complete").write_text(cache_key() + "\n")
        if target.exists():
            shutil.rmtree(target)
        build.rename(target)


def _fixup(root: Path) -> None:
    """Make the image boot cleanly in a container and carry no shared secrets."""
    # Each node generates its own SSH host keys; none may be shared from the image.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # A fresh machine-id per node (systemd creates it on first boot when empty).
    (root / "etc/machine-id").write_text("")
    # Units that make no sense in a container and would mark the system degraded.
    for unit in ("systemd-timesyncd.service", "apt-daily.timer", "apt-daily-upgrade.timer",
                 "e2scrub_reap.service", "systemd-resolved.service"):
        link = root / "etc/systemd/system" / unit
        if not link.exists():
            link.symlink_to("/dev/null")
    # Keep apt from fetching lists of a registry at boot; roles install what they need.
    (root / "etc/apt/apt.conf.d/99vllm-fleet-lab").write_text('APT::Periodic::Enable "0";\n')
