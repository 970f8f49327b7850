"""wikinotify's import graph stays one-directional (docs/journey.md#where-the-code-lives): no two
modules import each other, even through others, when Python loads them; the configuration imports
nothing of wikinotify; the routes (``blueprint``) and the jobs sit on top, and nothing below them
imports them."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.app import ROOT

PACKAGE = Path(ROOT) / "wikinotify"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of wikinotify modules made while it loads: module-level
    statements only (an import inside a function, or under ``TYPE_CHECKING``, is not)."""
    paths = {
        module_name(p): p for p in PACKAGE.rglob("*.py") if "versions" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found: set[str] = set()
        pending = list(ast.parse(path.read_text()).body)
        while pending:
            node = pending.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in paths else base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            else:
                pending.extend(ast.iter_child_nodes(node))
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while (top := stack.pop()) != module:
                group.append(top)
            if group:
                groups.append(sorted([module, *group]))

    for module in graph:
        if module not in index:
            visit(module)
    return groups


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_the_layers_point_one_way():
    graph = import_graph()
    assert graph["wikinotify.config"] == set()
    top = ("wikinotify.blueprint", "wikinotify.jobs")
    allowed_above = {"wikinotify", "wikinotify.extension", "wikinotify.blueprint",
                     "wikinotify.jobs"}
    for module, imports in graph.items():
        if module.startswith(top) or module in allowed_above:
            continue
        reaching_up = sorted(m for m in imports if m.startswith(top))
        assert not reaching_up, f"{module} imports {reaching_up}, which sit above it"


def test_the_check_sees_a_cycle_when_there_is_one():
    """The checker itself: a made-up graph with a loop through three modules."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
