"""No import circles among dpaudit's modules (docs/architecture.md, "Layers"): the import graph of the installed
layout (grimp, import-linter's engine; imports inside functions count) must have no strongly connected component
of two or more modules. Run by .ci/lint_imports.sh (make lint) from the folder that holds the copied package."""

from __future__ import annotations

import sys

import grimp


def cycles(package: str = "dpaudit") -> list[list[str]]:
    graph = grimp.build_graph(package, cache_dir=None)
    mods = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in mods}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):  # Tarjan's strongly connected components, iteratively deep graphs are small here
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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

    sys.setrecursionlimit(10_000)
    for m in mods:
        if m not in index:
            visit(m)
    return out


def main() -> int:
    found = cycles()
    for comp in found:
        print("import circle: " + " <-> ".join(comp))
    if found:
        print(f"{len(found)} import circle(s); break each by moving the shared piece into a module both import")
        return 1
    print("no import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
