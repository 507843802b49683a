"""No command acts on an inventory it was not given (issue 35, item 2).

- Every command line in a fenced block of README.md and docs/ that reads an inventory
  (`ansible-playbook ...`, `vllm-fleet provision|plan|doctor|verify|rollback|rollout|status|bench`,
  `vllm-fleet mirror sync`) names one with -i; the vllm-fleet ones that are not synopses
  (no `[...]`) are accepted by the CLI's own parser as written.
- The CLI has no default inventory: a command without -i exits 64 saying how to give one;
  plain ansible-playbook with the shipped ansible.cfg and no -i stops before any play, saying so.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE, ansible_playbook
from tests.doc_commands import (
    FENCED,
    NOT_RUN,
    PAGES,
    ROOT,
    command_lines,
    run_doc,
    run_doc_command,
    runnable_commands,
)
from vllm_fleet import cli

#: vllm-fleet's subcommands that read an inventory (bench --history and the mirror's verify,
#: pack and unpack read none; lab writes its own).
READS_INVENTORY = {"provision", "plan", "doctor", "verify", "rollback", "rollout", "status", "bench"}


def commands(text: str, runnable: bool = False) -> list[list[str]]:
    return [argv for _, argv in command_lines(text, runnable)]


#: An inline code span that is a command line a reader copies into a shell.
INLINE_COMMAND = re.compile(r"`((?:\.venv/bin/)?(?:vllm-fleet|ansible-playbook|ansible-inventory|ansible-doc|cp|git|"
                            r"\./scripts/\S+) [^`\n]*)`")
PLACEHOLDER = re.compile(r"<[\w.-]+>")


def bare_placeholders(line: str) -> list[str]:
    """The `<placeholders>` of a command line that a shell would read as redirections (outside quotes,
    before a comment): `-i inventories/<yours> site.yml` reads the file `yours` and writes site.yml."""
    found, quote = [], ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            break
        elif char == "<" and (m := PLACEHOLDER.match(line, i)):
            found.append(m.group())
    return found


def shell_unsafe(text: str) -> list[str]:
    """The command lines of `text` (fenced, run by a shell; inline code spans that are commands) with a
    bare placeholder."""
    lines = [ln.strip().removeprefix("$ ") for block in FENCED.findall(text)
             for ln in re.sub(r"\\\n\s*", " ", block).splitlines()]
    lines = [ln for ln in lines if commands(f"```\n{ln}\n```\n", runnable=True)]
    lines += [m.group(1) for m in INLINE_COMMAND.finditer(FENCED.sub("", text))]
    return [ln for ln in lines if bare_placeholders(ln)]


def reads_inventory(argv: list[str]) -> bool:
    if argv[0] == "ansible-playbook":
        return not {"--syntax-check", "--version", "--help", "-h"} & set(argv)
    words = [a for a in argv[1:] if not a.startswith("-")]
    if not words:
        return False
    if words[0] == "mirror":
        return words[1:2] == ["sync"]
    return words[0] in READS_INVENTORY and not (words[0] == "bench" and "--history" in argv)


def names_inventory(argv: list[str]) -> bool:
    return any(a in ("-i", "--inventory") or a.startswith("--inventory=") or (a.startswith("-i") and len(a) > 2
                                                                                 and not a.startswith("--"))
               for a in argv)


def unnamed(text: str) -> list[str]:
    return [shlex.join(argv) for argv in commands(text) if reads_inventory(argv) and not names_inventory(argv)]


def all_commands(runnable: bool = False) -> list[tuple[str, list[str]]]:
    return [(str(page.relative_to(ROOT)), argv) for page in PAGES for argv in commands(page.read_text(), runnable)]


def test_the_docs_have_commands_to_check():
    found = all_commands()
    assert sum(argv[0] == "ansible-playbook" for _, argv in found) >= 5, found
    assert sum(argv[0] == "vllm-fleet" and reads_inventory(argv) for _, argv in found) >= 20, found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_the_docs_names_its_inventory(page: Path):
    assert unnamed(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_the_docs_runs_in_a_shell_as_written(page: Path):
    """No `<placeholder>` a shell reads as a redirection: every page names the inventory inventories/site,
    the copy usage.md has the reader make."""
    assert shell_unsafe(page.read_text()) == []


def test_the_shell_check_finds_a_bare_placeholder():
    text = ("Run `vllm-fleet plan -i inventories/<yours> -o p` or `vllm-fleet-router-model_<name>`.\n"
            "```sh\nansible-playbook -i inventories/<yours> site.yml\n"
            "vllm-fleet status -i 'inventories/<yours>'   # quoted: <fine>\n# vllm-fleet doctor -i <x>\n```\n")
    assert shell_unsafe(text) == ["ansible-playbook -i inventories/<yours> site.yml",
                                  "vllm-fleet plan -i inventories/<yours> -o p"]


def test_the_check_finds_a_command_without_an_inventory():
    text = ("```sh\n.venv/bin/vllm-fleet rollout -l nvidia-nodes   # one by one\n"
            "ANSIBLE_FORCE_COLOR=1 ansible-playbook playbooks/router-drain.yml \\\n  -e router_drain_node=n1\n"
            "vllm-fleet bench --history\nvllm-fleet mirror verify /srv/m\nvllm-fleet plan -i inventories/x -o p\n```\n")
    assert unnamed(text) == ["vllm-fleet rollout -l nvidia-nodes",
                             "ansible-playbook playbooks/router-drain.yml -e router_drain_node=n1"]


@pytest.mark.parametrize("where,argv", [(w, a) for w, a in all_commands(runnable=True)
                                        if a[0] == "vllm-fleet" and not any(re.search(r"[\[\]|]|\.\.\.", x)
                                                                            for x in a)],
                         ids=lambda v: v if isinstance(v, str) else shlex.join(v)[:60])
def test_every_vllm_fleet_command_in_the_docs_parses(where: str, argv: list[str]):
    try:
        cli.build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is refused by vllm-fleet's parser (exit {exc.code})")


def _run_doc_calls() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(page, contains, lacks) of every run_doc_command(...) call of the tests: the lab tests' and those a
    scenario's verify runs (molecule/<scenario>/tests, test_scenario_tests_are_run_by_a_verify)."""
    calls = []
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "molecule").glob("*/tests/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node, "func", None) and getattr(node.func, "id", getattr(node.func, "attr", ""))
            if isinstance(node, ast.Call) and name == "run_doc_command" and isinstance(node.args[0], ast.Constant):
                args = [ast.literal_eval(a) for a in node.args]
                lacks = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "lacks"), ())
                calls.append((args[0], tuple(args[1:]), tuple(lacks)))
    return calls


def test_every_command_of_the_pages_runs_verbatim_on_a_lab_or_says_why_not():
    """A lab test runs a page's command as written (tests/lab/conftest.py run_doc_command) or NOT_RUN says why
    none does; each of NOT_RUN's entries and each lab test's still names a command of the pages."""
    runnable = runnable_commands()
    ran = set()
    calls = _run_doc_calls()
    assert len(calls) >= 4, calls
    for page, contains, lacks in calls:
        found = [line for where, line in runnable
                 if where == page and all(c in line for c in contains) and not any(x in line for x in lacks)]
        assert len(found) == 1, f"a lab test runs {page}'s command with {contains}: the page has {found}"
        ran.add((page, found[0]))
    said = set()
    for (page, part), why in NOT_RUN.items():
        found = [line for where, line in runnable if where == page and part in line]
        assert found and why, f"NOT_RUN names {page}'s command with {part!r}: the page has none"
        said |= {(page, line) for line in found}
    left = [f"{page}: {line}" for page, line in runnable if (page, line) not in ran | said]
    assert left == [], "run these in a lab test (run_doc_command) or say in NOT_RUN why not"
    assert not ran & said, f"both run and said not to be: {sorted(ran & said)}"


def test_scenario_tests_are_run_by_a_verify_that_ci_runs():
    """Each molecule/<scenario>/tests is run by its scenario's verify, which a scenario CI runs
    (scripts/test: fleet and cpu) imports or is: a page's command there is run, not only named."""
    ci = set(re.search(r"VLLM_FLEET_SCENARIOS:-([^}]*)\}", (ROOT / "scripts" / "test").read_text())[1].split())
    assert ci, "scripts/test names no scenario"
    for tests in sorted((ROOT / "molecule").glob("*/tests")):
        scenario = tests.parent.name
        verify = (tests.parent / "verify.yml").read_text()
        assert f"molecule/{scenario}/tests" in verify, f"molecule/{scenario}/verify.yml does not run {tests.name}/"
        runs = {name for name in ci if name == scenario
                or f"../{scenario}/verify.yml" in (ROOT / "molecule" / name / "verify.yml").read_text()}
        assert runs, f"no scenario CI runs ({sorted(ci)}) runs molecule/{scenario}/verify.yml"


def test_bench_s_dry_run_runs_as_written_and_prints_evalscope_s_commands():
    """bench.md's evalscope dry run contacts no node: it runs as written on the example inventory."""
    proc = run_doc_command("docs/operations/bench.md", "--evalscope", inventory=EXAMPLE, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ascend-01 gpt-oss-120b perf: dry run" in proc.stdout
    assert "--tokenizer-path /home/models/GPT-OSS" in proc.stdout
    assert '"local_path": "/data/mmlu"' in proc.stdout


@pytest.mark.parametrize("argv", [["provision"], ["plan", "-o", "p"], ["doctor"], ["verify"], ["rollback"],
                                  ["rollout"], ["status"], ["bench"]])
def test_the_cli_has_no_default_inventory(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "no inventory given" in err and "-i inventories/site" in err


def test_a_relative_inventory_is_the_working_directory_s(capsys, tmp_path, monkeypatch):
    """Never the checkout vllm-fleet was installed from: from elsewhere, inventories/example is missing."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["doctor", "-i", "inventories/example"]) == cli.EXIT_USAGE
    assert f"inventory inventories/example does not exist (relative to {tmp_path})" in capsys.readouterr().err


@pytest.mark.parametrize("argv,said", [
    (["status", "-i", ".", "--window", "-1"], "is not from 0.1 to 600 seconds"),
    (["status", "-i", ".", "--watch", "0"], "is not from 0.2 to 86400 seconds"),
    (["status", "-i", ".", "--window", "soon"], "is not a number of seconds"),
])
def test_status_refuses_windows_and_watches_out_of_range(argv, said, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE
    assert said in capsys.readouterr().err


def test_a_missing_secrets_file_is_named(capsys, tmp_path):
    assert cli.main(["bench", "-i", str(tmp_path), "--secrets", str(tmp_path / "nope.yml")]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--secrets {tmp_path / 'nope.yml'}: no such file" in err and "Errno" not in err


def test_help_lists_every_exit_code(capsys):
    assert cli.main(["--help"]) == cli.EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    for code in (0, 1, 2, 3, 4, 5, 64, 130):
        assert re.search(rf"\b{code} ", out), code


@pytest.mark.ansible
def test_plain_ansible_playbook_without_an_inventory_stops_saying_so(monkeypatch):
    if Path("/etc/ansible/hosts").exists():
        pytest.skip("this machine has /etc/ansible/hosts: Ansible's own default inventory")
    monkeypatch.delenv("ANSIBLE_INVENTORY", raising=False)
    proc = ansible_playbook("site.yml")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "TASK [" not in proc.stdout
    assert "no inventory was given" in out and "ansible-playbook -i inventories/site site.yml" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root (util-linux's unshare)")
def test_a_pages_machine_paths_are_the_tests_directories_and_the_machine_is_left_as_it_was(tmp_path):
    """run_doc's mounts: a page's /data/mmlu and /tmp/bench are a test's directories for the run alone
    (here under /tmp, as a clone in /tmp has its own: nothing covers /tmp); a path the machine lacks is
    made for the run and removed after, up to the highest directory made; what the machine had stays."""
    data, out, inventory = tmp_path / "data", tmp_path / "out", tmp_path / "inventory"
    for directory in (data, out, inventory):
        directory.mkdir()
    (data / "set.txt").write_text("the set\n")
    missing = Path(f"/vllm-fleet-doc-test-{os.getpid()}")
    bench = Path(f"/tmp/vllm-fleet-doc-test-{os.getpid()}/bench")
    kept = tmp_path / "kept"
    kept.mkdir()
    line = f"cat {missing}/data/mmlu/set.txt > {bench}/copy && ls {kept}"
    proc = run_doc(line, inventory, tmp_path / "view", 60,
                   mounts={f"{missing}/data/mmlu": data, str(bench): out, str(kept): data})
    assert proc.returncode == 0, proc.stderr
    assert (out / "copy").read_text() == "the set\n"
    assert proc.stdout.split() == ["set.txt"]  # an existing directory, bound over for the run
    assert not missing.exists() and not bench.parent.exists()
    assert kept.is_dir() and list(kept.iterdir()) == []
