"""The classes of value, and which class each variable is: declared, not guessed from its name.

Each role option declares its class in roles/<layer>/<role>/meta/classes.yml (Ansible's argument spec
has no key for it, and ansible-lint's schema refuses one): `port`, `path`, `secret`, ... A rule
of a class (types.py for numbers, formats.py, paths.py, accounts.py, names.py, secrets.py, the
environment rule below, play_keywords.py) applies to every variable declared of that class,
whatever its name and wherever its value came from; tests/unit/test_classes.py fails when an
option has no class, a class is unknown, or a class contradicts the option's type. Keys inside
a structure (fleet_models[].path, ...) are typed by the inventory schema's `$defs` (port,
abspath, ...), the same classes by declaration.
"""

from __future__ import annotations

import re

from vllm_fleet.role_specs import role_classes
from vllm_fleet.validation.problem import Problem

#: Every class, and what its values are.
CLASSES: dict[str, str] = {
    # numbers (their range: NUMBER_RANGES)
    "port": "a TCP port", "percent": "a percentage", "points": "percentage points", "fraction": "a fraction",
    "seconds": "a number of seconds up to a day", "short_seconds": "a number of seconds up to an hour",
    "latency": "a latency in seconds (fractions allowed)",
    "count": "a count", "restarts": "a count of restarts", "cpus": "a number of CPUs", "bytes": "a number of bytes",
    "gigabytes": "a number of GB", "number": "a non-negative number",
    # strings of a format
    "address": "an IP address", "duration": "a duration (15s, 10m, 1h30m)", "mode": "a file mode (octal digits)",
    "url": "an http(s) or file URL", "urls": "a list of URLs", "path": "an absolute path of the fleet's",
    "executable": "a program the fleet runs (an absolute path)", "account": "an account or group name",
    "accounts": "a list of account or group names", "name": "a name (one word, safe characters)",
    "secret": "a secret", "secrets": "secrets (a mapping or list of them)", "choice": "one of the spec's choices",
    "env": "an environment (identifier -> value)", "serial": "a rollout's batch size",
    "fingerprint": "an OpenPGP key's fingerprint (40 hex digits)",
    "armored": "an ASCII-armored block (-----BEGIN ...----- to -----END ...-----), the one value on several lines",
    # judged by the spec's type and the schema
    "switch": "true or false", "text": "a string without control characters", "list": "a list",
    "mapping": "a mapping",
}
#: The range of each number class: (low, high, low inclusive, what is accepted).
NUMBER_RANGES: dict[str, tuple[float, float, bool, str]] = {
    "port": (1024, 65535, True, "a TCP port of an unprivileged service, 1024-65535"),
    "percent": (0, 100, True, "a percentage, 0-100"),
    "points": (0, 100, True, "percentage points, 0-100"),
    "fraction": (0, 1, False, "a fraction in (0, 1], e.g. 0.9"),
    "seconds": (1, 86400, True, "a number of seconds, 1-86400 (a day)"),
    "short_seconds": (1, 3600, True, "a number of seconds, 1-3600 (an hour)"),
    "latency": (0, 60, True, "a latency in seconds, 0-60, e.g. 0.1"),
    "count": (1, 100, True, "a count, 1-100"),
    "restarts": (0, 100, True, "a count, 0-100"),
    "cpus": (0, 65536, True, "a number of CPUs, 0-65536 (0: Ray's own count)"),
    "bytes": (0, 2**50, True, "a number of bytes, 0-2^50 (0: the default)"),
    "gigabytes": (0, 1048576, True, "a number of GB, 0-1048576"),
}
#: Environment variable names: what a shell, systemd's Environment= and an env file take.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def class_of(name: str) -> str | None:
    """The declared class of a top-level variable (a role option), or None for another variable."""
    return role_classes().get(name)


def declared(cls: str) -> list[str]:
    """The variables declared of class `cls`."""
    return sorted(n for n, c in role_classes().items() if c == cls)


def env_problems(host_vars: dict) -> list[str]:
    """Every variable declared `env`: a mapping of identifiers to scalar values (a name with a
    space, '=' or '-' is no environment variable: systemd drops the line, a shell refuses it)."""
    problems = []
    for name in declared("env"):
        value = host_vars.get(name)
        if not isinstance(value, dict):
            continue  # a wrong type: types.py or the schema
        for key, item in value.items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                problems.append(str(Problem((name,), key, "has a key that is no environment variable name",
                                            "names of letters, digits and '_', not starting with a digit, e.g. "
                                            "HF_HUB_OFFLINE")))
            elif isinstance(item, (dict, list)):
                problems.append(str(Problem((name, key), item, "is a structure", "a string or a number")))
    return problems
