"""`loop/` imports only the standard library (no network: not ``urllib``, ``http`` or
``socket``), pydantic and itself; no package imports itself in a circle; and nothing
imports the repository's folders by their own names (``loop``, ``workers``, …): they are
``airlock.loop``, ``airlock.workers``, …, as the wheel installs them."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

LOOP = Path(__file__).resolve().parents[2] / "loop"
NETWORK = {"urllib", "http", "socket", "ssl", "asyncio"}
ALLOWED = (set(sys.stdlib_module_names) - NETWORK) | {"pydantic", "airlock.loop", "__future__"}
PACKAGES = ("loop", "persistence", "providers", "workers")
"""The repository's folders, each ``airlock.<name>``."""


def imported_roots(path: Path) -> set[str]:
    """The top-level packages ``path`` imports (``airlock.<package>`` for ours)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(_root(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(_root(node.module))
    return roots


def _root(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "airlock" and len(parts) > 1 else parts[0]


def test_loop_imports_only_stdlib_and_pydantic() -> None:
    files = sorted(LOOP.rglob("*.py"))
    assert files, "no loop sources found"
    offenders = {
        str(f.relative_to(LOOP)): sorted(imported_roots(f) - ALLOWED)
        for f in files
        if imported_roots(f) - ALLOWED
    }
    assert offenders == {}


def test_the_checker_sees_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sqlalchemy\nfrom celery import Celery\nimport httpx.foo\n"
        "import urllib.request\nfrom http import client\nimport socket\n"
    )
    assert imported_roots(bad) - ALLOWED == {
        "sqlalchemy", "celery", "httpx", "urllib", "http", "socket",
    }  # fmt: skip


def import_cycles() -> list[tuple[str, ...]]:
    """Each circle of imports among our modules (at any depth, lazy imports too), as
    the shortest chain that closes it."""
    graph = grimp.build_graph("airlock")
    cycles: set[tuple[str, ...]] = set()
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.add(tuple(sorted({importer, *back})))
    return sorted(cycles)


def test_no_module_imports_itself_in_a_circle() -> None:
    assert import_cycles() == []


def test_nothing_imports_the_folders_by_their_own_names() -> None:
    """In a checkout they would import (pytest puts the root on the path), as a second
    copy of every module beside ``airlock.<name>``; installed, they are not there."""
    root = LOOP.parent
    sources = [
        p
        for folder in (*PACKAGES, "tests", "bench", "examples", "alembic", "airlock")
        for p in sorted((root / folder).glob("**/*.py"))
        if not (root / folder).is_symlink()
    ]
    assert len(sources) > 100
    offenders = {
        str(p.relative_to(root)): sorted(imported_roots(p) & set(PACKAGES)) for p in sources
    }
    assert {path: found for path, found in offenders.items() if found} == {}


WORKERS = LOOP.parent / "workers"
DOORS = ("http", "tasks", "cli")


def entry_points() -> list[Path]:
    """Every module of the doors, and the views they show the service's objects by."""
    found = [path for door in DOORS for path in sorted((WORKERS / door).rglob("*.py"))]
    return [*found, WORKERS / "service" / "views.py"]


def reaches_the_store(path: Path) -> list[int]:
    """Lines of ``path`` that read an attribute named ``store`` (the service's)."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("store", "repo")
    )


def test_entry_points_go_through_the_service_alone() -> None:
    paths = entry_points()
    assert len(paths) > len(DOORS), "no door modules found"
    offenders = {str(path.relative_to(WORKERS)): reaches_the_store(path) for path in paths}
    assert {name: lines for name, lines in offenders.items() if lines} == {}


def test_the_door_check_sees_a_store_reached(tmp_path: Path) -> None:
    shell = tmp_path / "shell.py"
    shell.write_text("def f(service):\n    return service.store.runs.get('x')\n")
    assert reaches_the_store(shell) == [2]


PRODUCT = LOOP.parent
MIGRATIONS = PRODUCT / "persistence" / "migrations" / "versions"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def product_modules() -> list[Path]:
    """The product's modules; a migration is a record of the schema, written once."""
    return [
        path
        for package in PACKAGES
        for path in sorted((PRODUCT / package).rglob("*.py"))
        if MIGRATIONS not in path.parents
    ]


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_module_over_400_lines_and_no_function_over_50() -> None:
    modules = product_modules()
    assert len(modules) > len(PACKAGES), "no product modules found"
    long_modules = {
        str(path.relative_to(PRODUCT)): n
        for path in modules
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    functions = {
        str(path.relative_to(PRODUCT)): found for path in modules if (found := long_functions(path))
    }
    assert long_modules == {}
    assert functions == {}


def test_the_size_check_sees_a_long_function(tmp_path: Path) -> None:
    source = tmp_path / "long.py"
    source.write_text("def f():\n" + "    x = 1\n" * 50 + "\n\ndef g():\n    return 1\n")
    assert long_functions(source) == ["f (51 lines)"]
