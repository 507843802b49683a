"""Precedence surprises: a value the inventory sets that never reaches a host, or that nothing reads.

Ansible merges a host's variables by fixed rules (group depth, then group name, then the
host's own; group_vars/ and host_vars/ over an inventory file's `vars:`; files of one vars
directory in name order; mappings replaced whole, never merged) and says nothing when one
definition hides another. Each case below is reported as a warning naming both places
(`--strict`, or validate_inventory_strict, refuses them):

- one vars directory's two files set the same variable (the later file by name wins);
- an inventory file's `vars:` (or a host's variables there) and group_vars/ (host_vars/) set
  the same variable for the same group (host): the file under group_vars/ wins;
- a host's groups at the same depth set the same variable differently: their names decide;
- a more specific group's mapping replaces its parent's whole, dropping keys the parent set;
- a host defined twice, with the same variable set differently in the two places;
- a vars file or directory whose name is no group or host of the inventory;
- a variable nothing reads, a letter or two away from a name vllm-fleet reads (one with vllm-fleet's
  prefixes, fleet_* or a role's, is refused instead: validation/roles.py);
- a host with an accelerator that is not in the group `fleet`, so no play converges it.

Read from the inventory's YAML files (the same loader as vllm_fleet.validation.files); INI and
script sources are not analysed. Pure: PyYAML and the package's own modules.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_fleet.validation.files import IDENTIFIER, TEMPLATE, base_dir, inventory_files, is_vars_file, load

#: Ansible's implicit groups.
IMPLICIT_GROUPS = ("all", "ungrouped")


@dataclass(frozen=True)
class Place:
    """Where a value is set: `file` (relative to the inventory) and line."""

    file: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.file}" + (f":{self.line}" if self.line else "")


@dataclass
class Tree:
    """What the inventory's YAML files declare."""

    parents: dict[str, set[str]]
    #: group -> variable -> (value, place) from inventory files' `vars:`
    group_file_vars: dict[str, dict[str, tuple[Any, Place]]]
    #: host -> [(group, {variable: (value, place)})]: each place the host is written, with its variables
    host_entries: dict[str, list[tuple[str, dict[str, tuple[Any, Place]]]]]
    #: group or host name -> variable -> [(value, place)] from group_vars/ (host_vars/), in Ansible's order
    group_vars: dict[str, dict[str, list[tuple[Any, Place]]]]
    host_vars: dict[str, dict[str, list[tuple[Any, Place]]]]
    #: vars files or directories whose name is no group or host: (place, name, kind)
    unmatched: list[tuple[Place, str, str]]
    #: vars files or directories Ansible never reads, another entry of the same name being read instead:
    #: (place, the entry read)
    shadowed: list[tuple[Place, str]] = field(default_factory=list)


def _mapping_vars(mapping: Any, parsed, rel: str) -> dict[str, tuple[Any, Place]]:
    if not isinstance(mapping, dict):
        return {}
    return {str(k): (v, Place(rel, parsed.line(mapping, k))) for k, v in mapping.items()}


def read_tree(inventory: str | os.PathLike) -> Tree:
    root = Path(inventory)
    base = base_dir(root)
    tree = Tree(parents={}, group_file_vars={}, host_entries={}, group_vars={}, host_vars={}, unmatched=[])
    vars_files: list[tuple[Path, Any, Any]] = []
    for path in inventory_files(root):
        try:
            text = path.read_text()
            parsed = load(text) if not text.lstrip().startswith("$ANSIBLE_VAULT") else None
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # file_problems says so
        rel = str(path.relative_to(base))
        docs = [d for d in parsed.docs if d is not None] if parsed else []
        if is_vars_file(path, root):
            vars_files.append((path, docs[0] if len(docs) == 1 else None, parsed))
        elif path.suffix in (".yml", ".yaml", ".json") and len(docs) == 1 and isinstance(docs[0], dict) \
                and "plugin" not in docs[0]:
            for group, body in docs[0].items():
                _walk(tree, str(group), body, None, parsed, rel)
    tree.parents.setdefault("all", set())
    for group in list(tree.parents):
        if group != "all" and not tree.parents[group]:
            tree.parents[group].add("all")
    hosts = set(tree.host_entries)
    read_entries = _read_entries(base)
    for path, doc, parsed in vars_files:
        rel_parts = path.relative_to(base).parts
        kind, name = rel_parts[0], rel_parts[1]
        name = name if len(rel_parts) > 2 else Path(name).stem if Path(name).suffix in VARS_EXTENSIONS \
            else name
        entry = str(Path(*rel_parts[:2]))
        if read_entries.get((kind, name), entry) != entry:
            shadowed = (Place(entry, None), f"{kind}/{read_entries[(kind, name)].split('/', 1)[1]}")
            if shadowed not in tree.shadowed:
                tree.shadowed.append(shadowed)
            continue
        known = set(tree.parents) | set(IMPLICIT_GROUPS) if kind == "group_vars" else hosts
        place = Place(str(Path(*rel_parts[:2])), None)
        if name not in known:
            if (place, name, kind) not in tree.unmatched:
                tree.unmatched.append((place, name, kind))
            continue
        target = tree.group_vars if kind == "group_vars" else tree.host_vars
        rel = str(path.relative_to(base))
        for var, (value, where) in _mapping_vars(doc, parsed, rel).items():
            target.setdefault(name, {}).setdefault(var, []).append((value, where))
    return tree


#: The names Ansible's host_group_vars plugin tries for a group or host, in its order
#: (DataLoader.find_vars_files: the name itself, a file or a directory, then with each of
#: YAML_FILENAME_EXTENSIONS); it reads the first that exists and no other.
VARS_EXTENSIONS = (".yml", ".yaml", ".json")


def _read_entries(base: Path) -> dict[tuple[str, str], str]:
    """(group_vars|host_vars, name) -> the entry Ansible reads for it ("group_vars/all", a directory,
    or "group_vars/all.yml"), where the inventory has more than one entry of that name."""
    out: dict[tuple[str, str], str] = {}
    for kind in ("group_vars", "host_vars"):
        folder = base / kind
        if not folder.is_dir():
            continue
        names: dict[str, list[str]] = {}
        for entry in sorted(folder.iterdir()):
            stem = entry.stem if entry.is_file() and entry.suffix in VARS_EXTENSIONS else entry.name
            names.setdefault(stem, []).append(entry.name)
        for name, entries in names.items():
            if len(entries) > 1:
                first = next(f"{name}{ext}" for ext in ("", *VARS_EXTENSIONS) if f"{name}{ext}" in entries)
                out[(kind, name)] = f"{kind}/{first}"
    return out


def _walk(tree: Tree, group: str, body: Any, parent: str | None, parsed, rel: str) -> None:
    tree.parents.setdefault(group, set())
    if parent:
        tree.parents[group].add(parent)
    if not isinstance(body, dict):
        return
    own = _mapping_vars(body.get("vars"), parsed, rel)
    if own:
        tree.group_file_vars.setdefault(group, {}).update(own)
    hosts = body.get("hosts")
    if isinstance(hosts, dict):
        for host, host_vars in hosts.items():
            if isinstance(host, str):
                tree.host_entries.setdefault(host, []).append((group, _mapping_vars(host_vars, parsed, rel)))
    children = body.get("children")
    if isinstance(children, dict):
        for child, child_body in children.items():
            _walk(tree, str(child), child_body, group, parsed, rel)


def _ancestors(tree: Tree, group: str, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    for parent in tree.parents.get(group, ()):
        if parent not in seen:
            seen.add(parent)
            _ancestors(tree, parent, seen)
    return seen


def _depth(tree: Tree, group: str, memo: dict[str, int]) -> int:
    """Ansible's group depth: all is 0, a group one more than its deepest parent."""
    if group not in memo:
        memo[group] = 0  # a cycle stops here
        parents = tree.parents.get(group) or set()
        memo[group] = 0 if group == "all" else 1 + max((_depth(tree, p, memo) for p in parents), default=0)
    return memo[group]


def _last(values: list[tuple[Any, Place]]) -> tuple[Any, Place]:
    return values[-1]


def _group_value(tree: Tree, group: str, var: str) -> tuple[Any, Place] | None:
    """The value a group gives `var` (group_vars/ over the inventory file's `vars:`)."""
    files = tree.group_vars.get(group, {}).get(var)
    if files:
        return _last(files)
    return tree.group_file_vars.get(group, {}).get(var)


def precedence_warnings(inventory: str | os.PathLike, known: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """Warnings, each naming both places; `known`: the variable names vllm-fleet reads,
    `prefixes`: the names' prefixes that are vllm-fleet's (fleet_, each role's)."""
    tree = read_tree(inventory)
    out: list[str] = []
    for place, name, kind in tree.unmatched:
        names = sorted(set(tree.parents) | set(IMPLICIT_GROUPS)) if kind == "group_vars" else sorted(tree.host_entries)
        close = difflib.get_close_matches(name, names, n=1)
        out.append(f"{place}: names no {'group' if kind == 'group_vars' else 'host'} of the inventory, so Ansible "
                   f"gives its variables to no host" + (f" (did you mean {close[0]!r}?)" if close else ""))
    for place, read in tree.shadowed:
        out.append(f"{place} is never read: Ansible reads {read} for that name and no other file or directory "
                   "of it (the name itself first, then .yml, .yaml, .json); move its variables there")
    for owners, label in ((tree.group_vars, "group"), (tree.host_vars, "host")):
        for owner, variables in sorted(owners.items()):
            for var, values in sorted(variables.items()):
                if len(values) > 1 and any(v != values[-1][0] for v, _ in values[:-1]):
                    out.append(f"{var} is set for {label} {owner} in {values[-2][1]} and again in {values[-1][1]}; "
                               f"Ansible keeps {values[-1][1].file}'s (files of one directory go in name order)")
    for group, variables in sorted(tree.group_file_vars.items()):
        for var, (value, place) in sorted(variables.items()):
            files = tree.group_vars.get(group, {}).get(var)
            if files and _last(files)[0] != value:
                out.append(f"{var} of group {group} is set in {place} and in {_last(files)[1]}; the group_vars/ file "
                           f"wins, so the value in {place.file} never reaches a host")
    for host, entries in sorted(tree.host_entries.items()):
        inline: dict[str, tuple[Any, Place]] = {}
        for _group, variables in entries:
            for var, (value, place) in variables.items():
                if var in inline and inline[var][0] != value:
                    out.append(f"host {host} is defined twice, with {var} set in {inline[var][1]} and in {place}; "
                               "Ansible keeps the one it reads last")
                inline[var] = (value, place)
        for var, (value, place) in sorted(inline.items()):
            files = tree.host_vars.get(host, {}).get(var)
            if files and _last(files)[0] != value:
                out.append(f"{var} of host {host} is set in {place} and in {_last(files)[1]}; the host_vars/ file "
                           f"wins, so the value in {place.file} never reaches the host")
    out += _group_order_warnings(tree)
    out += _unread_warnings(tree, known, prefixes)
    out += _outside_the_play(tree)
    return list(dict.fromkeys(out))


def _group_order_warnings(tree: Tree) -> list[str]:
    """Per host, each variable its groups set, in Ansible's order (VARIABLE_PRECEDENCE): the inventory
    files' `vars:` of all, then of its other groups by depth and name; then group_vars/all, then
    group_vars/ of its other groups by depth and name. A later setter with another value hides an
    earlier one: across the two kinds whatever the groups' depth; within one kind, groups of one
    depth by their names, and a mapping replaces a shallower group's whole."""
    out = []
    memo: dict[str, int] = {}
    for host, entries in sorted(tree.host_entries.items()):
        groups = {g for g, _ in entries}
        groups |= set().union(*(_ancestors(tree, g) for g in groups)) if groups else set()
        groups |= {"all"}
        ordered = sorted(groups, key=lambda g: (_depth(tree, g, memo), g))
        variables = sorted({v for g in ordered for v in (tree.group_vars.get(g, {}) | tree.group_file_vars.get(g, {}))})
        for var in variables:
            setters = [(g, "file", tree.group_file_vars[g][var]) for g in ordered
                       if var in tree.group_file_vars.get(g, {})]
            setters += [(g, "dir", _last(tree.group_vars[g][var])) for g in ordered if tree.group_vars.get(g, {}).get(var)]
            for (g1, k1, (v1, p1)), (g2, k2, (v2, p2)) in zip(setters, setters[1:], strict=False):
                if v1 == v2 or g1 == g2:
                    continue  # one group's two kinds: precedence_warnings names them
                if k1 != k2:
                    out.append(f"{var} of group {g1} ({p1}) never reaches host {host}: group {g2} sets it in {p2}, and "
                               "Ansible puts every group_vars/ file over an inventory file's `vars:`, whatever the "
                               "groups' depth (set it in group_vars/ of one of them)")
                elif _depth(tree, g1, memo) == _depth(tree, g2, memo):
                    out.append(f"{var} is set differently by groups {g1} ({p1}) and {g2} ({p2}), both of host {host} "
                               f"at the same depth; Ansible takes {g2}'s because its name sorts later (set it in one "
                               "group, or give one ansible_group_priority)")
                elif isinstance(v1, dict) and isinstance(v2, dict) and set(v1) - set(v2):
                    lost = ", ".join(sorted(map(str, set(v1) - set(v2))))
                    out.append(f"{var} of group {g2} ({p2}) replaces group {g1}'s ({p1}) whole for host {host}: "
                               f"Ansible does not merge mappings, so {lost} of {g1}'s never reach it")
    return out


def _unread_warnings(tree: Tree, known: set[str], prefixes: tuple[str, ...]) -> list[str]:
    places: dict[str, Place] = {}
    for variables in list(tree.group_file_vars.values()):
        for var, (_v, place) in variables.items():
            places.setdefault(var, place)
    for entries in tree.host_entries.values():
        for _g, variables in entries:
            for var, (_v, place) in variables.items():
                places.setdefault(var, place)
    for owners in (tree.group_vars, tree.host_vars):
        for variables in owners.values():
            for var, values in variables.items():
                places.setdefault(var, values[0][1])
    referenced = set()
    for value in _every_value(tree):
        for expression in TEMPLATE.findall(value):
            referenced |= set(IDENTIFIER.findall(expression))
    out = []
    for var, place in sorted(places.items()):
        # ansible_* are Ansible's own (connection, become, group priority, ...); a name another
        # value's template reads is read.
        if var in known or var in referenced or var.startswith("ansible_"):
            continue
        if var.startswith(prefixes):
            continue  # named like a role's: validation refuses it, naming the role (roles.py)
        close = difflib.get_close_matches(var, sorted(known), n=1, cutoff=0.85)
        if close:
            out.append(f"{var} ({place}) is read by nothing of vllm-fleet (did you mean {close[0]!r}?)")
    return out


def _every_value(tree: Tree):
    """Every string at any depth of every value the tree holds."""
    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from strings(k)
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
    for variables in tree.group_file_vars.values():
        for value, _place in variables.values():
            yield from strings(value)
    for entries in tree.host_entries.values():
        for _g, variables in entries:
            for value, _place in variables.values():
                yield from strings(value)
    for owners in (tree.group_vars, tree.host_vars):
        for variables in owners.values():
            for values in variables.values():
                for value, _place in values:
                    yield from strings(value)


def _outside_the_play(tree: Tree) -> list[str]:
    out = []
    for host, entries in sorted(tree.host_entries.items()):
        groups = {g for g, _ in entries}
        groups |= set().union(*(_ancestors(tree, g) for g in groups)) if groups else set()
        if "fleet" in groups:
            continue
        setters = [g for g in sorted(groups) if _group_value(tree, g, "fleet_accelerator") is not None]
        inline = any("fleet_accelerator" in v for _g, v in entries) or "fleet_accelerator" in tree.host_vars.get(host, {})
        if setters or inline:
            out.append(f"host {host} has a fleet_accelerator" + (f" (from group {setters[0]})" if setters else "")
                       + " but is not in the group fleet, so no play converges it; accepted: its group under "
                       "fleet's children")
    return out
