#!/usr/bin/env python3
"""Prints facts about the source tree's structure, for a review before and after a change.

    scripts/structure.py [DIR]        (DIR: a checkout, default: this one)

- files and lines (all lines, and lines outside `#[cfg(test)]` modules) per area of src/ and tests/;
- imports between files of src/ (`use crate::…` and `use super::…`, resolved to the file they name)
  and between top-level modules;
- import cycles between files and between top-level modules;
- imports that run from a lower layer to a higher one, by the layering the project's code follows:
  base (crd, ident, duration, reason, report, waits) < db < lock < migrate, status, manifests
  < pass, telemetry < controller < cli; nothing may import a module of a higher layer;
- pure modules (crd, ident, status, the lock's key derivation, the catalog) that import something
  holding a client (tokio_postgres, kube::Client, the db module);
- functions of more than 80 lines outside tests, longest first.

Reads text only: a heuristic parser of Rust `use` items and braces, good enough for this tree.
"""

import os
import re
import sys
from collections import defaultdict

LAYERS = {
    "crd": 0, "ident": 0, "duration": 0, "reason": 0, "report": 0, "waits": 0,
    "db": 1,
    "lock": 2,
    "migrate": 3, "status": 3, "manifests": 3,
    "pass": 4, "telemetry": 4, "converge": 4, "source": 4, "plan": 4,
    "controller": 5,
    "cli": 6, "main": 6, "lib": 6,
}
PURE = ("src/crd/", "src/ident.rs", "src/status/", "src/lock/identity.rs", "src/migrate/catalog.rs")
CLIENT = re.compile(r"\buse (tokio_postgres|kube::Client|kube::\{[^}]*\bClient\b|crate::db\b)")
LONG = 80


def rust_files(root, top):
    out = []
    for base, _, names in os.walk(os.path.join(root, top)):
        for name in names:
            if name.endswith(".rs"):
                out.append(os.path.relpath(os.path.join(base, name), root))
    return sorted(out)


def strip_tests(text):
    """The text with each `#[cfg(test)]` module (brace-matched) blanked, its lines kept."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append("\n" * text.count("\n", m.start(), j))
        i = j
    out.append(text[i:])
    return "".join(out)


def code_lines(text):
    """Lines outside `#[cfg(test)]` modules."""
    return text.count("\n") - sum(
        1 for a, b in zip(text.split("\n"), strip_tests(text).split("\n")) if a != b
    )


def module_of(path):
    """`src/controller/write.rs` -> ['controller', 'write']; mod.rs and lib.rs name their folder."""
    parts = path[len("src/"):-len(".rs")].split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def file_of(modpath, files):
    """The file that defines the longest prefix of `modpath` (module names)."""
    for n in range(len(modpath), 0, -1):
        stem = "src/" + "/".join(modpath[:n])
        for cand in (stem + ".rs", stem + "/mod.rs"):
            if cand in files:
                return cand
    return None


def use_items(text):
    """Each `use` item's path (one per leaf of a brace group)."""
    for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text, re.M):
        yield from expand(re.sub(r"\s+", "", m.group(1)))


def expand(path):
    i = path.find("{")
    if i < 0:
        yield path
        return
    head, body = path[:i], path[i + 1:path.rfind("}")]
    depth, part, parts = 0, "", []
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        part += ch
    parts.append(part)
    for p in parts:
        if p:
            yield from expand(head + p)


def resolve_use(path, here, files):
    segs = [s for s in path.split(" as ")[0].split("::") if s]
    mod = module_of(here)
    if here in ("src/lib.rs", "src/main.rs"):
        mod = []
    if segs[0] == "crate":
        target = segs[1:]
    elif segs[0] == "self":
        target = mod + segs[1:]
    elif segs[0] == "super":
        base = mod[:-1]
        segs = segs[1:]
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
        target = base + segs
    else:
        return None
    target = [s for s in target if s not in ("self", "*")]
    return file_of(target, files) if target else None


def top(path):
    m = module_of(path)
    return m[0] if m else "lib"


def cycles(graph):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def functions(path, text):
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)", line)
        if not m:
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = re.sub(r"//.*", "", lines[j])
            code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
            code = re.sub(r"'(\\.|[^'\\])'", "''", code)
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if not started and code.rstrip().endswith(";"):
                break
            if started and depth == 0:
                out.append((j - i + 1, f"{path}:{i + 1}", m.group(6)))
                break
            j += 1
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    src = rust_files(root, "src")
    tests = rust_files(root, "tests")
    files = set(src)
    texts = {p: open(os.path.join(root, p), encoding="utf-8").read() for p in src + tests}

    print("files and lines (non-test lines) per area")
    areas = defaultdict(lambda: [0, 0, 0])
    for p in src + tests:
        parts = p.split("/")
        area = "/".join(parts[:2]) if p.startswith("src/") else "/".join(parts[:3])
        if area.endswith(".rs"):
            area = parts[0] + "/ (top files)" if p.startswith("src/") else area
        areas[area][0] += 1
        areas[area][1] += texts[p].count("\n")
        areas[area][2] += code_lines(texts[p]) if p.startswith("src/") else 0
    total = [0, 0, 0]
    for area in sorted(areas):
        f, n, c = areas[area]
        total = [total[0] + f, total[1] + n, total[2] + c]
        print(f"  {area:40} {f:4} files {n:7} lines" + (f" ({c} non-test)" if c else ""))
    print(f"  {'total':40} {total[0]:4} files {total[1]:7} lines ({total[2]} non-test in src/)")

    graph, modgraph = defaultdict(set), defaultdict(set)
    edges = upward = 0
    up, impure = [], []
    for p in src:
        code = strip_tests(texts[p])
        for item in use_items(code):
            t = resolve_use(item, p, files)
            if not t or t == p:
                continue
            if t not in graph[p]:
                graph[p].add(t)
                edges += 1
            a, b = top(p), top(t)
            if a != b:
                modgraph[a].add(b)
                if LAYERS.get(a, 9) < LAYERS.get(b, 9):
                    up.append(f"{p} -> {t}")
        if p.startswith(PURE):
            for m in CLIENT.finditer(code):
                impure.append(f"{p}: use {m.group(1)}")
    print(f"\nimports between files of src/: {edges}; between top-level modules: "
          f"{sum(len(v) for v in modgraph.values())}")
    fc = cycles(graph)
    mc = cycles(modgraph)
    print(f"import cycles between files: {len(fc)}" + "".join(f"\n  {' <-> '.join(c)}" for c in fc))
    print(f"import cycles between top-level modules: {len(mc)}" + "".join(f"\n  {' <-> '.join(c)}" for c in mc))
    print(f"imports from a lower layer to a higher one: {len(sorted(set(up)))}" + "".join(f"\n  {u}" for u in sorted(set(up))))
    print(f"pure modules importing a client: {len(impure)}" + "".join(f"\n  {u}" for u in impure))

    fns = []
    for p in src:
        fns += functions(p, strip_tests(texts[p]))
    fns.sort(reverse=True)
    long = [f for f in fns if f[0] > LONG]
    print(f"\nfunctions over {LONG} lines outside tests: {len(long)}")
    for n, where, name in long:
        print(f"  {n:4}  {name}  {where}")


if __name__ == "__main__":
    main()
