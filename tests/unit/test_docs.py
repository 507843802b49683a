"""The documentation as it is on disk: README.md (the front page) and the pages under docs/.

mkdocs (`mkdocs build --strict`, run by scripts/test) checks the links between docs/ pages;
README.md is outside its docs_dir, so its links are checked here, with the same rules for every
page: a relative link leads to a file, and its `#anchor` to a heading of that file (GitHub's
slug). Also: the README stays a front page (under 200 lines, two commands to set up), every page
is in the site's nav, and no clock time sits in prose (figures go in docs/performance.md, under
the script that measured them, with its date, never "at 12:48").
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b")


def prose_lines(text: str, code_spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked unless kept."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line if code_spans else INLINE_CODE.sub(" ", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lowercased, spaces to '-', punctuation dropped
    except '-' and '_'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"(\*\*|__|\*)", "", text)  # emphasis marks
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(path.read_text(), code_spans=True):
        m = HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        result.add(s if n == 0 else f"{s}-{n}")
    return result


def links(path: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in prose_lines(path.read_text()) for m in LINK.finditer(line)]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_pages_exist():
    names = {rel(p) for p in PAGES}
    for page in ("docs/index.md", "docs/usage.md", "docs/security.md", "docs/performance.md",
                 "docs/testing.md", "docs/lab.md", "docs/api.md", "docs/ARCHITECTURE.md",
                 "docs/vendors/ascend.md", "docs/vendors/metax.md", "docs/vendors/moore-threads.md",
                 "docs/vendors/nvidia.md", "docs/vendors/cpu.md"):
        assert page in names, page


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_lead_to_a_file_and_a_heading(page: Path):
    broken = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        where = f"{rel(page)}:{n}: {target}"
        if target.startswith("/"):
            broken.append(f"{where} (absolute: write it relative to the page)")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading with that anchor in {rel(dest)})")
    assert not broken, "\n".join(broken)


def test_readme_links_every_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README)}
    missing = [rel(p) for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"README.md's Documentation section lacks: {missing}"


def test_every_page_is_in_the_site_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"

    def flatten(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from (flatten(value) if isinstance(value, list) else [value])

    in_nav = set(flatten(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk == in_nav, (on_disk ^ in_nav)


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) < 200
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## Set up", "## Daily commands", "## Documentation"], sections


def test_readme_sets_up_with_exactly_two_commands():
    lines = README.read_text().splitlines()
    start = lines.index("## Set up") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    assert not [s for s in section if s.startswith(("    ", "\t"))], "an indented code block in Set up"
    commands, fenced = [], False
    for line in section:
        if FENCE.match(line):
            fenced = not fenced
        elif fenced and line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.split(" #")[0].strip())
    assert commands == ["./scripts/demo", "./scripts/test"], commands


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_clock_times_in_prose(page: Path):
    found = [f"{rel(page)}:{n}: {line.strip()}" for n, line in prose_lines(page.read_text())
             if CLOCK.search(line)]
    assert not found, "clock times in prose (figures go in docs/performance.md, dated):\n" + "\n".join(found)


def test_the_checks_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A `code` heading: with punctuation!\n\nAt 12:48, see [x](#nope).\n"
                    "```\n13:22 in a fence\n```\n`14:05` inline\n")
    assert anchors(page) == {"title", "a-code-heading-with-punctuation"}
    assert [t for _, t in links(page)] == ["#nope"]
    assert [n for n, line in prose_lines(page.read_text()) if CLOCK.search(line)] == [5]
