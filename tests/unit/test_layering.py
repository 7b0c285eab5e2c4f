"""`loop/` imports only the standard library (no network: not ``urllib``, ``http`` or
``socket``), pydantic and itself; and no package imports itself in a circle."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

LOOP = Path(__file__).resolve().parents[2] / "loop"
NETWORK = {"urllib", "http", "socket", "ssl", "asyncio"}
ALLOWED = (set(sys.stdlib_module_names) - NETWORK) | {"pydantic", "loop", "__future__"}
PACKAGES = ("loop", "persistence", "providers", "workers")


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


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
    graph = grimp.build_graph(*PACKAGES)
    cycles: set[tuple[str, ...]] = set()
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.add(tuple(sorted({importer, *back})))
    return sorted(cycles)


def test_no_module_imports_itself_in_a_circle() -> None:
    assert import_cycles() == []


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
