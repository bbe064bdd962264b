"""The tests' own layout: a test module imports no other test module (nor itself); what several
tests share lives in a support module in `tests/` itself (docs/testing.md). Every import
statement counts, at module level and inside functions alike. The example plugin's package
(`tests/plugins`) is an installable distribution of its own, not the tests' code."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

TESTS = REPO / "tests"
PLUGINS = TESTS / "plugins"


def modules_of_tests(root: Path = TESTS) -> list[Path]:
    return sorted(p for p in root.rglob("test_*.py") if not p.is_relative_to(PLUGINS))


def _module_name(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def imported_test_modules(path: Path, root: Path = REPO) -> Iterator[tuple[int, str]]:
    """(line, module) for each test module that `path` imports, at any depth: `import
    a.test_b`, `from a.test_b import c`, `from a import test_b`, relative ones resolved, and
    those of the Python code in its strings (a script it runs, a plugin it writes)."""
    package = _module_name(path, root)[:-1]
    yield from sorted(_imports(ast.parse(path.read_text()), package, 0))


def _imports(tree: ast.AST, package: list[str], offset: int) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_test_module(alias.name):
                    yield offset + node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if _is_test_module(base):
                yield offset + node.lineno, base
                continue
            for alias in node.names:
                if _is_test_module(alias.name):
                    yield offset + node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Constant) and (code := _parsed(node.value)) is not None:
            yield from _imports(code, package, offset + node.lineno - 1)


def _parsed(value: object) -> ast.Module | None:
    """A string constant's text as Python, where it is code that imports."""
    if not isinstance(value, str) or "import" not in value:
        return None
    try:
        return ast.parse(value)
    except (SyntaxError, ValueError):
        return None


def test_no_test_module_imports_another_test_module() -> None:
    modules = modules_of_tests()
    assert len(modules) > 100
    found = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in modules
        for line, module in imported_test_modules(path)
    ]
    shared = "what several tests share belongs in a support module in tests/ itself"
    assert found == [], "\n".join([shared, *found])


def test_an_import_of_a_test_module_is_found_at_any_depth(tmp_path: Path) -> None:
    package = tmp_path / "tests" / "unit"
    package.mkdir(parents=True)
    module = package / "test_a.py"
    # Written as TEST_ and made test_ on the way, so that this module does not import them.
    source = (
        "from tests.coordinator_support import studied\n"
        "import tests.unit.TEST_b\n"
        "from tests.unit.TEST_c import helper\n"
        "from . import TEST_d\n"
        "def test_x():\n"
        "    from .TEST_e import other\n"
        'SCRIPT = """\n'
        "import sys\n"
        "from tests.unit.TEST_a import helper\n"
        '"""\n'
    )
    module.write_text(source.replace("TEST_", "test_"))

    assert modules_of_tests(tmp_path / "tests") == [module]
    assert list(imported_test_modules(module, tmp_path)) == [
        (2, "tests.unit.test_b"),
        (3, "tests.unit.test_c"),
        (4, "tests.unit.test_d"),
        (6, "tests.unit.test_e"),
        (9, "tests.unit.test_a"),
    ]
