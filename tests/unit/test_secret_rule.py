"""One rule of what a secret is (vllm_fleet.secrets.is_secret_path): validation's messages mask
exactly what plans, the runner's events and status mask by value, over every suboption the
roles' specs declare and every top-level role variable."""

import pytest

from vllm_fleet.role_specs import role_options, secret_declarations
from vllm_fleet.secrets import MASK, NAME_KEYS, SECRET_NAME, secret_values
from vllm_fleet.validation.problem import Problem

VALUE = "v1e2r3y4-distinct-value"


def _suboptions():
    for name, (_, spec) in sorted(role_options().items()):
        for sub, option in sorted((spec.get("options") or {}).items()):
            yield pytest.param(name, sub, bool(isinstance(option, dict) and option.get("no_log")), id=f"{name}.{sub}")


def _masked_in_message(path) -> bool:
    message = str(Problem(path, VALUE, "is wrong", "something right"))
    assert (VALUE in message) != (MASK in message), message
    return MASK in message


@pytest.mark.parametrize("name, sub, no_log", list(_suboptions()))
def test_a_suboption_is_masked_in_messages_exactly_when_masking_hides_it(name, sub, no_log):
    assert not SECRET_NAME.search(sub) or no_log or sub in NAME_KEYS, \
        f"{name}.{sub} is named like a secret: its spec must mark it no_log"
    masked = VALUE in secret_values({name: [{sub: VALUE}]}, secret_declarations())
    assert masked == (no_log and sub not in NAME_KEYS)
    assert _masked_in_message((name, 0, sub)) == masked
    assert _masked_in_message((name, sub)) == masked  # a variable of type dict: no list index


@pytest.mark.parametrize("name", sorted(n for n, (_, spec) in role_options().items() if not spec.get("options")))
def test_a_variable_is_masked_in_messages_exactly_when_masking_hides_it(name):
    masked = VALUE in secret_values({name: VALUE}, secret_declarations())
    assert masked == (name in secret_declarations()[0] or bool(SECRET_NAME.search(name)))
    assert _masked_in_message((name,)) == masked
    assert _masked_in_message((name, "nested", 0)) == masked
