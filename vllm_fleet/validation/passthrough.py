"""Option lists passed through to a program: they add to what vllm-fleet renders, never undo a rule.

Two role variables hand options to a program as given: `ray_cluster_start_options` to every
member's `ray start`, and `vllm_service_container.options` to `docker|podman run` in container
mode. Appended after what vllm-fleet sets, such an option would win over it, and reopen what
the rules closed: Ray's dashboard on every interface, its worker ports outside the port
registry, a container with every privilege (vllm_service_container_privileged is the switch),
on the host's network (the engine inside listens on every interface, past the model's
`listen`), or its own port publishing (`-p`, glued or grouped), mounts of the host's system
directories or a runtime's socket, unconfined security options, a secret in clear (`-e KEY=...`).
An option and its value in one item reach the program as one word, which it refuses. The options each program keeps to vllm-fleet are listed
once (vllm_fleet.cluster.RAY_GOVERNED_OPTIONS, CONTAINER_GOVERNED_OPTIONS below); `vllm serve`'s
own flags are judged by vLLM's parser and the serve rules (serve.py: host, port, api_key).
"""

from __future__ import annotations

import posixpath

from vllm_fleet.cluster import governed_options
from vllm_fleet.secrets import SECRET_NAME
from vllm_fleet.validation.paths import SYSTEM_DIRS
from vllm_fleet.validation.problem import Problem

#: `<runtime> run` options vllm-fleet sets or keeps behind a rule (vllm_fleet.render.container_argv).
CONTAINER_GOVERNED_OPTIONS = ("--privileged", "--cap-add", "--network", "--net", "--pid", "--userns", "--uts",
                              "-p", "--publish", "-P", "--publish-all", "--name", "--rm", "--env-file", "--gpus",
                              "--device", "--restart", "-d", "--detach")


#: Short options `<runtime> run` takes a value after (glued, `-p8000:8000`, or as the next item);
#: the letters before one may be flags grouped with it (`-dp 80:80`).
_VALUED_SHORT = set("acehlmpuvw")
#: Short options kept to vllm-fleet: -p (publishing), -P (publishing all), -d (detached: systemd runs it).
_GOVERNED_SHORT = set("pPd")
#: What a bind mount may not bring into the container: the system's directories whole (the host's
#: root as a volume is every privilege), and a container runtime's socket (it runs any container).
_MOUNT_SOURCES_ACCEPTED = ("a directory of the node's own below the system's (e.g. /home/models, "
                           "/usr/local/Ascend/driver), never a system directory whole or a runtime's socket")
#: Security options that take back a confinement (vendor contracts set their own: MetaX's, docs/security.md).
_UNCONFINED = ("unconfined", "label=disable", "label:disable", "no-new-privileges=false", "no-new-privileges:false")


def _name(option: str) -> str:
    """The option's name: before '=' or whitespace (`--network host` in one item names --network)."""
    return (option.split("=", 1)[0].split() or [""])[0]


def _short_governed(option: str) -> bool:
    """A single-dash item (`-p8000:8000`, `-dP`, `-itp 80:80`) that holds a governed short option."""
    if not option.startswith("-") or option.startswith("--"):
        return False
    for letter in option[1:]:
        if letter in _GOVERNED_SHORT:
            return True
        if letter in _VALUED_SHORT or not letter.isalpha():
            return False
    return False


def _values(options: list, longs: tuple[str, ...], short: str | None = None):
    """(item, value) of each use of an option in `options`: `--opt=V`, `--opt V` (two items), `-xV`, `-x V`."""
    items = [o for o in options if isinstance(o, str)]
    for i, item in enumerate(items):
        following = items[i + 1] if i + 1 < len(items) else ""
        name = _name(item)
        if name in longs or (short and name == short):
            rest = item[len(name):].lstrip("= \t")
            yield item, rest or following
        elif short and item.startswith(short) and not item.startswith("--") and len(item) > len(short):
            yield item, item[len(short):].lstrip("= ")


def _mount_source(kind: str, value: str) -> str:
    if kind == "mount":
        fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f)
        return fields.get("source") or fields.get("src") or ""
    return value.split(":", 1)[0]


def _bad_mount(source: str) -> bool:
    if not source.startswith("/"):
        return False  # a named volume of the runtime's
    normal = posixpath.normpath(source)
    return (normal in SYSTEM_DIRS or normal in ("/var/run", "/run/docker", "/var/run/docker")
            or normal.endswith(".sock"))


def _container_governed(options: list) -> list[str]:
    out = []
    for option in options:
        if not isinstance(option, str):
            continue
        name = _name(option)
        if (name in CONTAINER_GOVERNED_OPTIONS or (name.startswith("--cap-add") and name != "--cap-drop")
                or name == "--cgroupns" or _short_governed(option)):
            out.append(option)
    return out


def _container_problems(options: list) -> list[str]:
    """Mounts of the system, unconfined security options, secrets in clear, an option and its value in one item."""
    problems = []
    where = ("vllm_service_container", "options")
    for kind, longs, short in (("volume", ("--volume",), "-v"), ("mount", ("--mount",), None)):
        for item, value in _values(options, longs, short):
            if _bad_mount(_mount_source(kind, value)):
                problems.append(str(Problem(where, item, f"mounts {_mount_source(kind, value)} of the host into the "
                                            "container, which gives it the host (its system directories or the "
                                            "container runtime's socket)", _MOUNT_SOURCES_ACCEPTED)))
    for item, value in _values(options, ("--security-opt",)):
        if any(u in value.replace(" ", "") for u in _UNCONFINED):
            problems.append(str(Problem(where, item, "takes back a confinement of the container (seccomp, AppArmor, "
                                        "SELinux labels or no-new-privileges)", "other run options; a vendor whose "
                                        "image needs one sets it in its contract (docs/security.md)")))
    for _item, value in _values(options, ("--env",), "-e"):
        if SECRET_NAME.search(value.split("=", 1)[0]) and "=" in value:
            problems.append(str(Problem(where, "(an environment variable with a secret, not shown)",
                                        f"gives the container {value.split('=', 1)[0]} in clear on its command "
                                        "line, which plans, unit files and `ps` show",
                                        "the model's secret_env (given with --secrets FILE or ansible-vault)")))
    return problems


def _one_word_problems(where: tuple, options: list, program: str) -> list[str]:
    """An option and its value in one item reach the program as one word (argv, not a shell line)."""
    return [str(Problem(where, option, f"holds an option and its value in one item, which {program} receives as "
                        "one word and refuses at start", "the option and its value as two items, or --option=value"))
            for option in options if isinstance(option, str) and option.startswith("-") and " " in option.strip()]


def passthrough_problems(host_vars: dict) -> list[str]:
    problems = []
    options = host_vars.get("ray_cluster_start_options")
    if isinstance(options, list):
        problems += _one_word_problems(("ray_cluster_start_options",), options, "`ray start`")
        for option in governed_options(options):
            problems.append(str(Problem(("ray_cluster_start_options",), option, "is an option vllm-fleet sets or "
                                        "keeps behind a rule (the member's address, the dashboard off, the worker "
                                        "ports the registry holds, the session directory)",
                                        "other `ray start` options (e.g. --object-spilling-directory); the worker "
                                        "ports through the model's span.worker_ports")))
    container = host_vars.get("vllm_service_container")
    options = container.get("options") if isinstance(container, dict) else None
    if isinstance(options, list):
        problems += _one_word_problems(("vllm_service_container", "options"), options, "the container runtime")
        problems += _container_problems(options)
        for option in _container_governed(options):
            problems.append(str(Problem(("vllm_service_container", "options"), option, "is a run option vllm-fleet "
                                        "sets or keeps behind a rule (privileges: vllm_service_container_privileged; "
                                        "the network and published port: the model's listen and port; devices: "
                                        "device_pattern and control_devices)",
                                        "other run options, e.g. --ipc=host, --shm-size=16g, --ulimit=memlock=-1")))
    return problems
