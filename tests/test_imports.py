"""No import cycles between the project's packages.

A package here is a unit a reader can take on its own: each subpackage or module directly under `hybrid/`
(`hybrid.graph`, `hybrid.plan`, `hybrid.swap`, `hybrid.device`, ...; deeper folders such as
`hybrid.cli.commands` belong to their top one), the root `hybrid/__init__.py` (the public facade), and the
other top-level folders as wholes (`ga`, `milp`, `executor`).

Every `import` and `from ... import` in a module's source counts, wherever it stands: at module level, inside a
function, or under `if TYPE_CHECKING:`. A function-level import defers loading, not the dependency: a cycle
that only lazy imports keep from failing at import time still means neither package can be read, tested or
changed without the other, which is what the cycle rule is about. Implicit parent imports (loading
`hybrid/__init__.py` before `hybrid.graph.types`) are not counted: no line of the project asks for them.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("hybrid", "ga", "milp", "executor")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the top-level folders."""
    out: dict[str, Path] = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def unit(module: str) -> str | None:
    """The package a module belongs to for the cycle rule, or None outside the project."""
    parts = module.split(".")
    if parts[0] not in TOP:
        return None
    if parts[0] == "hybrid":
        return ".".join(parts[:2])
    return parts[0]


def _imported(tree: ast.AST, module: str, is_init: bool, known: set[str] | dict[str, Path]) -> set[str]:
    """Absolute names of every module imported anywhere in `tree` (for `from P import x`: P.x where that is a
    module in `known`, else P)."""
    package = module if is_init else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.update(f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names)
    return names


def package_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> {imported unit: [the modules of `unit` whose imports make the edge]} (no self edges)."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    modules = _modules()
    for module, path in modules.items():
        src = unit(module)
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _imported(tree, module, path.name == "__init__.py", modules):
            dst = unit(name)
            if dst is not None and dst != src and module not in edges[src][dst]:
                edges[src][dst].append(module)
        edges.setdefault(src, defaultdict(list))
    return edges


def components(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def a_cycle(edges: dict[str, dict[str, list[str]]], comp: list[str]) -> list[str]:
    """One shortest cycle through the component's first unit, as units, first repeated at the end."""
    start = comp[0]
    inside = set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, {})):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def describe(edges: dict[str, dict[str, list[str]]], cycle: list[str]) -> str:
    steps = [f"{a} -> {b} (in {', '.join(edges[a][b][:3])})" for a, b in zip(cycle, cycle[1:])]
    return "; ".join(steps)


def test_the_graph_sees_known_edges():
    edges = package_graph()
    assert "hybrid.graph" in edges["hybrid.swap"]
    assert "hybrid.swap" in edges["hybrid.bounds"]     # only inside functions (recomputable_ops)
    assert "ga" in edges["hybrid.refine"]               # ga.algorithm under TYPE_CHECKING, ga.evaluation in a function
    assert "hybrid.swap" in edges["ga"]
    assert "hybrid.plan" in edges["executor"]
    assert {"hybrid.device", "hybrid.graph", "hybrid.plan"} <= set(edges["hybrid"])


def test_no_import_cycle_between_packages():
    edges = package_graph()
    cycles = [describe(edges, a_cycle(edges, c)) for c in components(edges)]
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_the_cycle_finder_finds_a_planted_cycle():
    edges = {"a": {"b": ["a.x"]}, "b": {"c": ["b.y"]}, "c": {"a": ["c.z"]}, "d": {"a": ["d.w"]}}
    comps = components(edges)
    assert comps == [["a", "b", "c"]]
    assert a_cycle(edges, comps[0]) == ["a", "b", "c", "a"]


def test_public_import_paths_of_the_top_level_folders_stay():
    """The names README and docs import from the top-level folders (renames inside them must not move these)."""
    import importlib

    public = {"hybrid": ["Device", "PRESETS", "Graph", "Plan", "Event", "HybridError", "FormatError"],
              "hybrid.device": ["preset", "resolve_device", "Device"],
              "ga": ["GAConfig", "optimize", "SearchResult"],
              "executor": ["execute", "Executor", "train_eager"],
              "milp.api": ["plan_milp"]}
    for module, names in public.items():
        mod = importlib.import_module(module)
        missing = [n for n in names if not hasattr(mod, n)]
        assert not missing, f"{module} lost {missing}"
