"""No import cycle among the modules of autotune and workers, counting every import statement
that can run: at module level and inside functions alike (imports under `if TYPE_CHECKING:`
never run, so they do not count).

import-linter's contracts in pyproject.toml state the layers and forbid cycles between the
packages of each level; this walks the statements themselves. An import of `a.b.c` also
initializes the packages `a` and `a.b`: that runs their `__init__`'s module-level statements,
not the bodies of its functions, so those edges go to a package's initialization (a node of
its own, `a.b (init)`), which imports what its module-level statements import. The importing
module's own ancestors are already initializing when it is imported, so they do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

ROOTS = ("autotune", "workers")

Graph = dict[str, set[str]]
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    files = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _runnable(node: ast.AST, into_functions: bool = True) -> Iterator[ast.AST]:
    """Every node that can run, in classes and blocks, in functions unless `into_functions` is
    false, never in the body of an `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _runnable(other, into_functions)
            continue
        if not into_functions and isinstance(child, FUNCTIONS):
            continue
        yield child
        yield from _runnable(child, into_functions)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(path: Path, module: str, init_only: bool = False) -> Iterator[str]:
    """The names the module's import statements import (`from a import b` imports `a.b`, a
    module or a name of `a`): all of them, or with `init_only` those that run when it is
    imported (not those inside functions)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text())
    nodes = _runnable(tree, into_functions=not init_only)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path = REPO, packages: tuple[str, ...] = ROOTS) -> Graph:
    files = module_files(root, packages)
    graph: Graph = {}
    for module, path in files.items():
        graph[module] = _targets(module, imported_names(path, module), files)
        if path.name == "__init__.py":
            names = imported_names(path, module, init_only=True)
            graph[f"{module} (init)"] = _targets(module, names, files)
    return graph


def _targets(module: str, names: Iterator[str], files: dict[str, Path]) -> set[str]:
    """The modules `names` import, and the initialization of each package on the way."""
    targets = set()
    for name in names:
        parts = name.split(".")
        named = next(
            (
                ".".join(parts[:end])
                for end in range(len(parts), 0, -1)
                if ".".join(parts[:end]) in files
            ),
            None,
        )
        if named is None or named == module:
            continue
        targets.add(named)
        for end in range(1, named.count(".") + 1):
            package = ".".join(parts[:end])
            if package != module and not module.startswith(package + "."):
                targets.add(f"{package} (init)")
    return targets


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_modules_of_autotune_and_workers() -> None:
    graph = import_graph()
    assert {"autotune.core.contract", "workers.runner"} <= set(graph)
    assert "workers.building.knobs" in graph["workers.building.runtimes"]

    assert cycles(graph) == []


def test_an_import_inside_a_function_closes_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import c\n"
        "def thing():\n    from pkg.a import thing as other\n    return other\n"
    )
    (package / "c.py").write_text("import pkg.a\n")

    graph = import_graph(tmp_path, ("pkg",))

    assert graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
