"""What the benchmark scripts (scripts/bench-*) write beside their figures: the machine they ran on, and
their section of a page, between its markers; written here once, so every page names the machine alike.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it ("?" where it does not)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine() -> str:
    """One line naming the machine: host, CPUs, their model, the kernel."""
    return f"{platform.node()}: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} {platform.release()}"


def write_between(page: Path, begin: str, end: str, text: str) -> None:
    """Replace the page's text from the marker `begin` to the marker `end` (both kept) with `text`."""
    content = page.read_text()
    start, stop = content.index(begin), content.index(end) + len(end)
    page.write_text(content[:start] + begin + "\n" + text.strip("\n") + "\n" + end + content[stop:])
