"""Secrets: which names hold one, which values are one, and masking them in every printed form.

A pure helper at the bottom of the package (stdlib only): validation, the runner's
results, events and artifacts, status and bench all mask through this one module, so a
secret is recognised by one rule and hidden in every form a message may print it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "********"

#: Variables (and keys at any depth) whose values are secrets: never echoed in a message.
_SECRET_WORDS = re.compile(r"(?<!tik)token(?!iz)|api_?key|access_?key|password|passwd|secret|credential|private_key",
                           re.I)
#: Names of where a secret lies (a file, a path, a directory), which are no secrets themselves.
_WHERE_A_SECRET_IS = re.compile(r"_(file|files|path|dir)$", re.I)
#: Names with "token" that count tokens (max_num_batched_tokens, ...) and are no secrets.
_TOKEN_COUNTS = re.compile(r"max_|num_|_len|batched|budget|count", re.I)
#: Secrets shorter than this are not masked by value (a two-letter value would mask every
#: word containing it); they are refused as keys anyway (MIN_KEY_LENGTH).
MIN_MASKED_LENGTH = 4
#: The shortest API key accepted: shorter ones are guessed in minutes.
MIN_KEY_LENGTH = 16
#: Keys whose values name things (a model, an adapter, a team: validation/names.py holds
#: them to the name rule): never secrets, not even inside a `--secrets` file, where a team's
#: name sits beside its key and would otherwise be masked in every message that names it.
NAME_KEYS = ("name", "served_model_name")


class _SecretName:
    """Matches names of secrets: *token*, *api_key*, *password*, *secret* (not tokenizer_*, *_tokens counts)."""

    @staticmethod
    def search(name: str) -> bool:
        if _WHERE_A_SECRET_IS.search(name):
            return False  # the path of a key file (ansible_ssh_private_key_file) is no secret
        return bool(_SECRET_WORDS.search(name)) and not (
            "token" in name.lower() and not re.search(r"api_?key|password|passwd|secret", name, re.I)
            and _TOKEN_COUNTS.search(name))


SECRET_NAME = _SecretName()


def is_secret_path(path: Iterable[Any], declarations: tuple[Collection[str], Mapping[str, Collection[str]]],
                   secret: bool = False) -> bool:
    """Whether the value at `path` (a host's variable, then keys and list indices) is a secret:
    the one rule of what a secret is, for validation's messages and masking alike (secret_values
    applies it to every leaf). Keys and tokens, and nothing else:

    - never under a key of NAME_KEYS (a team's or model's name, printed by status and the
      router's counters);
    - under a variable whose spec lists suboptions (`declarations[1]`: variable -> its no_log
      suboptions), only its no_log suboptions, keys named like a secret below the others, and
      an item that is not the declared mapping (validation refuses it; masked whole): a team's
      requests_per_minute of 8000 is no secret, and `--port 8000` stays readable in a plan;
    - otherwise, under a variable declared secret (`declarations[0]`, role_specs.secret_declarations)
      or a variable or key named like a secret (SECRET_NAME), or anywhere when `secret` (a
      `--secrets` file's tree)."""
    parts = [p for p in path if p is not None]  # None marks a mapping's key (validation.problem.leaves)
    keys = [str(p) for p in parts if isinstance(p, str)]
    if not parts:
        return secret
    if any(k in NAME_KEYS for k in keys):
        return False
    declared, suboptions = declarations
    name = str(parts[0])
    if name in suboptions:
        below = keys[1:] if keys and keys[0] == name else keys
        if not below:
            return True  # the variable or one of its items whole
        return below[0] in suboptions[name] or any(SECRET_NAME.search(k) for k in below[1:])
    return secret or name in declared or any(SECRET_NAME.search(k) for k in keys)


def _leaves(value: Any, path: tuple = ()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (str(k),))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def secret_values(tree: Any, declarations: tuple[Collection[str], Mapping[str, Collection[str]]],
                  secret: bool = False) -> list[str]:
    """The secret values of `tree` (a host's variables, or a `--secrets` file's when `secret`),
    longest first so that a secret containing another is masked whole: every string, and every
    number under a secret's name, at a path is_secret_path calls secret (the one rule, for
    validation's messages, the runner's events and artifacts, plans, status and bench alike),
    long enough to be masked by value (MIN_MASKED_LENGTH)."""
    found: set[str] = set()
    for path, value in _leaves(tree):
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str):
            if len(value.strip()) >= MIN_MASKED_LENGTH and is_secret_path(path, declarations, secret):
                found.add(value)
        elif isinstance(value, (int, float)) and len(str(value)) >= MIN_MASKED_LENGTH \
                and is_secret_path(path, declarations):
            found.add(str(value))  # a number only by its name: a --secrets file's port is no secret
    return sorted(found, key=len, reverse=True)


def printed_forms(secret: str) -> list[str]:
    """The forms in which a message may print `secret`: raw, stripped, each of its lines,
    inside repr() and json.dumps() quotes, URL-encoded; longest first."""
    forms = {secret, secret.strip(), repr(secret)[1:-1], json.dumps(secret)[1:-1],
             json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe=""), quote_plus(secret),
             quote(secret)}
    forms |= {line.strip() for line in secret.splitlines()}
    return sorted((f for f in forms if len(f) >= MIN_MASKED_LENGTH), key=len, reverse=True)


def all_forms(secrets: Iterable[str]) -> list[str]:
    """printed_forms of every secret, longest first."""
    return sorted({f for s in secrets for f in printed_forms(str(s))}, key=len, reverse=True)


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every printed form of every secret replaced by MASK."""
    for form in all_forms(secrets):
        text = text.replace(form, MASK)
    return text


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """`value` with every printed form of a secret masked, deeply (in place for containers)."""
    forms = all_forms(secrets)
    if not forms:
        return value

    def walk(v):
        if isinstance(v, str):
            for form in forms:
                v = v.replace(form, MASK)
            return v
        if isinstance(v, dict):
            for k in list(v):
                v[k] = walk(v[k])
            return v
        if isinstance(v, list):
            for i, item in enumerate(v):
                v[i] = walk(item)
            return v
        return v

    return walk(value)


def scrub_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """`data` (a file's bytes) with every printed form of a secret masked."""
    for form in all_forms(secrets):
        data = data.replace(form.encode(), MASK.encode())
    return data


#: user:password@ anywhere in a text (a URL, or what is left of one after a typo): the password part.
_CREDENTIALS_IN_TEXT = re.compile(r"([^\s/@:'\"\\]+):([^\s/@'\"\\]+)@(?=[^\s/@'\"\\])")


#: user:password@ in a URL's authority.
URL_CREDENTIALS = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s]*:[^/@\s]*@")


#: A URL whose user part is a token (scheme://TOKEN@host: GitHub, Hugging Face and GitLab take
#: a token there, without a password).
_TOKEN_USER = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s'\"\\]+)@(?=[^\s/@'\"\\])")
#: Prefixes of the hubs' and forges' tokens; any other user part this long is taken for one too.
TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "glpat-", "xoxb-", "xoxp-")
TOKEN_LENGTH = 20


#: A credential in a URL's query or fragment (?token=..., &access_token=..., &X-Amz-Signature=...,
#: ?sig=... of a shared access signature, ?key=... of an API key): a parameter whose name is, or ends
#: in (after '_', '-' or '.'), a word for a key, token, password or signature.
_QUERY_CREDENTIAL = re.compile(
    r"(?P<lead>[?&;#](?:[A-Za-z0-9]+[_.-])*"
    r"(?:(?:access|auth|private|refresh|id|session|api|bearer)?token|secret|password|passwd|pwd|api[_-]?key|"
    r"access[_-]?key|signature|credential|auth|authorization|sig|key|sas)=)(?P<value>[^&#\s'\"\\]+)", re.I)


def _token_user(user: str) -> bool:
    return user.startswith(TOKEN_PREFIXES) or len(user) >= TOKEN_LENGTH


def url_has_credentials(value: Any) -> bool:
    """Whether `value` is (or holds) a URL carrying a credential: a password (scheme://user:password@host)
    or a token as its user part (scheme://ghp_...@host), or in its query (?token=..., &sig=...),
    however mangled the rest of it is. A plain user name (ssh://git@host) is none."""
    return isinstance(value, str) and (bool(URL_CREDENTIALS.match(value.strip())) or (
        "://" in value and (bool(_CREDENTIALS_IN_TEXT.search(value)) or bool(_QUERY_CREDENTIAL.search(value))
                            or any(_token_user(m.group("user")) for m in _TOKEN_USER.finditer(value)))))


def redact_credentials(text: str) -> str:
    """`text` with the password of every user:password@ masked, wherever a URL carries one: a
    message never prints credentials, whatever variable (clear or secret) they came in."""
    text = _CREDENTIALS_IN_TEXT.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    if "://" in text:
        text = _QUERY_CREDENTIAL.sub(lambda m: f"{m.group('lead')}{MASK}", text)
    return _TOKEN_USER.sub(lambda m: f"{m.group('scheme')}{MASK}@" if _token_user(m.group("user")) else m.group(0),
                           text)
