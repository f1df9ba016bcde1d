#!/usr/bin/env python3
"""Lists import cycles between the source files of the `deskbell` library.

Reads every `use` of `crate::…`, `super::…`, `self::…` or a child module (grouped
ones too) and every such path written inline, maps each to the file that defines
it, and prints every strongly connected group of files that depend on each other,
directly or through others. A module naming its own submodules is containment and
does not count. Tests (`#[cfg(test)]` and after) are left out. Exits 1 if any.
Usage: scripts/import-cycles.py [src]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
root = os.path.normpath(root)

def module_of(path):
    rel = os.path.relpath(path, root)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts

files = {}
for dirpath, _, names in os.walk(root):
    if os.sep + "bin" in dirpath[len(root):] or dirpath.endswith(os.sep + "bin"):
        continue
    for n in names:
        if n.endswith(".rs") and n != "main.rs":
            p = os.path.join(dirpath, n)
            files[tuple(module_of(p))] = p

# Items a module file re-exports from its submodules (`pub use calls::CallRow`):
# naming `store::CallRow` depends on `store::calls`.
reexports = {}
for mod, path in files.items():
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"^pub use ([^;]+);", text, re.M):
        body = re.sub(r"\s+", "", m.group(1))
        head, _, tail = body.partition("::{")
        names = tail.rstrip("}").split(",") if tail else [head.split("::")[-1]]
        child = head.split("::")[0] if tail else "::".join(head.split("::")[:-1]).split("::")[0]
        if tuple(list(mod) + [child]) in files:
            for n in names:
                n = n.split("::")[-1].split(" as ")[-1]
                reexports.setdefault(mod, {})[n] = tuple(list(mod) + [child])

def resolve(parts):
    """The file that defines the item `parts` names."""
    for i in range(len(parts), 0, -1):
        if tuple(parts[:i]) in files:
            m = tuple(parts[:i])
            if i < len(parts) and parts[i] in reexports.get(m, {}):
                return reexports[m][parts[i]]
            return m
    return None

def uses(text):
    # Join multi-line `use` statements, then expand one level of braces.
    for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text, re.M):
        body = re.sub(r"\s+", "", m.group(1))
        stack = [("", body)]
        while stack:
            prefix, rest = stack.pop()
            b = rest.find("{")
            if b == -1:
                for item in rest.split(","):
                    if item:
                        yield prefix + item
                continue
            head, inner = rest[:b], rest[b + 1:rest.rfind("}")]
            depth, start, items = 0, 0, []
            for i, c in enumerate(inner):
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                elif c == "," and depth == 0:
                    items.append(inner[start:i])
                    start = i + 1
            items.append(inner[start:])
            for item in items:
                if item:
                    stack.append((prefix + head, item))

graph = {m: set() for m in files}
for mod, path in files.items():
    text = open(path, encoding="utf-8").read()
    # Tests may import anything.
    text = re.split(r"#\[cfg\(test\)\]", text)[0]
    # Paths written inline (`crate::visitor::router()`) count as much as `use` lines.
    code = re.sub(r"//[^\n]*", "", text)
    inline = [m.group(0) for m in re.finditer(r"\b(?:crate|super)(?:::\w+)+", code)]
    for u in list(uses(text)) + inline:
        u = u.split(" as ")[0]
        parts = u.split("::")
        if parts[0] == "crate":
            target = parts[1:]
        elif parts[0] in ("super", "self"):
            # A file's own module is `mod`; `super` is its parent, once per `super`.
            here = list(mod)
            rest = parts
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    here = here[:-1]
                rest = rest[1:]
            target = here + rest
        elif os.path.basename(path) in ("mod.rs", "lib.rs") and tuple(list(mod) + [parts[0]]) in files:
            # `use child::Item` in a module file names its own submodule.
            target = list(mod) + parts
        else:
            continue
        t = resolve([p for p in target if p not in ("self", "*")])
        # A module naming its own submodules (declaring and re-exporting them) is
        # containment, not an import.
        if t and t != mod and t[: len(mod)] != mod:
            graph[mod].add(t)

# Tarjan's strongly connected components.
index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in graph[v]:
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
            out.append(comp)
for v in graph:
    if v not in index:
        visit(v)

name = lambda m: "::".join(m) or "lib"
for comp in out:
    print("cycle: " + ", ".join(sorted(name(m) for m in comp)))
print(f"{len(out)} import cycles among {len(files)} files")
sys.exit(1 if out else 0)
