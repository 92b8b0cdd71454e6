#!/usr/bin/env python3
"""Find import cycles between the modules of one Rust crate.

Reads every .rs file under a crate's src/, maps it to its module path
(src/a/b.rs and src/a/b/mod.rs are `a::b`), and collects the modules each file
names through `crate::`, `super::` and `self::` paths (in `use` lines, grouped
`use crate::{a, b::c}` trees, and inline paths such as `crate::a::f()`). A path
is attributed to the longest module it starts with. Edges between a module and
its own ancestor or descendant are left out: a parent declares and re-exports its
children, which is ownership, not layering. Cycles are the strongly connected
components of what remains, reported at the top level (`a`, `b`, ...) and between
all modules. Exit status 1 if there is any cycle.

Usage: scripts/check-module-cycles.py CRATE_DIR [CRATE_DIR ...]
"""

import re
import sys
from pathlib import Path

COMMENT = re.compile(r"//[^\n]*")
USE = re.compile(r"\buse\s+((?:crate|super|self)\s*::[^;]*);", re.S)
INLINE = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*(?:super|self))*(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")


def module_of(src: Path, file: Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts.pop()
    return tuple(parts)


def expand(tree: str) -> list:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    head, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    return [p for item in items if item for p in expand(head + item)]


def resolve(path: str, here: tuple, is_dir_module: bool) -> list:
    segs = [s for s in path.split("::") if s]
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    else:
        # `self` in a file module is the module itself; `super` is its parent.
        base = list(here)
        while segs and segs[0] in ("self", "super"):
            if segs.pop(0) == "super":
                base = base[:-1]
    return base + [s for s in segs if s not in ("self", "*")]


def graph(src: Path):
    files = sorted(src.rglob("*.rs"))
    modules = {module_of(src, f) for f in files}
    edges = {}
    for f in files:
        here = module_of(src, f)
        text = COMMENT.sub("", f.read_text())
        paths = [p for m in USE.finditer(text) for p in expand(m.group(1))]
        paths += [m.group(1) for m in INLINE.finditer(text)]
        for p in paths:
            target = resolve(p, here, f.name == "mod.rs")
            best = ()
            for n in range(len(target), 0, -1):
                if tuple(target[:n]) in modules:
                    best = tuple(target[:n])
                    break
            if not best:
                continue
            related = best[: len(here)] == here or here[: len(best)] == best
            if not related:
                edges.setdefault(here, set()).add(best)
    return modules, edges


def cycles(nodes, edges):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m) or "crate"


def main(dirs):
    found = False
    for d in dirs:
        src = Path(d) / "src"
        modules, edges = graph(src)
        top_edges = {}
        for a, targets in edges.items():
            for b in targets:
                if a[:1] and b[:1] and a[:1] != b[:1]:
                    top_edges.setdefault(a[:1], set()).add(b[:1])
        for label, nodes, es in (
            ("top-level modules", {m[:1] for m in modules if m}, top_edges),
            ("all modules", modules, edges),
        ):
            comps = cycles(nodes, es)
            n_edges = sum(len(t) for t in es.values())
            print(f"{d}: {len(nodes)} {label}, {n_edges} import edges, {len(comps)} cycle(s)")
            for comp in comps:
                members = set(comp)
                detail = [
                    f"{name(a)} -> {name(b)}"
                    for a in comp
                    for b in sorted(es.get(a, ()))
                    if b in members
                ]
                print("  cycle: " + ", ".join(name(m) for m in comp))
                print("    edges: " + "; ".join(detail))
            found |= bool(comps)
    return 1 if found else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
