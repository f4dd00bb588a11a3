"""The package's layout: layers that only go down, and no import circles.

:data:`LAYERS` lists the package's parts lowest first; a module may import its own layer
and the layers below it, never one above (:func:`test_imports_only_go_down`). There is no
exceptions list: an upward import is fixed by moving the code to the layer it belongs to.

The import graph is read statically with ``ast`` (nothing is imported): every
``import`` and ``from ... import`` in a module, at its top level and inside functions
(a lazy import is still a dependency, only a later one), relative imports resolved;
imports under ``if TYPE_CHECKING:`` are left out (they never run: an annotation may name
the type of a module that imports this one, e.g. a pytest item naming its session).
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg``; importing ``a.b.c`` is an edge to ``a.b.c`` alone, not to the packages above
it (a package ``__init__`` that re-exports its submodules would otherwise put every
submodule that imports a sibling on a circle with its own package).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from pytest_kernelopt.settings import AGENT_BACKENDS

PACKAGE = "pytest_kernelopt"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# Import circles known when this test was written, as the edges that close them
# ("importer -> imported"). Each is a debt: a change that breaks the circle removes its
# edge here (the test fails while an allowlisted edge no longer closes a circle), and
# nothing may be added. Empty this list.
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()


# The layers, lowest first. An entry is a package or a module, relative to the package
# ("" is ``pytest_kernelopt`` itself, its front door); a module belongs to the longest
# entry that is it or a package above it. docs/architecture.md draws the same list.
LAYERS: list[tuple[str, list[str]]] = [
    ("errors", ["errors"]),
    ("records", ["records", "settings", "shard", "child"]),
    # Standard library only: the static checker's process (``python -S``) imports verify.static
    # and verify.limits, so the candidate language's checks sit below the candidate format.
    ("candidate language", ["launch", "measure", "verify.static", "verify.limits"]),
    ("candidate", ["candidate"]),
    ("capture", ["capture"]),
    ("config", ["interpret", "config", "templates"]),
    ("store", ["store"]),
    ("runs", ["runs"]),
    ("verify", ["verify"]),
    ("agents", ["agents"]),
    ("benchmark", ["benchmark"]),
    ("report", ["report"]),
    ("gitops", ["gitops"]),
    ("gate", ["gate"]),
    ("front", ["cli", "plugin", "demo", ""]),
]


# Inside agents/: the shared roles know no backend; the backends (every module the registry names:
# search/, claude/) import the shared roles and never each other (a walled layer: its entries may not
# import one another); the loop sits on top.
AGENT_LAYERS: list[tuple[str, list[str]]] = [
    ("shared roles", ["coder", "profiler", "reviewer", "harvest", "compile_choice", "ui"]),
    ("backends", sorted({backend.module for backend in AGENT_BACKENDS.values()})),
    ("loop", ["planner", "benchmarker", "keeper", "loop", "progress", "backends", "multi_gpu", "refresh", "tuning",
              ""]),
]


def _entry_of(module: str, root: str, layers: list[tuple[str, list[str]]]) -> tuple[int, str]:
    """(index in ``layers``, entry) of ``module``: the longest entry that is it or a package above it."""
    rel = module[len(root) + 1:] if module != root else ""
    found: tuple[int, str] | None = None
    for i, (_, entries) in enumerate(layers):
        for entry in entries:
            covers = rel == entry if entry == "" else (rel == entry or rel.startswith(entry + "."))
            if covers and (found is None or len(entry) > len(found[1])):
                found = (i, entry)
    assert found is not None, f"{module} is in no layer of {root}: add it to the layers in tests/test_layout.py"
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (a full dotted name); a module no entry covers fails."""
    return _entry_of(module, PACKAGE, LAYERS)[0]


def upward_edges(graph: dict[str, set[str]], root: str = PACKAGE, layers: list[tuple[str, list[str]]] = LAYERS,
                 walled: frozenset[str] = frozenset()) -> list[str]:
    """Every import among ``root``'s modules from a layer to a higher one, or between two entries of a
    walled layer, as ``importer (layer) -> imported (layer)``."""
    out = []
    inside = lambda m: m == root or m.startswith(root + ".")  # noqa: E731
    for importer, targets in sorted(graph.items()):
        if not inside(importer):
            continue
        low, low_entry = _entry_of(importer, root, layers)
        for target in sorted(t for t in targets if inside(t)):
            high, high_entry = _entry_of(target, root, layers)
            if high > low or (high == low and layers[low][0] in walled and high_entry != low_entry):
                out.append(f"{importer} ({layers[low][0]}) -> {target} ({layers[high][0]})")
    return out


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of ``from <level dots><node.module> import ...`` written in ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but the bodies of ``if TYPE_CHECKING:`` (they never run; their ``else`` does)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its body); read once per session (do not mutate)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else source)
            for target in targets:
                # ``import a.b.c`` names the module; keep the longest prefix that is one of ours.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (``[a, b, ..., a]``) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        start = min(component)
        # The shortest way back to ``start`` inside the component (breadth first).
        paths = {start: [start]}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & component):
                    if w == start:
                        found = paths[v] + [start]
                        break
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        cycles.append(found or sorted(component))
    return cycles


def test_the_graph_reads_relative_and_lazy_imports():
    graph = import_graph()
    assert f"{PACKAGE}.errors" in graph[f"{PACKAGE}.cli"]  # ``from .errors import ...`` at the top
    assert f"{PACKAGE}.agents" in graph[f"{PACKAGE}.cli"]  # ``from .agents import tune`` inside a function
    assert f"{PACKAGE}.records" in graph[f"{PACKAGE}.candidate.launch_space"]  # ``from ..records import``
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\n")
    assert sorted(n.names[0].name for n in _runtime_nodes(tree) if isinstance(n, ast.Import)) == ["b"]


def test_imports_only_go_down():
    upward = upward_edges(import_graph())
    assert not upward, f"{len(upward)} import(s) go up a layer:\n" + "\n".join(upward)


def test_the_agents_inner_walls_hold():
    """search/ and claude/ never import each other; the shared roles import neither, nor the loop."""
    agents = f"{PACKAGE}.agents"
    crossing = upward_edges(import_graph(), agents, AGENT_LAYERS, frozenset({"backends"}))
    assert not crossing, f"{len(crossing)} import(s) cross the agents' inner walls:\n" + "\n".join(crossing)


def test_every_layer_entry_exists():
    modules = set(import_graph())
    for root, layers in ((PACKAGE, LAYERS), (f"{PACKAGE}.agents", AGENT_LAYERS)):
        for name, entries in layers:
            for entry in entries:
                full = f"{root}.{entry}" if entry else root
                assert full in modules, f"layer {name!r}: {full} is no module of the package"


def test_the_layer_check_sees_an_upward_import():
    assert layer_of(f"{PACKAGE}.verify.static.checker") < layer_of(f"{PACKAGE}.candidate")
    assert layer_of(f"{PACKAGE}.verify.worker") > layer_of(f"{PACKAGE}.store")
    assert upward_edges({f"{PACKAGE}.errors": {f"{PACKAGE}.gate"}, f"{PACKAGE}.gate": {f"{PACKAGE}.errors"}}) == [
        f"{PACKAGE}.errors (errors) -> {PACKAGE}.gate (gate)"]
    agents = f"{PACKAGE}.agents"
    search, claude = f"{agents}.search.coder", f"{agents}.claude.coder"
    assert upward_edges({search: {claude, f"{agents}.coder"}, claude: set()}, agents, AGENT_LAYERS,
                        frozenset({"backends"})) == [f"{search} (backends) -> {claude} (backends)"]


def test_no_import_circles():
    graph = import_graph()
    for importer, imported in ALLOWED_CYCLE_EDGES:
        assert imported in graph.get(importer, set()), (
            f"allowlisted edge {importer} -> {imported} is gone: remove it from ALLOWED_CYCLE_EDGES")
    pruned = {m: {t for t in targets if (m, t) not in ALLOWED_CYCLE_EDGES} for m, targets in graph.items()}
    cycles = find_cycles(pruned)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)
    for edge in sorted(ALLOWED_CYCLE_EDGES):
        rest = {m: set(t) for m, t in pruned.items()}
        rest[edge[0]].add(edge[1])
        assert find_cycles(rest), f"allowlisted edge {edge[0]} -> {edge[1]} closes no circle any more: remove it"


def _drawn_path(entry: str) -> str:
    """How docs/architecture.md names a layer entry: ``verify/static/``, ``errors.py``."""
    if not entry:
        return f"{PACKAGE}/__init__.py"
    path = entry.replace(".", "/")
    return path + ("/" if (ROOT / path).is_dir() else ".py")


def test_the_architecture_page_draws_the_same_layers():
    """docs/architecture.md's "Layers" block names every entry of :data:`LAYERS`, each layer above the lower ones."""
    text = (ROOT.parent / "docs" / "architecture.md").read_text()
    block = text.split("## Layers", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    row_of: dict[str, int] = {}
    for row, line in enumerate(block.strip("\n").splitlines()):
        for token in line.split("(", 1)[0].split():  # what follows "(" is commentary
            row_of.setdefault(token, row)
    below: tuple[str, int] | None = None  # the lower layer's name and its topmost row
    for name, entries in LAYERS:
        paths = [_drawn_path(e) for e in entries]
        missing = [p for p in paths if p not in row_of]
        assert not missing, f"docs/architecture.md's layers do not name {missing} (layer {name!r})"
        rows = [row_of[p] for p in paths]
        assert below is None or max(rows) <= below[1], f"docs/architecture.md draws layer {name!r} below {below[0]!r}"
        below = (name, min(rows))
