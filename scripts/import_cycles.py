"""Import cycles between squall's modules: the strongly connected components of the import graph
(imports under `if TYPE_CHECKING:` and inside functions included, as import-linter sees them).

    .venv/bin/python scripts/import_cycles.py          # the package as installed (src/ here)

Prints one line per cycle (its modules) and the totals; exits 1 when there is a cycle, 0 when there
is none (tests/unit/test_code_rules.py runs it).
"""

from __future__ import annotations

import sys

import grimp


def cycles(package: str = "squall") -> list[list[str]]:
    graph = grimp.build_graph(package)
    modules = sorted(graph.modules)
    index = {m: i for i, m in enumerate(modules)}
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    # Tarjan's algorithm, iterative (the graph is small, but recursion limits are not worth it).
    low, num, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in modules:
        if root in num:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                num[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if nxt not in num:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], num[nxt])
                continue
            if low[node] == num[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component, key=index.__getitem__))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def main() -> int:
    found = cycles()
    for component in found:
        print(f"cycle of {len(component)} modules: {', '.join(component)}")
    print(f"{len(found)} import cycles, {sum(map(len, found))} modules in them")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
