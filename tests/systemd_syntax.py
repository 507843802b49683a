"""A reading of systemd's command-line syntax for Exec*= lines (systemd.service(5),
"Command lines"), used by the tests to turn a rendered unit back into argv."""

from __future__ import annotations

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b",
            "f": "\f", "v": "\v", "s": " "}


def split_exec(line: str) -> list[str]:
    """Split an ExecStart= value into arguments, undoing quotes, escapes, %% and $$."""
    args: list[str] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word = []
        quote = None
        while i < n:
            c = line[i]
            if quote is None and c in " \t":
                break
            if c in "\"'" and quote is None and not word:
                quote = c
                i += 1
                continue
            if quote and c == quote:
                i += 1
                quote = None
                break
            if c == "\\" and quote != "'" and i + 1 < n:
                word.append(_ESCAPES.get(line[i + 1], line[i + 1]))
                i += 2
                continue
            word.append(c)
            i += 1
        if quote:
            raise ValueError(f"unterminated quote in {line!r}")
        args.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return args


def exec_start(unit_text: str) -> list[str]:
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            return split_exec(line[len("ExecStart="):])
    raise ValueError("no ExecStart= in unit")
