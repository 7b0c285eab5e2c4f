"""`loop/` imports only the standard library, pydantic and itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LOOP = Path(__file__).resolve().parents[2] / "loop"
ALLOWED = set(sys.stdlib_module_names) | {"pydantic", "loop", "__future__"}


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
    bad.write_text("import sqlalchemy\nfrom celery import Celery\nimport httpx.foo\n")
    assert imported_roots(bad) - ALLOWED == {"sqlalchemy", "celery", "httpx"}
