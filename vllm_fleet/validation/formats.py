"""Values of a format the consumer parses: addresses, durations, file modes, URLs.

A role variable whose name says what it holds is held to that format here, one rule per
format for every variable of the kind, before HAProxy, Prometheus or systemd parse it on a
node (where a wrong one fails a reload, or worse, means something else):

- `*_address` and `*_listen_address`: an IP address (v4 or v6), the wildcard included;
- `*_interval`, `*_retention` and `router_timeout_*`: a duration as HAProxy and Prometheus
  write it (`15s`, `10m`, `1h30m`, `500ms`, a bare number of their default unit);
- `*_mode` holding a file mode: three or four octal digits (`0660`);
- `*_url`: an http(s) or file URL without spaces ("" for none where the role says so).
"""

from __future__ import annotations

import ipaddress
import re

from vllm_fleet.validation.problem import Problem
from vllm_fleet.validation.schema import schema

_ADDRESS = re.compile(r"_address$")
_DURATION = re.compile(r"(_interval|_retention|_timeout_[a-z]+)$")
_FILE_MODE = re.compile(r"(_socket_mode|^download_mode|_file_mode|_dir_mode)$")
_URL = re.compile(r"_url$")
DURATION = re.compile(r"^(\d+(us|ms|s|m|h|d|w|y))+\Z|^\d+\Z")
FILE_MODE = re.compile(r"^0?[0-7]{3}\Z")
URL = re.compile(r"^(https?|file)://[^\s]+\Z")


def format_problems(host_vars: dict) -> list[str]:
    """The role variables (fleet_* have the schema's formats) of the formats their names say."""
    known = schema()["properties"]
    problems = []
    for name in sorted(host_vars):
        value = host_vars[name]
        if name in known or not isinstance(value, str):
            continue  # the schema's, or a wrong type (types.py says so)
        if _ADDRESS.search(name) and value != "":
            try:
                ipaddress.ip_address(value)
            except ValueError:
                problems.append(str(Problem((name,), value, "is not an IP address",
                                            "an IPv4 or IPv6 address, e.g. 0.0.0.0 (every interface) or 10.0.0.5")))
        elif _DURATION.search(name) and not DURATION.match(value):
            problems.append(str(Problem((name,), value, "is not a duration",
                                        "a number and a unit, e.g. 15s, 10m, 1h30m or 500ms")))
        elif _FILE_MODE.search(name) and not FILE_MODE.match(value):
            problems.append(str(Problem((name,), value, "is not a file mode",
                                        "three octal digits with an optional leading 0, e.g. \"0660\" (in quotes)")))
        elif _URL.search(name) and value != "" and not URL.match(value):
            problems.append(str(Problem((name,), value, "is not a URL",
                                        "an http(s):// or file:// URL without spaces, or \"\" for none")))
    return problems
