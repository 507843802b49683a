"""Play keywords fed by extra vars: a rollout's batch size and its failure budget.

`serial` and `max_fail_percentage` of playbooks/converge.yml's rollout play are templated from
the extra vars fleet_rollout_serial and fleet_rollout_max_fail_percentage before any host's
variables are read. Ansible takes more forms than a rollout means, and some of them mean the
opposite of a rollout: a serial of 0 or below, or above 100 %, is every host in one batch
(ansible-core's pct_to_int, then `serial <= 0` -> all hosts), so every node would be drained
and restarted at once. One rule per keyword, over every form Ansible accepts (an int, a
string of digits as `-e k=v` gives it, "N%", a list of batches), used by validation (every
route: plain ansible-playbook and the CLI) and by `vllm-fleet rollout --serial`.
"""

from __future__ import annotations

import math
import re

from vllm_fleet.role_specs import role_options
from vllm_fleet.validation.classes import declared
from vllm_fleet.validation.problem import Problem

SERIAL_ACCEPTED = ("a number of nodes per batch (1, 2, ...), a percentage of the nodes (1% to 100%), or a list of "
                   "those for growing batches (e.g. [1, \"25%\", \"100%\"]); 0, negative numbers and percentages "
                   "over 100 would take every node at once")
MAX_FAIL_ACCEPTED = "a percentage of a batch's nodes, 0-100 (a number, \"50\" or \"50%\"; 0: the first failure stops)"
_COUNT = re.compile(r"^[1-9][0-9]{0,8}$")
_PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")
_PERCENT_NUMBER = re.compile(r"^\s*([0-9]+(\.[0-9]+)?)\s*%?\s*$")


def serial_batch_problem(value) -> str | None:
    """Why one batch size cannot be a rollout's, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "is not a whole number or a percentage"
    text = str(value).strip()
    if _COUNT.match(text) or _PERCENT.match(text):
        return None
    if re.fullmatch(r"-?[0-9]+", text) or re.fullmatch(r"-?[0-9]+%", text):
        return "would put every node in one batch (Ansible takes 0, a negative serial and over 100% as all hosts)"
    return "is not a whole number or a percentage"


def serial_problems(value, name: str = "fleet_rollout_serial") -> list[str]:
    if value is None:
        return []
    batches = value if isinstance(value, list) else [value]
    if not batches:
        return [str(Problem((name,), value, "is an empty list of batches", SERIAL_ACCEPTED))]
    problems = []
    for i, batch in enumerate(batches):
        why = serial_batch_problem(batch)
        if why:
            problems.append(str(Problem((name,) + ((i,) if isinstance(value, list) else ()), batch, why,
                                        SERIAL_ACCEPTED)))
    return problems


def max_fail_percentage_problems(value, name: str = "fleet_rollout_max_fail_percentage") -> list[str]:
    """Ansible reads max_fail_percentage as a percent: a number, its string, or "N%"."""
    if value is None:
        return []
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _PERCENT_NUMBER.match(value):
        number = float(_PERCENT_NUMBER.match(value).group(1))
    if number is None or not math.isfinite(number):
        return [str(Problem((name,), value, "is not a percentage", MAX_FAIL_ACCEPTED))]
    if not 0 <= number <= 100:
        return [str(Problem((name,), value, "is out of range", MAX_FAIL_ACCEPTED))]
    return []


def play_keyword_problems(host_vars: dict) -> list[str]:
    """The extra vars that feed play keywords (declared `serial`, or a `percent` of type raw: the
    forms Ansible's percent keywords take), in the forms Ansible accepts and a rollout means."""
    problems = []
    for name in declared("serial"):
        problems += serial_problems(host_vars.get(name), name)
    for name in declared("percent"):
        if role_options()[name][1].get("type") == "raw":
            problems += max_fail_percentage_problems(host_vars.get(name), name)
    return problems
