"""Rendering of served models into command lines, unit lines and environment files.

Used by the roles' templates (through filter_plugins/fleet.py) and by
`vllm-fleet plan`, so what a reviewer sees is byte for byte what a node gets.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable
from typing import Any

# Arguments made only of these characters need no quoting in a systemd command line.
_SYSTEMD_BARE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def flag_values(key: str, value: Any) -> list[str]:
    """One vLLM flag as argv items.

    True -> --flag; False -> --no-flag (vLLM's boolean flags accept both forms);
    mappings -> one JSON argument; lists -> the flag followed by each item
    (vLLM's nargs='+' flags such as --served-model-name or --lora-modules).
    """
    if value is True:
        return [flag(key)]
    if value is False:
        return ["--no-" + key.replace("_", "-")]
    if isinstance(value, dict):
        return [flag(key), json.dumps(value, separators=(", ", ": "))]
    if isinstance(value, (list, tuple)):
        items = [json.dumps(v, separators=(", ", ": ")) if isinstance(v, dict) else str(v) for v in value]
        return [flag(key), *items]
    return [flag(key), str(value)]


def serve_argv(model: dict, executable: str = "vllm") -> list[str]:
    """The full `vllm serve` command line of a resolved model (see vllm_fleet.models)."""
    argv = [executable, "serve", str(model["path"])]
    argv += flag_values("served_model_name", list(model["served_model_name"]))
    argv += flag_values("port", model["port"])
    if model.get("listen"):
        argv += flag_values("host", model["listen"])
    for key, value in model["serve"].items():
        argv += flag_values(key, value)
    return argv


def systemd_quote(arg: str) -> str:
    """Quote one argument for a systemd Exec*= line.

    systemd expands %specifiers and $VARIABLES in command lines, so both are
    doubled; anything else that is not a plain word goes inside double quotes
    with backslash escapes, which systemd's parser undoes.
    """
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_BARE.match(arg):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


# Characters no line-based configuration a role writes gives a meaning to inside a word
# (HAProxy, systemd settings, environment files, the ARGS= that Debian's units split):
# no space, quote, backslash, `#` (comments), `$` (variables), `%` (systemd's specifiers),
# `;` or control character.
_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./\[\]~-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def plain_word(value: Any) -> str:
    """`value` unchanged when it is one plain word (_PLAIN_WORD), else ValueError.

    For the places that cannot quote: systemd's User=, Group=, WorkingDirectory= and
    EnvironmentFile= take the rest of the line as it is, and a word of Debian's
    ARGS="..." is split on spaces with no quoting at all. A listen address, a path, a
    duration or an account name never needs more; anything else is refused, not mangled."""
    text = str(value)
    if not _PLAIN_WORD.match(text):
        raise ValueError(f"{text!r} is not one plain word (letters, digits and _@+=:,./[]~- only): it would "
                         "change the meaning of the line it is written into")
    return text


def single_word(value: Any) -> str:
    """`value` unchanged when it is not empty and has no whitespace or control character, else
    ValueError: for formats that split a line on spaces and end it at a newline but give no
    other character a meaning mid-line (deb822 apt sources and preferences, pip.conf, which
    pip reads with RawConfigParser). A URL keeps its `%`-escapes and query there."""
    text = str(value)
    if not text or re.search(r"[\s\x00-\x1f\x7f]", text):
        raise ValueError(f"{text!r} is empty or has a space, a newline or another control character: it would "
                         "change the meaning of the line it is written into")
    return text


def systemd_text(value: Any) -> str:
    """Free text of a systemd unit setting (Description=, a time span) or of a comment line:
    `%` doubled (systemd resolves specifiers in settings and undoes `%%`); refused when it
    holds a control character (a newline would start a setting of its own) or ends in a
    backslash (which continues the line)."""
    text = str(value)
    if _CONTROL.search(text) or text.endswith("\\"):
        raise ValueError(f"{text!r} has a control character (a newline) or ends in a backslash, which a systemd "
                         "unit line cannot carry")
    return text.replace("%", "%%")


def haproxy_quote(value: Any) -> str:
    """One word of an HAProxy configuration line, as HAProxy's parser reads it back.

    A plain word (_PLAIN_WORD) is written as it is. Anything else goes inside single
    quotes, HAProxy's strong quoting (no backslash escapes, no "${VAR}" expansion, `#`
    and spaces literal), a single quote itself as \\' between quoted parts: the same
    rules as a POSIX shell's for this subset. A control character is refused: a newline
    ends the line whatever the quoting."""
    text = str(value)
    if _CONTROL.search(text):
        raise ValueError(f"{text!r} has a control character (a newline), which an HAProxy configuration line "
                         "cannot carry")
    if _PLAIN_WORD.match(text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def systemd_command(argv: Iterable[str]) -> str:
    return " ".join(systemd_quote(str(a)) for a in argv)


def shell_command(argv: Iterable[str]) -> str:
    """The same command line for a human's shell (what `plan` prints)."""
    return " ".join(shlex.quote(str(a)) for a in argv)


def launch_argv(model: dict, executable: str, launcher: str, env_scripts: list[str] | None = None,
                conda: dict | None = None) -> list[str]:
    """ExecStart of a host-mode unit: the launcher loads the vendor environment, then execs vllm serve."""
    argv = [launcher]
    for script in env_scripts or []:
        argv += ["--source", script]
    if conda:
        argv += ["--conda", conda["base"], conda["env"]]
    return [*argv, "--", *serve_argv(model, executable)]


_ENV_UNSAFE = re.compile(r"[\n\r\"'\\]|^\s|\s$")


def env_file(env: dict[str, Any]) -> str:
    """Lines of an environment file that systemd's EnvironmentFile= and docker's --env-file
    both read the same way: KEY=value, unquoted (so values must not need quoting)."""
    lines = []
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        value = str(env[name])
        if _ENV_UNSAFE.search(value):
            raise ValueError(f"environment variable {name}: value {value!r} has quotes, backslashes, a newline "
                             "or surrounding spaces, which environment files cannot carry unquoted")
        lines.append(f"{name}={value}")
    return "\n".join(lines) + ("\n" if lines else "")


def tiktoken_cache_key(url: str) -> str:
    """File name tiktoken and openai-harmony give a cached encoding: sha1 of its URL."""
    return hashlib.sha1(url.encode()).hexdigest()


#: In a contract's unit_devices: one node per device of the model (the numbers of its
#: visible-devices variable), and one per device of the node whatever the model holds.
MODEL_DEVICE = "{index}"
NODE_DEVICE = "{node_index}"


def unit_devices(model: dict, patterns: list[str], count: int) -> list[str]:
    """The device nodes a model's host-mode units may open (``DeviceAllow=``): each of the
    vendor contract's ``unit_devices`` in order, ``{index}`` once per device of the model (its
    ``devices``, the numbers its visible-devices variable gives), ``{node_index}`` once per device
    of the node (``count``: for a vendor whose device nodes are not numbered as its processes
    number the devices), any other entry (a control node, ``char-<group>``) as it is.
    """
    devices = list(model.get("devices") or [])
    out: list[str] = []
    for pattern in patterns:
        if MODEL_DEVICE in pattern and NODE_DEVICE in pattern:
            raise ValueError(f"unit device {pattern!r} names both {MODEL_DEVICE} and {NODE_DEVICE}")
        if MODEL_DEVICE in pattern:
            out += [pattern.replace(MODEL_DEVICE, str(int(d))) for d in devices]
        elif NODE_DEVICE in pattern:
            out += [pattern.replace(NODE_DEVICE, str(i)) for i in range(int(count))]
        else:
            out.append(pattern)
    return out


def container_model_path(path: str, host_models_dir: str, container_models_dir: str) -> str:
    """A model's path inside the container, given where the host's models directory is mounted."""
    host = host_models_dir.rstrip("/")
    if path == host or path.startswith(host + "/"):
        return container_models_dir.rstrip("/") + path[len(host):]
    return path


def container_argv(model: dict, settings: dict, *, runtime: str, env_files: list[str], image: str) -> list[str]:
    """`<runtime> run ...` of a container-mode unit.

    `settings` (the vendor's, from the play) holds: options (run options such as
    --ipc=host), privileged (add --privileged), device_pattern ("/dev/davinci{index}", one per device of the
    model), gpus (docker's --gpus with the model's devices, for the NVIDIA
    Container Toolkit), visible_devices_env (the variable that numbers the devices
    a process sees, reset to the container's own numbering), control_devices,
    volumes ("host:container[:mode]"), models_dir and models_mount (the host's
    models directory and where it is mounted), and launcher (argv run in the
    container before vllm serve, e.g. sourcing CANN) and network ("bridge": the model's port is
    published on the same port; "host": the container shares the node's network and the engine listens
    on the model's address). The environment comes from the same files as in host mode.
    """
    name = model["unit"]
    argv = [runtime, "run", "--rm", "--name", name, *settings.get("options", [])]
    if settings.get("privileged"):
        # Opt-in only (vllm_service_container_privileged): the devices are passed one by one below.
        argv.append("--privileged")
    pattern = settings.get("device_pattern")
    if pattern:
        argv += [f"--device={pattern.format(index=i)}" for i in model["devices"]]
    if settings.get("gpus"):
        # docker reads --gpus as CSV, so a list of devices must be one quoted field: --gpus '"device=0,1"'.
        argv += ["--gpus", '"device=' + ",".join(str(i) for i in model["devices"]) + '"']
    argv += [f"--device={d}" for d in settings.get("control_devices", [])]
    for volume in settings.get("volumes", []):
        argv += ["-v", volume]
    models_dir, mount = settings.get("models_dir"), settings.get("models_mount")
    if models_dir and mount:
        argv += ["-v", f"{models_dir}:{mount}"]
    for env_file_path in env_files:
        argv += ["--env-file", env_file_path]
    visible = settings.get("visible_devices_env")
    if visible and model["devices"]:
        # The container sees only the model's devices, numbered from 0; the host's numbers
        # in the environment file would name devices it does not have (-e wins over --env-file).
        argv += ["-e", f"{visible}=" + ",".join(str(i) for i in range(len(model["devices"])))]
    listen = model.get("listen") or "127.0.0.1"
    if settings.get("network") == "host":
        # The node's own network (fleet_container_network host): the engine listens on the model's
        # address itself, as in host mode; nothing is published.
        argv += ["--network=host", image]
        inner = dict(model)
    else:
        # Published on the model's listen address only; inside its own network namespace the
        # engine listens on every interface of the container (its loopback is not the host's).
        published = f"[{listen}]" if ":" in listen else listen
        argv += ["-p", f"{published}:{model['port']}:{model['port']}", image]
        inner = dict(model, listen="0.0.0.0")
    if models_dir and mount:
        inner["path"] = container_model_path(model["path"], models_dir, mount)
        if "lora_modules" in model["serve"]:
            # --lora-modules name=path: adapters are read through the same mount as the model.
            inner["serve"] = {**model["serve"], "lora_modules": [
                name_path.partition("=")[0] + "=" + container_model_path(name_path.partition("=")[2], models_dir, mount)
                for name_path in model["serve"]["lora_modules"]]}
    argv += [*settings.get("launcher", []), *serve_argv(inner, settings.get("executable", "vllm"))]
    return argv
