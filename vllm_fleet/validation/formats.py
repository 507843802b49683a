"""Values of a format the consumer parses: addresses, durations, file modes, URLs.

A role variable declared of a format's class (roles/<layer>/<role>/meta/classes.yml) is held to that
format here, one rule per format for every variable declared of it, whatever its name, before
HAProxy, Prometheus or systemd parse it on a node (where a wrong one fails a reload, or worse,
means something else):

- `address`: an IP address (v4 or v6), the wildcard included;
- `duration`: a duration as HAProxy and Prometheus write it (`15s`, `10m`, `1h30m`, `500ms`, a
  bare number of their default unit);
- `mode`: a file mode, three or four octal digits (`0660`);
- `url`, `urls`: an http(s) or file URL without spaces ("" for none where the role says so);
- `fingerprint`: an OpenPGP v4 key's fingerprint, 40 hex digits, spaced as gpg prints it or not ("" for none).
"""

from __future__ import annotations

import ipaddress
import re

from vllm_fleet.validation.classes import class_of
from vllm_fleet.validation.problem import Problem
from vllm_fleet.validation.schema import schema

DURATION = re.compile(r"^(\d+(us|ms|s|m|h|d|w|y))+\Z|^\d+\Z")
FILE_MODE = re.compile(r"^0?[0-7]{3}\Z")
URL = re.compile(r"^(https?|file)://[^\s]+\Z")
FINGERPRINT = re.compile(r"^( *[0-9A-Fa-f]){40} *\Z")  # the inventory schema's pattern, for fleet_*


def format_problems(host_vars: dict) -> list[str]:
    """The role variables (fleet_* have the schema's formats) of the formats they are declared of."""
    known = schema()["properties"]
    problems = []
    for name in sorted(host_vars):
        value, cls = host_vars[name], class_of(name)
        if cls == "urls" and name not in known and isinstance(value, list):
            problems += [str(Problem((name, i), item, "is not a URL", "an http(s):// or file:// URL without spaces"))
                         for i, item in enumerate(value) if isinstance(item, str) and not URL.match(item)]
            continue
        if not isinstance(value, str) or (name in known and cls not in ("address", "url")):
            continue  # a wrong type (types.py or the schema says so), or the schema's format
        if cls == "address" and value != "":
            try:
                ipaddress.ip_address(value)
            except ValueError:
                problems.append(str(Problem((name,), value, "is not an IP address",
                                            "an IPv4 or IPv6 address, e.g. 0.0.0.0 (every interface) or 10.0.0.5")))
        elif cls == "duration" and not DURATION.match(value):
            problems.append(str(Problem((name,), value, "is not a duration",
                                        "a number and a unit, e.g. 15s, 10m, 1h30m or 500ms")))
        elif cls == "mode" and not FILE_MODE.match(value):
            problems.append(str(Problem((name,), value, "is not a file mode",
                                        "three octal digits with an optional leading 0, e.g. \"0660\" (in quotes)")))
        elif cls == "url" and value != "" and not URL.match(value):
            problems.append(str(Problem((name,), value, "is not a URL",
                                        "an http(s):// or file:// URL without spaces, or \"\" for none")))
        elif cls == "fingerprint" and value != "" and not FINGERPRINT.match(value):
            problems.append(str(Problem((name,), value, "is not an OpenPGP key's fingerprint",
                                        "40 hex digits, as `gpg --fingerprint` prints them (spaces allowed), or "
                                        "\"\" for none")))
    return problems
