"""Inventory files: checked before ansible-runner starts.

Ansible forgives a broken inventory file: a vars file that is a list, a group whose `hosts:`
is a list, a key given twice, an inventory with no host, a vault it cannot open each end as a
warning, a silently dropped value or a run that touches nothing and succeeds. Each is refused
here with the file (and line) and what is accepted, so the run stops with exit 4.

Pure: the standard library, PyYAML and vllm_fleet.secrets only. What needs Ansible itself (the hosts a limit
selects, decrypting a vault) is done by the caller (vllm_fleet.api) and handed in:
`vault_problems` takes a `decrypt` function, `no_hosts_problem` the counts it found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.secrets import SECRET_NAME

#: Variables Ansible reads before any host's variables (play keywords: playbooks/converge.yml):
#: given in an inventory file they would be ignored, so they are refused there.
EXTRA_VARS_ONLY = frozenset({"fleet_rollout_serial", "fleet_rollout_max_fail_percentage"})

VAULT_HEADER = "$ANSIBLE_VAULT"
#: How a run is given the vault password (vllm-fleet starts Ansible with this environment).
VAULT_PASSWORD_HOW = ("give the vault password with ANSIBLE_VAULT_PASSWORD_FILE=<file holding it> (or "
                      "ANSIBLE_VAULT_IDENTITY_LIST=<label>@<file>) in vllm-fleet's environment, or give those "
                      "values with --secrets FILE instead of the vault")
_GROUP_SECTIONS = ("hosts", "children", "vars")
_MERGE_TAG = "tag:yaml.org,2002:merge"


# ------------------------------------------------------------------ loading

@dataclass
class Parsed:
    """One file's YAML documents and what the loader noticed on the way."""

    docs: list[Any]
    #: (key, first line, second line) of each key given twice in one mapping.
    duplicates: list[tuple[Any, int, int]] = field(default_factory=list)
    #: (line, ciphertext) of each `!vault` value.
    vaults: list[tuple[int, str]] = field(default_factory=list)
    #: id(constructed dict or list) -> (the object, its node): lines of keys and values.
    nodes: dict[int, tuple[Any, yaml.Node]] = field(default_factory=dict)

    def line(self, obj: Any, key: Any = None) -> int | None:
        """The line (1-based) of a mapping or list, or of `key` in a mapping (its last occurrence)."""
        entry = self.nodes.get(id(obj))
        if entry is None or entry[0] is not obj:
            return None
        node = entry[1]
        if key is None:
            return node.start_mark.line + 1
        found = None
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else []:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG and key_node.value == str(key):
                found = key_node.start_mark.line + 1
        return found


#: libyaml's scanner and parser where PyYAML was built with it (its wheels are): the constructor
#: hooks below are Python's either way, and every inventory file is read on every run.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InventoryLoader(_BASE_LOADER):
    """PyYAML's safe loader that accepts Ansible's own tags (!vault, !unsafe, ...) as plain values
    (a `!vault` value is noted with its line), notes each key given twice in one mapping, and
    the node of every mapping and list (for lines in messages). A key brought by a YAML merge
    (`<<: *anchor`) and given again beside it is an override, not a duplicate."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[tuple[Any, int, int]] = []
        self.vaults: list[tuple[int, str]] = []
        self.nodes: dict[int, tuple[Any, yaml.Node]] = {}
        self._checked: set[int] = set()

    def flatten_mapping(self, node):
        # Called for every mapping before its merges are folded in (which rewrites node.value):
        # the first call sees the mapping's own keys only.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    self.duplicates.append((key, seen[key].start_mark.line + 1, key_node.start_mark.line + 1))
                else:
                    seen[key] = key_node
        super().flatten_mapping(node)

    def construct_object(self, node, deep=False):
        obj = super().construct_object(node, deep=deep)
        if isinstance(obj, (dict, list)):
            self.nodes[id(obj)] = (obj, node)
        return obj


def _ansible_tag(loader: InventoryLoader, suffix: str, node: yaml.Node):
    if isinstance(node, yaml.ScalarNode):
        if suffix == "vault":
            loader.vaults.append((node.start_mark.line + 1, loader.construct_scalar(node)))
        return None
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_sequence(node, deep=True)


InventoryLoader.add_multi_constructor("!", _ansible_tag)


@lru_cache(maxsize=512)
def load(text: str) -> Parsed:
    """Every YAML document of `text` (yaml.YAMLError when it is no YAML). The file checks, the
    secrets by reference and the precedence warnings read each file: one parse per text and
    process (callers read the result, never change it)."""
    loader = InventoryLoader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    finally:
        loader.dispose()
    return Parsed(docs=docs, duplicates=loader.duplicates, vaults=loader.vaults, nodes=loader.nodes)


# ------------------------------------------------------------------ which files

def base_dir(inventory: Path) -> Path:
    return inventory if inventory.is_dir() else inventory.parent


def inventory_files(inventory: Path) -> list[Path]:
    """The YAML files Ansible reads for an inventory: the file (or a directory's files) and group_vars/host_vars."""
    base = base_dir(inventory)
    files = [inventory] if inventory.is_file() else sorted(p for p in inventory.iterdir() if p.is_file())
    for sub in ("group_vars", "host_vars"):
        if (base / sub).is_dir():
            files += sorted(p for p in (base / sub).rglob("*") if p.is_file())
    # Ansible's YAML inventory and vars plugins read these; others (ini, scripts, .j2) are not ours to judge.
    return [p for p in files if p.suffix in (".yml", ".yaml", ".json", "") and not p.name.startswith(".")]


def is_vars_file(path: Path, inventory: Path) -> bool:
    """A file of group_vars/ or host_vars/ (not an inventory source)."""
    rel = path.relative_to(base_dir(inventory))
    return rel.parts[0] in ("group_vars", "host_vars")


def _where(rel: str, line: int | None) -> str:
    return f"inventory file {rel}" + (f", line {line}" if line else "")


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def _keys(value: Any) -> set[str]:
    """Every mapping key at any depth of a parsed YAML document."""
    if isinstance(value, dict):
        return {str(k) for k in value} | set().union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


# ------------------------------------------------------------------ one file

_INI_SECTION = re.compile(r"^\s*\[[^\]\s]+\]\s*(?:[#;].*)?$", re.M)
_INI_HOST_LINE = re.compile(r"^\s*[A-Za-z0-9_.\[\]:-]+(\s+[A-Za-z_][A-Za-z0-9_]*=\S*)+\s*$", re.M)


def is_ini(text: str) -> bool:
    """Whether a file without extension is an INI inventory: a `[group]` header, or a host line
    with key=value variables (YAML reads neither as a mapping)."""
    return bool(_INI_SECTION.search(text) or _INI_HOST_LINE.search(text))


def text_problems(rel: str, text: str, *, vars_file: bool, source_suffix: str = ".yml", vaulted: bool = False) -> list[str]:
    """Problems of one inventory file's text (`rel`: its name in messages): YAML syntax, keys given
    twice, a vars file that is not a mapping, an inventory source of the wrong shape, rollout
    settings. Vault-encrypted text is not judged (vault_problems decrypts it)."""
    if text.lstrip().startswith(VAULT_HEADER):
        return []
    if not vars_file and not source_suffix and is_ini(text):
        return []  # an INI inventory (Ansible's ini plugin reads it): not YAML, not ours to judge
    try:
        parsed = load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context = getattr(exc, "context", None)
        return [f"inventory file {rel}{where}: YAML syntax error: {what}" + (f" ({context})" if context else "")
                + "; nothing was run"]
    problems = [f"{_where(rel, second)}: key {key!r} is given twice in one mapping (lines {first} and {second}); "
                "Ansible keeps the last and drops the other (a mere warning); accepted: each key once per "
                "mapping (a key brought by a YAML merge `<<: *anchor` may be given again beside it)"
                for key, first, second in parsed.duplicates]
    docs = [d for d in parsed.docs if d is not None]
    if len(parsed.docs) > 1:
        problems.append(f"inventory file {rel}: holds {len(parsed.docs)} YAML documents (separated by ---); "
                        "Ansible reads a file as one document; accepted: one document per file")
    elif vars_file:
        problems += _vars_file_problems(rel, docs[0] if docs else None, parsed)
    elif docs:
        problems += _source_problems(rel, docs[0], parsed, source_suffix)
    for doc in docs if not vaulted else []:  # a vault-encrypted file holds its secrets as it should
        problems += _clear_secret_problems(rel, doc, parsed)
    for name in sorted(_keys(docs) & EXTRA_VARS_ONLY):
        problems.append(f"inventory file {rel} sets {name}: a rollout's batches are decided "
                        "before any inventory variable is read, so there it would be ignored; give it on the "
                        f"command line (vllm-fleet rollout --serial/--max-fail-percentage, or -e {name}=...)")
    return problems


def _clear_secret_problems(rel: str, doc: Any, parsed: Parsed) -> list[str]:
    """A secret (a key named like one: vllm_fleet.secrets.SECRET_NAME) written in clear in an
    inventory file, where every reader of the repository and every plan sees it. Accepted: a
    `!vault` value, a vault-encrypted file, a template naming another variable (`{{ vault_x }}`),
    or the secret given at run time (--secrets FILE, the API's secrets=)."""
    problems: list[str] = []

    def clear(value: Any) -> bool:
        if isinstance(value, dict):
            return any(clear(v) for v in value.values())
        if isinstance(value, list):
            return any(clear(v) for v in value)
        return isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip() != "" \
            and "{{" not in str(value)

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{key}" if where else str(key)
                if SECRET_NAME.search(str(key)) and clear(item):
                    problems.append(f"{_where(rel, parsed.line(value, key))}: {name} is a secret written in clear "
                                    f"(value not shown); accepted: its value as `!vault` (ansible-vault "
                                    "encrypt_string), the file vault-encrypted, `{{ another_variable }}` naming a "
                                    "vaulted one, or the secret given at run time (vllm-fleet --secrets FILE, the "
                                    "API's secrets=)")
                else:
                    walk(item, name)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")

    walk(doc, "")
    return problems


def _vars_file_problems(rel: str, doc: Any, parsed: Parsed) -> list[str]:
    if doc is None or isinstance(doc, dict):
        return []
    return [(f"{_where(rel, parsed.line(doc))}: holds {_kind(doc)}; a vars file (group_vars/, host_vars/) must be a "
            "mapping of variable names to values (name: value, one per line), or empty")]


def _source_problems(rel: str, doc: Any, parsed: Parsed, suffix: str) -> list[str]:
    """The shape Ansible's YAML inventory plugin accepts: group -> {hosts, children, vars}."""
    if not isinstance(doc, dict):
        if not suffix:  # a file without extension may be an INI inventory that YAML also reads
            return []
        return [(f"{_where(rel, parsed.line(doc))}: holds {_kind(doc)}; an inventory file must be a mapping of group "
                "names to groups (all: {children: {fleet: {children: {nvidia-nodes: {hosts: {node-01: "
                "{ansible_host: ...}}}}}}})")]
    if "plugin" in doc:
        return []  # an inventory plugin's configuration, not a YAML inventory
    problems: list[str] = []
    for group, body in doc.items():
        _group_problems(rel, str(group), body, parsed, doc, problems)
    return problems


def _group_problems(rel: str, group: str, body: Any, parsed: Parsed, parent: dict, problems: list[str]) -> None:
    accepted = "accepted: a mapping with hosts:, children: and vars: (each a mapping, or empty)"
    if body is None:
        return
    if not isinstance(body, dict):
        problems.append(f"{_where(rel, parsed.line(parent, group))}: group {group} is {_kind(body)}; Ansible would "
                        f"skip the group and its hosts; {accepted}")
        return
    for key, value in body.items():
        line = parsed.line(body, key)
        if key not in _GROUP_SECTIONS:
            problems.append(f"{_where(rel, line)}: group {group} has the key {key!r}, which Ansible ignores (with "
                            f"what is under it); {accepted}")
            continue
        if value is None or isinstance(value, str):  # `hosts: node-01` is one host, as in Ansible
            continue
        if not isinstance(value, dict):
            what = {"hosts": "host names to their variables", "children": "group names to groups",
                    "vars": "variable names to values"}[key]
            problems.append(f"{_where(rel, line)}: group {group}: {key}: is {_kind(value)}; Ansible would drop this "
                            f"file's groups and hosts; accepted: a mapping of {what} (e.g. {key}: {{name: ...}})")
            continue
        if key == "children":
            for child, child_body in value.items():
                _group_problems(rel, str(child), child_body, parsed, value, problems)
        elif key == "hosts":
            for host, host_vars in value.items():
                if not isinstance(host, str):
                    problems.append(f"{_where(rel, parsed.line(value, host))}: group {group}: host {host!r} is "
                                    f"{_kind(host)}; accepted: a host name (quote a number: '{host}')")
                elif host_vars is not None and not isinstance(host_vars, dict):
                    problems.append(f"{_where(rel, parsed.line(value, host))}: group {group}: host {host}'s "
                                    f"variables are {_kind(host_vars)}; accepted: a mapping of variable names to "
                                    "values, or nothing")


def file_problems(inventory: str | os.PathLike) -> list[str]:
    """Problems of every file of the inventory, each with its file (and line); [] when there are none.
    Neither decrypts a vault nor asks which hosts a run has (vault_problems, no_hosts_problem)."""
    root = Path(inventory)
    base = base_dir(root)
    problems: list[str] = []
    for path in inventory_files(root):
        rel = str(path.relative_to(base))
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"inventory file {rel}: cannot be read: {exc}")
            continue
        problems += text_problems(rel, text, vars_file=is_vars_file(path, root), source_suffix=path.suffix)
    return problems + secret_reference_problems(root)


# ------------------------------------------------------------------ secrets by reference

TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.S)
IDENTIFIER = re.compile(r"(?<![.\w'\"])([A-Za-z_][A-Za-z0-9_]*)")


def _clear_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip() != "" \
        and "{{" not in str(value)


def _variables(doc: Any, vars_file: bool):
    """(name, value, mapping) of every variable a parsed inventory file defines: a vars file's
    top-level keys, an inventory source's hosts' and groups' `vars:`."""
    if not isinstance(doc, dict):
        return
    if vars_file:
        for k, v in doc.items():
            yield str(k), v, doc
        return
    for body in doc.values():
        if not isinstance(body, dict):
            continue
        for section in ("vars", "hosts"):
            inner = body.get(section)
            if not isinstance(inner, dict):
                continue
            if section == "vars":
                for k, v in inner.items():
                    yield str(k), v, inner
            else:
                for host_vars in inner.values():
                    if isinstance(host_vars, dict):
                        for k, v in host_vars.items():
                            yield str(k), v, host_vars
        if isinstance(body.get("children"), dict):
            yield from _variables(body["children"], False)


def secret_reference_problems(inventory: str | os.PathLike) -> list[str]:
    """A secret that names another variable (`fleet_serve_api_key: "{{ nv_serving }}"`) is judged by
    what it names: the reference is the documented way to a vaulted value, and no better than the
    value when that one is written in clear in the inventory. Followed through references of
    references; a name the inventory's files do not define (given at run time: --secrets, -e) is
    not the files' to judge."""
    root = Path(inventory)
    base = base_dir(root)
    defined: dict[str, tuple[str, int | None, Any]] = {}
    secrets: list[tuple[str, int | None, str, str]] = []
    for path in inventory_files(root):
        try:
            text = path.read_text()
            if text.lstrip().startswith(VAULT_HEADER):
                continue
            parsed = load(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # file_problems says so
        rel = str(path.relative_to(base))
        for doc in (d for d in parsed.docs if d is not None):
            for name, value, mapping in _variables(doc, is_vars_file(path, root)):
                defined.setdefault(name, (rel, parsed.line(mapping, name), value))
                for where, leaf in _secret_templates(name, value, bool(SECRET_NAME.search(name))):
                    secrets.append((rel, parsed.line(mapping, name), where, leaf))
    problems = []
    for rel, line, where, template in secrets:
        clear = _clear_referent(template, defined, set())
        if clear:
            name, (other, other_line, _value) = clear, defined[clear]
            problems.append(f"{_where(rel, line)}: {where} is a secret that names {name}, which is written in clear "
                            f"at {_where(other, other_line)} (value not shown); accepted: {name} as `!vault` "
                            "(ansible-vault encrypt_string), in a vault-encrypted file, or given at run time "
                            "(vllm-fleet --secrets FILE, the API's secrets=)")
    return problems


def _secret_templates(where: str, value: Any, inside: bool):
    """(path, template) of every template string under a secret's name in `value`."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _secret_templates(f"{where}.{k}", v, inside or bool(SECRET_NAME.search(str(k))))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _secret_templates(f"{where}[{i}]", v, inside)
    elif inside and isinstance(value, str) and "{{" in value:
        yield where, value


def _clear_referent(template: str, defined: dict, seen: set[str]) -> str | None:
    """The first variable that `template` names, directly or through others, written in clear."""
    for expression in TEMPLATE.findall(template):
        for name in IDENTIFIER.findall(expression):
            if name in seen or name not in defined:
                continue
            seen.add(name)
            value = defined[name][2]
            if _clear_scalar(value):
                return name
            if isinstance(value, str) and "{{" in value:
                deeper = _clear_referent(value, defined, seen)
                if deeper:
                    return deeper
    return None


# ------------------------------------------------------------------ vault

def vault_payloads(inventory: str | os.PathLike) -> list[tuple[Path, int | None, str]]:
    """Every vault-encrypted thing of the inventory: (file, None, text) for an encrypted file,
    (file, line, ciphertext) for a `!vault` value. Files that are no YAML are left out
    (file_problems reports them)."""
    found: list[tuple[Path, int | None, str]] = []
    for path in inventory_files(Path(inventory)):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if text.lstrip().startswith(VAULT_HEADER):
            found.append((path, None, text))
            continue
        if "!vault" not in text:
            continue
        try:
            found += [(path, line, cipher) for line, cipher in load(text).vaults]
        except yaml.YAMLError:
            continue
    return found


class VaultError(Exception):
    """Raised by a `decrypt` function: no password was given, or none of those given opens it."""

    def __init__(self, message: str, no_password: bool = False):
        super().__init__(message)
        self.no_password = no_password


def vault_problems(inventory: str | os.PathLike, decrypt: Callable[[str], str]) -> list[str]:
    """Each vault-encrypted file or `!vault` value of the inventory that `decrypt` cannot open
    (it raises VaultError), and the problems of each decrypted file's text (as file_problems;
    no secret value is quoted)."""
    root = Path(inventory)
    base = base_dir(root)
    problems: list[str] = []
    for path, line, cipher in vault_payloads(root):
        rel = str(path.relative_to(base))
        what = "is vault-encrypted" if line is None else "has a !vault value"
        try:
            plain = decrypt(cipher)
        except VaultError as exc:
            reason = ("but no vault password was given" if exc.no_password
                      else f"but the vault password(s) given do not open it ({exc})")
            problems.append(f"{_where(rel, line)}: {what} {reason}, so Ansible cannot read it and the run would "
                            f"fail on every host; {VAULT_PASSWORD_HOW}")
            continue
        if line is None:
            problems += [p.replace(f"inventory file {rel}", f"inventory file {rel} (decrypted)", 1)
                         for p in text_problems(rel, plain, vars_file=is_vars_file(path, root), vaulted=True,
                                                source_suffix=path.suffix)]
    return problems


# ------------------------------------------------------------------ hosts of the run

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def yaml_groups(inventory: str | os.PathLike) -> dict[str, set[str]]:
    """Each group of the inventory's YAML inventory files -> every host in it or its children
    (host names as written: a range such as node-[01:04] is one entry). Other sources (INI,
    scripts, plugins) are not read: a host found here is in the inventory, one missing may not be."""
    root = Path(inventory)
    direct: dict[str, set[str]] = {}
    children: dict[str, set[str]] = {}

    def walk(group: str, body: Any) -> None:
        direct.setdefault(group, set())
        children.setdefault(group, set())
        if not isinstance(body, dict):
            return
        hosts = body.get("hosts")
        if isinstance(hosts, str):
            hosts = {hosts: None}
        if isinstance(hosts, dict):
            direct[group] |= {h for h in hosts if isinstance(h, str)}
        kids = body.get("children")
        if isinstance(kids, str):
            kids = {kids: None}
        if isinstance(kids, dict):
            for child, child_body in kids.items():
                children[group].add(str(child))
                walk(str(child), child_body)

    for path in inventory_files(root):
        if is_vars_file(path, root) or path.suffix not in (".yml", ".yaml", ".json"):
            continue
        try:
            docs = load(path.read_text()).docs
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if len(docs) == 1 and isinstance(docs[0], dict) and "plugin" not in docs[0]:
            for group, body in docs[0].items():
                walk(str(group), body)

    def closure(group: str, seen: set[str]) -> set[str]:
        seen.add(group)
        found = set(direct.get(group, ()))
        for child in children.get(group, ()):
            if child not in seen:
                found |= closure(child, seen)
        return found

    return {group: closure(group, set()) for group in direct}


def surely_has_hosts(groups: dict[str, set[str]], pattern: str, limit: str | None) -> bool:
    """True when `groups` (yaml_groups) alone show that a run on `pattern` (groups joined by
    ":") with `limit` has a host; False means "ask Ansible" (a limit of wildcards, ranges,
    exclusions, names these files do not define), not "no host"."""
    run = set().union(*(groups.get(g, set()) for g in pattern.split(":")))
    if not limit:
        return bool(run)
    names = [n.strip() for n in re.split(r"[,:]", limit) if n.strip()]
    hosts = set().union(*groups.values()) if groups else set()
    if not names or not all(_PLAIN_NAME.match(n) and (n in groups or n in hosts) for n in names):
        return False
    return bool(run & set().union(*(groups.get(n, set()) | ({n} if n in hosts else set()) for n in names)))



def surely_no_hosts(groups: dict[str, set[str]], pattern: str, limit: str | None, inventory: str) -> str | None:
    """no_hosts_problem's sentence when `groups` (every group -> its hosts, as Ansible's `groups`)
    show that a run on `pattern` with `limit` has no host; None when it has one, or when the limit
    is a pattern only Ansible can read (wildcards, ranges, exclusions)."""
    every = groups.get("all", set()) | set().union(*groups.values()) if groups else set()
    run = set().union(*(groups.get(g, set()) for g in pattern.split(":")))
    if limit:
        names = [n.strip() for n in re.split(r"[,:]", limit) if n.strip()]
        if not names or not all(_PLAIN_NAME.match(n) for n in names):
            return None
        chosen = set().union(*(groups.get(n, set()) | ({n} if n in every else set()) for n in names))
        if run & chosen:
            return None
    elif run:
        return None
    return no_hosts_problem(inventory, pattern, limit, len(run), len(every))


def no_inventory_problem(sources: list[str], hosts: int) -> str | None:
    """The message for a run given no inventory: none of its `sources` exists (ansible-playbook
    without -i reads /etc/ansible/hosts, and vllm-fleet's ansible.cfg names none on purpose) and
    it has no host; None otherwise."""
    if hosts or any(Path(s).exists() for s in sources):
        return None
    named = ", ".join(sources) or "none"
    return (f"no inventory was given (sources read: {named}, which do not exist), so this run would act on "
            "nothing; name the inventory to act on: ansible-playbook -i inventories/site site.yml "
            "(the lab's, after `vllm-fleet lab up`: -i inventories/lab)")


def no_hosts_problem(inventory: str, pattern: str, limit: str | None, in_groups: int, in_inventory: int) -> str:
    """The message for a run that would have no host: `in_groups` hosts of the inventory are in
    `pattern`'s groups (before the limit), `in_inventory` hosts in all."""
    groups = " or ".join(", ".join(pattern.split(":")).rsplit(", ", 1)) if ":" in pattern else pattern
    if in_groups and limit:
        why = (f"the limit matches none of its {in_groups} host(s) in the group(s) {groups}; "
               "accepted: a limit naming those hosts or their groups (as ansible-playbook --limit)")
    else:
        why = (f"it has no host in the group(s) {groups}"
               + (f" (its {in_inventory} host(s) are in other groups)" if in_inventory else
                  " (no host at all: is hosts.yml empty, or a group's hosts: missing?)")
               + "; accepted: hosts under all.children.fleet (each vendor's <vendor>-nodes group)"
               + (", router or monitoring" if "router" in pattern else ""))
    run = f"this run (-l/--limit {limit!r})" if limit else "this run"
    return f"no host of the inventory {inventory} is in {run}, so it would change nothing and succeed: {why}"


# ------------------------------------------------------------------ after a run that stopped at once

#: What Ansible prints when it meets a vault it cannot open (ansible-core 2.19).
VAULT_ERRORS = ("Attempting to decrypt but no vault secrets found", "Decryption failed",
                "A vault password or secret must be specified to decrypt", "vault password file")


def startup_errors(stdout: str) -> list[str]:
    """Ansible's error lines in a run's output ("[ERROR]: ..." or "ERROR! ..."), each on one line."""
    errors = []
    for line in stdout.splitlines():
        text = line.strip()
        for prefix in ("[ERROR]:", "ERROR!"):
            if text.startswith(prefix):
                errors.append(" ".join(text[len(prefix):].split()))
    return errors


def startup_vault_problems(stdout: str) -> list[str]:
    """The problems of a run that stopped before its first task because Ansible could not open a
    vault (a vault that the checks before the run did not see: vault_problems); [] otherwise."""
    return [f"the run stopped before its first task: Ansible could not open a vault of the inventory ({error}); "
            f"{VAULT_PASSWORD_HOW}" for error in startup_errors(stdout) if any(v in error for v in VAULT_ERRORS)]
