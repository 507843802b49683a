"""Strings that reach a file or a command line: no control characters, anywhere.

Every value the inventory gives may end up in a unit file, an environment file, haproxy.cfg,
Prometheus' YAML or a command line. A newline there starts a line the inventory did not ask
for; a NUL ends a C string early; bidi and zero-width characters make what a reviewer reads
differ from what runs. One rule for every string and every mapping key, at any depth, of
every variable validation reads (fleet_* and role variables alike); each renderer's own
escaper (vllm_fleet.render) is the second line.
"""

from __future__ import annotations

import re

from vllm_fleet.role_specs import suboption_classes
from vllm_fleet.validation.problem import Problem, leaves

#: C0 and C1 controls (tab, newline and carriage return included), DEL, zero-width and bidi
#: formatting characters, the Unicode line and paragraph separators, the byte-order mark.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2064\u2066-\u2069\ufeff]")
ACCEPTED = "a value on one line, without control, zero-width or bidi characters (tabs and newlines included)"


#: The one value on several lines: a suboption declared `armored` (meta/classes.yml, `option.key: armored`),
#: an ASCII-armored block written whole into a file of its own (an apt repository's signing key).
ARMORED = re.compile(r"\A-----BEGIN [A-Z0-9 ]+-----\n[\x20-\x7e\n]*\n-----END [A-Z0-9 ]+-----\n*\Z")
ARMORED_ACCEPTED = ("an ASCII-armored block: -----BEGIN ...----- to -----END ...-----, printable ASCII on lines "
                    "of their own (as `gpg --armor --export` writes it)")


def _armored(path: tuple) -> bool:
    names = [p for p in path if isinstance(p, str)]
    return len(names) >= 2 and suboption_classes().get((names[0], names[-1])) == "armored"


def control_characters(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in CONTROL.findall(text)})


def control_character_problems(host_vars: dict) -> list[str]:
    problems = []
    for path, value in leaves(host_vars):
        if isinstance(value, str) and path and path[-1] is not None and _armored(path):
            if not ARMORED.match(value.replace("\r\n", "\n").strip() + "\n"):
                problems.append(str(Problem(path, value, "is no ASCII-armored block", ARMORED_ACCEPTED)))
            continue
        if not isinstance(value, str) or not CONTROL.search(value):
            continue
        if path and path[-1] is None:
            problems.append(str(Problem(path[:-1], value, f"the key {ascii(value)} has the character(s) "
                                        f"{', '.join(control_characters(value))}", "a key " + ACCEPTED)))
        else:
            problems.append(str(Problem(path, value, f"has the character(s) {', '.join(control_characters(value))}",
                                        ACCEPTED)))
    return problems
