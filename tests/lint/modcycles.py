#!/usr/bin/env python3
"""Import circles between modules of each product crate.

    tests/lint/modcycles.py            # exit 1 and print each circle found

At every level of a crate's module tree, the children of one module are
checked against each other: child A depends on sibling B when a file in A
names a path into B (`crate::…`, `super::…`, `self::…`, in `use` or in
code, `use x::{a, b}` groups included). A module using its parent or its
own children is not a circle. Tests are left out (files named tests.rs, or
under a tests/ folder, and `#[cfg(test)]` items): a unit test may reach
anywhere. Circles are strongly connected groups of two or more siblings
(Tarjan's algorithm)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sizes import strip_code, test_spans  # noqa: E402

CRATES = ("controller/src", "node-daemon/src", "crds/src", "kubectl-plugin/src", "ops/src")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# A path that starts at crate, super or self, with an optional `{…}` group at
# its end (one level of nesting is enough for this code base).
PATH_RE = re.compile(rf"\b(?:crate|super|self)(?:::{IDENT})*(?:::\{{[^{{}}]*(?:\{{[^{{}}]*\}}[^{{}}]*)*\}})?")


def module_of(src, path):
    parts = os.path.relpath(path, src).split(os.sep)
    last = parts[-1][:-3]
    parts = parts[:-1] + ([] if last in ("mod", "lib", "main") else [last])
    return tuple(parts)


def expand(path):
    """`a::{b, c::d}` -> [a::b, a::c::d] (strings)."""
    if "{" not in path:
        return [path]
    head, _, rest = path.partition("{")
    inner = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        p = re.sub(r"\s+", "", p).split(" as ")[0]
        if p:
            out += expand(head + p)
    return out


def resolve(current, path, modules):
    """The module a path points into (the longest known module prefix)."""
    segs = [s for s in re.sub(r"\s+", "", path).split("::") if s]
    base = list(current)
    if segs and segs[0] == "crate":
        base, segs = [], segs[1:]
    while segs and segs[0] in ("super", "self"):
        if segs[0] == "super":
            base = base[:-1]
        segs = segs[1:]
    full = base + segs
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in modules:
            return tuple(full[:n])
    return ()


def circles(graph):
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def crate_files(src):
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src).split(os.sep)
        if "tests" in rel:
            continue
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":
                yield os.path.join(dirpath, f)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = 0
    for crate in CRATES:
        src = os.path.join(root, crate)
        files = list(crate_files(src))
        modules = {module_of(src, f) for f in files}
        modules |= {m[:n] for m in modules for n in range(len(m))}
        # graphs[parent][child] = set of sibling children it depends on
        graphs = {}
        for f in files:
            cur = module_of(src, f)
            code = strip_code(open(f, encoding="utf-8").read())
            spans = test_spans(code)
            for m in PATH_RE.finditer(code):
                if any(a <= m.start() < b for a, b in spans):
                    continue
                for p in expand(m.group(0)):
                    target = resolve(cur, p, modules)
                    n = 0
                    while n < min(len(cur), len(target)) and cur[n] == target[n]:
                        n += 1
                    if n < len(cur) and n < len(target):
                        graphs.setdefault(cur[:n], {}).setdefault(cur[n], set()).add(target[n])
        found = 0
        for parent in sorted(graphs):
            for group in circles(graphs[parent]):
                found += 1
                where = "::".join(parent) or "crate"
                edges = [f"{a} -> {b}" for a in group for b in sorted(graphs[parent][a]) if b in group]
                print(f"{crate}: import circle in {where} among {', '.join(group)}: {'; '.join(edges)}")
        if not found:
            print(f"{crate}: no import circle ({len(modules)} modules)")
        bad += found
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
