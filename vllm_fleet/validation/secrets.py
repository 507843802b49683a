"""Secrets: never printed, long enough, and only through the secret path.

A secret is a value where vllm_fleet.secrets.is_secret_path says one lies, the rule masking uses too:
under a variable or key named like one (SECRET_NAME: *api_key*, *token*, *password*, *secret*, ...),
a variable declared secret, a suboption its spec marks no_log; never a name. Messages mask them by
where they are (problem.secret_path) and,
behind that, by value in every form a message may print (raw, repr, JSON, URL-encoded:
vllm_fleet.secrets.printed_forms). API keys and tokens must be non-empty strings of printable
characters of a minimum length (vLLM takes an empty key as none: the model would be open).
Secrets go through the secret path (`secret_env`, --secrets FILE, the API's secrets=,
ansible-vault), never in a clear `env`; and no clear variable carries credentials in a URL.
"""

from __future__ import annotations

import re

from vllm_fleet.role_specs import role_options
from vllm_fleet.secrets import MIN_KEY_LENGTH, SECRET_NAME, mask_text, redact_credentials, url_has_credentials
from vllm_fleet.validation.problem import Problem, leaves, secret_path

#: Keys and tokens: what a client presents, so long enough not to be guessed.
_KEY_NAME = re.compile(r"api_?key|token", re.I)
#: Printable ASCII without spaces, quotes or backslashes: what an environment file and an
#: HTTP header carry as written.
_KEY_CHARS = re.compile(r"^[!#-&(-\[\]-~]+$")
KEY_ACCEPTED = (f"a string of at least {MIN_KEY_LENGTH} printable ASCII characters without spaces, quotes or "
                "backslashes, given as a secret (--secrets FILE, the API's secrets= or ansible-vault), e.g. the "
                "output of `openssl rand -hex 24`")


def mask_secrets(problems: list[str], secrets: list[str]) -> list[str]:
    """Problems with every printed form of every secret value, and every password in a URL,
    replaced by the mask."""
    return [redact_credentials(mask_text(p, secrets)) for p in problems]


def _structured(path: tuple) -> bool:
    """A role variable whose spec says it holds several secrets (model_fetch_tokens: a token per hub)."""
    spec = role_options().get(str(path[0])) if len(path) == 1 else None
    return bool(spec and spec[1].get("type") in ("dict", "list"))


def _secret_leaves(value, path: tuple = ()):
    """(path, value) of every secret under `value`, by the one rule masking uses too
    (problem.secret_path: router_api_keys' `key`, not a team's name or limit); a key or token
    given as a mapping or list (where its spec does not say it holds several) whole."""
    if path and isinstance(path[-1], str) and _KEY_NAME.search(path[-1]) and isinstance(value, (dict, list)) \
            and secret_path(path) and not _structured(path):
        yield path, value  # a key or token is one string, not a structure
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _secret_leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _secret_leaves(v, path + (i,))
    elif path and secret_path(path):
        yield path, value


def secret_problems(host_vars: dict) -> list[str]:
    problems: list[str] = []
    for path, value in _secret_leaves(host_vars):
        name = next((str(p) for p in reversed(path) if isinstance(p, str) and SECRET_NAME.search(p)), "")
        if not _KEY_NAME.search(name):
            if value is None or (isinstance(value, str) and not value.strip()):
                problems.append(str(Problem(path, value, "is empty", "a non-empty secret, or leave it out")))
            continue
        if name == "fleet_serve_api_key" and value == "":
            continue  # the default: no key (listening beyond loopback then needs one, vendor_rules)
        if not isinstance(value, str):
            problems.append(str(Problem(path, value, "is not a string", KEY_ACCEPTED)))
        elif not value.strip():
            problems.append(str(Problem(path, value, "is empty or blank, which vLLM and the router take as no key "
                                        "at all", KEY_ACCEPTED)))
        elif not _KEY_CHARS.match(value):
            problems.append(str(Problem(path, value, "has spaces, quotes, backslashes or characters outside printable "
                                        "ASCII, which its environment file or an HTTP header cannot carry",
                                        KEY_ACCEPTED)))
        elif len(value) < MIN_KEY_LENGTH:
            problems.append(str(Problem(path, value, f"is {len(value)} characters long, short enough to be guessed",
                                        KEY_ACCEPTED)))
    for path, value in leaves(host_vars):
        if not path or path[-1] is None:
            continue
        if len(path) >= 2 and path[-2] in ("env", "fleet_serve_env") and isinstance(path[-1], str) and SECRET_NAME.search(path[-1]):
            problems.append(str(Problem(path, value, f"is a secret ({path[-1]}) in a clear env, which plans, unit "
                                        "files and logs show", "the same name under secret_env (given with "
                                        "--secrets FILE, the API's secrets= or ansible-vault)")))
            continue
        if secret_path(path):
            continue
        if url_has_credentials(value):
            problems.append(str(Problem(path, "(a URL with a credential, not shown)",
                                        "carries a credential (a user and password, a token as its user or in its "
                                        "query) in a clear variable, which logs and plans would print",
                                        "the URL without user:password@, token@ or a token in its query (give the "
                                        "mirror's credentials to the node by other means, e.g. a netrc file), or "
                                        "the URL in a secret")))
    return problems


def inline_secret_problems(extra_vars: dict) -> list[str]:
    """A secret given inline on the command line (-e KEY=VALUE, -e '{...}'), which the process list,
    shell history and CI logs show: refused, whatever its value. A file (-e @FILE, vault-encrypted)
    or vllm-fleet's --secrets FILE carries it instead."""
    return [str(Problem(path, "(a secret, not shown)", "is a secret given inline on the command line, which the "
                        "process list, the shell's history and a CI log show",
                        "-e @FILE with the file vault-encrypted (ansible-vault encrypt FILE), or vllm-fleet's "
                        "--secrets FILE"))
            for path, value in _secret_leaves(extra_vars)
            if value not in (None, "") and path and path[-1] is not None
            # A reference (`{{ vllm_api_key }}`) names the secret, given in a file: no secret on the line.
            and not (isinstance(value, str) and ("{{" in value or "{%" in value))]
