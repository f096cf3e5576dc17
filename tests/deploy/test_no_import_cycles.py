"""No import circle in production code: the import graph of `app` has no cycle.

A cycle hides which module is the lower one, makes import order matter (a name read while its module is
still half-initialised) and blocks the layers contracts from ever describing the code. The graph is
grimp's (the one lint-imports checks the contracts on), built from this checkout's `app`. Imports under
`if TYPE_CHECKING:` are left out (`exclude_type_checking_imports`): they never run, so a module may name a
type of a module that imports it. Imports inside functions count: they run, only later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp

import app
from tests.deploy import support


def strongly_connected(modules: Iterable[str], imports: dict[str, set[str]]) -> Iterator[list[str]]:
    """Tarjan's strongly connected components of more than one module (iterative: the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports[target]))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        yield sorted(component)


def import_graph() -> dict[str, set[str]]:
    assert Path(app.__file__).resolve().parent == support.ROOT / "app", "grimp must read this checkout's app"
    graph = grimp.build_graph("app", exclude_type_checking_imports=True, cache_dir=None)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def test_the_search_finds_a_planted_cycle() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert list(strongly_connected(sorted(imports), imports)) == [["a", "b", "c"]]


def test_production_code_has_no_import_cycle() -> None:
    imports = import_graph()
    assert len(imports) > 100, "the graph of app is missing most of its modules"
    cycles = list(strongly_connected(sorted(imports), imports))
    described = [", ".join(f"{m} -> {sorted(imports[m] & set(cycle))}" for m in cycle) for cycle in cycles]
    assert not cycles, "import cycles in app (each: module -> the members it imports):\n" + "\n".join(
        described
    )
