"""The command lines of README.md and docs/, for the tests that check them (tests/unit/test_doc_commands.py)
and the lab tests that run them verbatim (run_doc).

A page's commands name the inventory `inventories/site`, the copy usage.md has the reader make. A lab
test runs one as written, through bash, from a checkout as the reader has it: this project's files
and `inventories/site`, which is the lab's inventory (checkout_view), with `.venv/bin` first on the
PATH as the README says; one that contacts no node runs on the example inventory. Which commands
none runs, and why, is NOT_RUN: a unit test holds the two
lists against the pages, so a new command is run somewhere or said not to be.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from vllm_fleet import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCED = re.compile(r"^\s*```[^\n]*\n(.*?)^\s*```", re.S | re.M)
PROGRAMS = ("vllm-fleet", "ansible-playbook")
SUBCOMMANDS = set(next(a for a in cli.build_parser()._actions if a.dest == "command").choices)
#: The inventory every page names.
SITE = "inventories/site"


def command_lines(text: str, runnable: bool = False) -> list[tuple[str, list[str]]]:
    """(line, argv) of the vllm-fleet and ansible-playbook command lines of the fenced blocks of `text`
    (continuation lines joined, a prompt dropped; argv without environment assignments and a trailing
    comment, its program by name). A command quoted in a comment (`#   vllm-fleet ...` in a YAML example)
    counts, unless `runnable`: then only the lines a shell would run, with vllm-fleet's subcommand or an
    option after the program's name (not a script's output that starts with the name)."""
    out = []
    for block in FENCED.findall(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("#"):
                if runnable:
                    continue
                line = line.lstrip("# ")
            try:
                argv = shlex.split(line, comments=True)
            except ValueError:
                continue
            while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
                argv = argv[1:]
            if argv and Path(argv[0]).name in PROGRAMS:
                argv = [Path(argv[0]).name, *argv[1:]]
                if runnable and argv[0] == "vllm-fleet" and not (argv[1:2] and (argv[1] in SUBCOMMANDS
                                                                                 or argv[1].startswith("-"))):
                    continue
                out.append((line, argv))
    return out


def synopsis(argv: list[str]) -> bool:
    """A usage line (`[-l GROUP]`, `DIR|VOLUMES`, `...`), not a command to run."""
    return any(re.search(r"[\[\]|]|\.\.\.", a) or re.fullmatch(r"[A-Z][A-Z_]+", a) for a in argv[1:])


def runnable_commands() -> list[tuple[str, str]]:
    """(page, line) of every command line of the pages a reader would run as written."""
    return [(str(page.relative_to(ROOT)), line) for page in PAGES
            for line, argv in command_lines(page.read_text(), runnable=True) if not synopsis(argv)]


def doc_command(page: str, *contains: str, lacks: tuple[str, ...] = ()) -> str:
    """The one runnable command line of `page` that has every string of `contains` and none of `lacks`."""
    found = [line for where, line in runnable_commands()
             if where == page and all(c in line for c in contains) and not any(x in line for x in lacks)]
    assert len(found) == 1, f"{page}: {len(found)} command line(s) with {contains}, without {lacks}: {found}"
    return found[0]


#: The pages' command lines no lab test runs, each with why: (page, a string of the line) -> reason.
NOT_RUN: dict[tuple[str, str], str] = {}


#: The inventory the lab's page (docs/lab.md) names: the one `vllm-fleet lab up` writes for the default lab.
LAB_INVENTORY = "inventories/lab"


def checkout_view(inventory: Path, where: Path) -> Path:
    """A checkout as a site's operator has it: this project's files (links to them) and inventories/site,
    their inventory (here a lab's), which is also inventories/lab, as for the reader of the lab's page
    whose lab it is. Rebuilt in place: both follow `inventory`."""
    where.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        link = where / entry.name
        if entry.name not in (".git", "inventories") and not link.is_symlink():
            link.symlink_to(entry)
    (where / "inventories").mkdir(exist_ok=True)
    for name in (SITE, LAB_INVENTORY):
        link = where / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(Path(inventory).resolve())
    return where


def in_mounts(line: str, mounts: dict[str, Path]) -> list[str]:
    """The argv that runs `line` with bash where each absolute path of `mounts` is the directory given,
    in a mount namespace of its own (util-linux's unshare; root): a page's machine paths (/srv,
    /media/usb, /data/mmlu, /tmp/bench) become a test's directories, bound over each path, which must
    exist (run_doc makes a missing one for the run). Nothing covers a path's parent: the checkout, the
    test's directories or a venv may lie under it (a clone in /tmp, and the page's /tmp/bench)."""
    steps = [f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}" for target, source in mounts.items()]
    script = " && ".join(steps) + ' && exec bash -c "$1"'
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", script, "in_mounts", line]


def mount_points(mounts: dict[str, Path]) -> list[tuple[Path, Path]]:
    """Make each path of `mounts` the machine lacks: (the path, the highest directory made for it), for
    unmount_points to remove after the run; what the machine had is left as it was."""
    made = []
    for target in map(Path, mounts):
        if target.exists():
            continue
        top = target
        while not top.parent.exists():
            top = top.parent
        target.mkdir(parents=True)
        made.append((target, top))
    return made


def unmount_points(made: list[tuple[Path, Path]]) -> None:
    """Remove the directories mount_points made, from each path up to the highest one, while empty."""
    for target, top in reversed(made):
        path = target
        while True:
            try:
                path.rmdir()
            except OSError:
                break
            if path == top:
                break
            path = path.parent


def run_doc(line: str, inventory: Path, where: Path, timeout: float,
            mounts: dict[str, Path] | None = None, lab: str | None = None,
            path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """Run a page's command line as written, with bash, from checkout_view(inventory, where), `.venv/bin`
    first on the PATH (then the directories of `path`: a tool the page has the reader install, from a
    venv of its own) and Ansible's configuration the checkout's own (found in the working directory);
    with `mounts`, the page's machine paths are a test's directories (in_mounts: a path the machine
    lacks, such as /data/mmlu, is made for the run, empty, and removed after); with `lab`, that lab is
    the one `vllm-fleet lab` acts on without --name (VLLM_FLEET_LAB_NAME), as the default lab is the
    reader's (no test touches the default lab, which a person may be using)."""
    view = checkout_view(inventory, where)
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_CONFIG", "VLLM_FLEET_LAB_NAME")}
    env.update(PATH=":".join([str(ROOT / ".venv" / "bin"), *map(str, path), env.get("PATH", "")]),
               ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", **({"VLLM_FLEET_LAB_NAME": lab} if lab else {}))
    argv = in_mounts(line, mounts) if mounts else ["bash", "-c", line]
    made = mount_points(mounts or {})
    try:
        return subprocess.run(argv, cwd=view, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        unmount_points(made)


def run_doc_command(page: str, *contains: str, inventory: Path, lacks: tuple[str, ...] = (),
                    timeout: float = 600, mounts: dict[str, Path] | None = None,
                    lab: str | None = None, path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """The command line of `page` with every string of `contains` (and none of `lacks`), run as written
    (run_doc) with `inventory` as inventories/site, from a checkout view beside it (a lab's) or, for an
    inventory inside this project (the example), under .cache. Literal arguments: the ledger test
    (tests/unit/test_doc_commands.py) reads these calls to know which commands run."""
    return run_doc(doc_command(page, *contains, lacks=lacks), inventory, view_dir(inventory), timeout, mounts, lab,
                   path)


def view_dir(inventory: Path) -> Path:
    """Where run_doc_command makes the checkout view of `inventory` (the directory a page's relative
    paths, such as `--secrets secrets.yml`, are read from): beside a lab's inventory, or under .cache
    for one inside this project."""
    inventory = Path(inventory).resolve()
    if inventory.is_relative_to(ROOT / "inventories"):
        return ROOT / ".cache" / "doc-commands" / inventory.name
    return inventory.parent / "checkout"
