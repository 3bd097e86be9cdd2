#!/usr/bin/env python3
"""Sizes of nodeimage's product code: files over a line budget and
functions over a length budget, tests excluded (files named tests.rs or
under tests/ and benches/, and `#[cfg(test)]` items).

    tests/lint/sizes.py                  # report; exit 1 if a budget is passed
    tests/lint/sizes.py --top 20         # the largest files and functions too

Product lines are the lines of a file outside its test items, blank lines
and comments included (what a reader scrolls through)."""
import argparse
import os
import re
import subprocess
import sys

FILE_BUDGET = 500
FN_BUDGET = 80
# Crates whose code ships (the test harness crate `tests/` does not).
PRODUCT_ROOTS = ("controller/src", "node-daemon/src", "crds/src", "kubectl-plugin/src", "ops/src")


def strip_code(text):
    """The text with string, char and comment contents blanked (newlines
    kept), so braces inside them do not count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, open_idx):
    """Index just past the brace that closes the one at open_idx."""
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def test_spans(code):
    """(start, end) character spans of #[cfg(test)] items."""
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if semi >= 0 and (brace < 0 or semi < brace):
            spans.append((m.start(), semi + 1))  # `mod tests;`
        elif brace >= 0:
            spans.append((m.start(), block_end(code, brace)))
    return spans


FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(code, spans):
    """(name, line, length in lines) of each fn with a body outside spans."""
    found = []
    for m in FN_RE.finditer(code):
        if any(a <= m.start() < b for a, b in spans):
            continue
        # The body: the first `{` after the signature, unless a `;` comes
        # first (a trait method without a body). Skip `where` clauses and
        # generics; closures inside default arguments do not exist in Rust.
        j, depth = m.end(), 0
        while j < len(code):
            ch = code[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1 if not (ch == ">" and code[j - 1] == "-") else 0
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = block_end(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        found.append((m.group(1), first, last - first + 1))
    return found


def product_files(root):
    files = subprocess.run(["git", "ls-files", "*.rs"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if not f.startswith(PRODUCT_ROOTS):
            continue
        parts = f.split("/")
        if parts[-1] == "tests.rs" or "tests" in parts[2:-1] or "benches" in parts:
            continue
        yield f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    file_rows, fn_rows, total = [], [], 0
    for f in product_files(root):
        text = open(os.path.join(root, f), encoding="utf-8").read()
        code = strip_code(text)
        spans = test_spans(code)
        test_lines = sum(code.count("\n", a, b) + 1 for a, b in spans)
        lines = text.count("\n") + (0 if text.endswith("\n") else 1) - test_lines
        total += lines
        file_rows.append((lines, f))
        fn_rows += [(length, f"{f}:{line} {name}") for name, line, length in functions(code, spans)]
    file_rows.sort(reverse=True)
    fn_rows.sort(reverse=True)
    over_files = [r for r in file_rows if r[0] > FILE_BUDGET]
    over_fns = [r for r in fn_rows if r[0] > FN_BUDGET]
    print(f"product code: {total} lines in {len(file_rows)} files, {len(fn_rows)} functions")
    if args.top:
        print(f"largest files:")
        for lines, f in file_rows[: args.top]:
            print(f"  {lines:5} {f}")
        print(f"longest functions:")
        for length, where in fn_rows[: args.top]:
            print(f"  {length:5} {where}")
    for lines, f in over_files:
        print(f"FILE over {FILE_BUDGET} product lines: {f} ({lines})")
    for length, where in over_fns:
        print(f"FUNCTION over {FN_BUDGET} lines: {where} ({length})")
    return 1 if over_files or over_fns else 0


if __name__ == "__main__":
    sys.exit(main())
