"""The ``airlock`` command imports what a command needs when it runs (issue 47, item 2:
``--help`` loaded SQLAlchemy, Celery and FastAPI, and took 1.2-2 s). What each command
loaded is checked here, never how long it took (``bench/cli_startup.py`` times them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import airlock, clean_env

PROBE = """
import json, sys
sys.argv = ["airlock", *json.loads(sys.argv[1])]
from airlock.workers.cli.launch import main
try:
    main()
except SystemExit:
    pass
with open({out!r}, "w") as f:
    json.dump(sorted(sys.modules), f)
"""

LIBRARIES = ("sqlalchemy", "alembic", "celery", "kombu", "fastapi", "starlette", "uvicorn")
HEAVY = (*LIBRARIES, "httpx", "pydantic_settings", "gevent", "jinja2")
AIRLOCK_ROOMS = ("airlock.loop", "airlock.persistence.db", "airlock.workers.service.core")


def loaded(args: list[str], tmp_path: Path, **env: str) -> set[str]:
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(out=str(out)), json.dumps(args)],
        env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text()))


def of(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted({m for m in modules for r in roots if m == r or m.startswith(r + ".")})


@pytest.mark.parametrize(
    "args",
    [["--help"], ["runs", "list", "--help"], ["approve", "--help"], ["purge", "--help"],
     ["runs", "events", "--help"], ["grants", "list", "--help"], ["policy", "check", "--help"]],
    ids=" ".join,
)  # fmt: skip
def test_help_loads_no_library_and_no_room(args: list[str], tmp_path: Path) -> None:
    modules = loaded(args, tmp_path)
    assert "airlock.workers.cli.commands" in modules  # the probe ran the command
    assert of(modules, HEAVY) == []
    assert of(modules, AIRLOCK_ROOMS) == []


def test_the_commands_list_loads_not_even_pydantic(tmp_path: Path) -> None:
    """A command's own ``--help`` loads pydantic through Typer, which coerces its
    parameters with it; the list of commands has none to coerce."""
    assert of(loaded(["--help"], tmp_path), ("pydantic",)) == []


def test_stats_on_an_empty_embedded_database_loads_no_broker_and_no_web(tmp_path: Path) -> None:
    assert airlock("db", "upgrade", env=clean_env(), cwd=tmp_path).returncode == 0
    modules = loaded(["stats"], tmp_path)
    assert "sqlalchemy" in modules  # it read the database
    assert of(modules, ("celery", "kombu", "fastapi", "starlette", "uvicorn", "gevent")) == []


def test_health_api_loads_no_broker_no_web_and_no_migrations(tmp_path: Path) -> None:
    modules = loaded(["health", "api", "--timeout", "0.5"], tmp_path, AIRLOCK_API_PORT="9")
    assert "httpx" in modules  # it asked
    assert of(modules, ("celery", "kombu", "fastapi", "uvicorn", "alembic")) == []


def test_a_command_that_publishes_still_does(tmp_path: Path) -> None:
    """``run`` loads the broker when it publishes (the service's publisher is lazy)."""
    env = clean_env(AIRLOCK_AGENTS="tests.integration.agents:AGENTS")
    assert airlock("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    started = airlock("run", "w1", "hello", "--json", env=env, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    queued = list((tmp_path / ".airlock").rglob("*.msg"))
    assert queued, "the run's wake-up was published to the embedded broker"
