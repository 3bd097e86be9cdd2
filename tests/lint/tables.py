#!/usr/bin/env python3
"""Markdown tables that GitHub would not render as tables: a delimiter row
(`|---|---|`) whose column count differs from its header row's. GitHub then
shows the lines as plain text. Rows with another count are reported too
(GitHub pads or cuts them, which hides a cell or shifts the rest).

    tests/lint/tables.py                 # every tracked *.md; exit 1 on a bad table
    tests/lint/tables.py FILE...         # those files only

Cells split on every `|` not escaped as `\\|`, inside code spans too, as
GitHub's tables do. Fenced code blocks are skipped."""
import re
import subprocess
import sys

DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def cells(line):
    """The cells of a table row, by GitHub's rule."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return re.split(r"(?<!\\)\|", s)


def problems(text):
    """(line number, message) for each table whose rows disagree."""
    out = []
    lines = text.split("\n")
    fence = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if i + 1 >= len(lines) or "|" not in line or "|" not in lines[i + 1]:
            continue
        if not DELIMITER.match(lines[i + 1]) or DELIMITER.match(line):
            continue
        width = len(cells(line))
        got = len(cells(lines[i + 1]))
        if got != width:
            out.append((i + 1, f"header has {width} columns, delimiter row {got}: not rendered as a table"))
        j = i + 2
        while j < len(lines) and lines[j].strip().startswith("|"):
            n = len(cells(lines[j]))
            if n != width:
                out.append((j + 1, f"row has {n} columns, its header {width}"))
            j += 1
    return out


def main():
    files = sys.argv[1:]
    if not files:
        listed = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, check=True)
        files = listed.stdout.split()
    bad = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for n, msg in problems(fh.read()):
                print(f"{f}:{n}: {msg}")
                bad += 1
    if bad:
        print(f"{bad} table problem(s); GitHub renders such tables as text or drops cells")
        sys.exit(1)


if __name__ == "__main__":
    main()
