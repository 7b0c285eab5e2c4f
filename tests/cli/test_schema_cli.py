"""The ``airlock`` command on a database that is not ready: one line naming the
problem and ``airlock db upgrade``, exit 3, and nothing left behind (no ``airlock.db``,
no ``.airlock/``)."""

from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from airlock.persistence.migrate import alembic_config, upgrade
from tests.cli.test_cli import airlock, clean_env
from tests.conftest import POSTGRES_URL

NOT_READY = 3
COMMANDS = [
    ("runs", "list"),
    ("stats",),
    ("run", "mailer", "mail 42"),
    ("approve", "r1"),
    ("runs", "show", "r1"),
    ("runs", "events", "r1"),
    ("cancel", "r1"),
    ("purge",),
]


def one_line(result: CompletedProcess[str], *words: str) -> str:
    assert result.returncode == NOT_READY, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_command_in_an_empty_folder_says_so_in_one_line_and_leaves_nothing(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    result = airlock(*command, env=clean_env(), cwd=tmp_path)
    file = tmp_path / "airlock.db"
    one_line(result, f"the database file {file} does not exist", "airlock db upgrade")
    assert list(tmp_path.iterdir()) == []


def test_a_database_that_does_not_exist_is_named(postgres_template: str, tmp_path: Path) -> None:
    del postgres_template  # PostgreSQL answers (skipped where it does not)
    name = f"airlock_absent_{uuid.uuid4().hex[:8]}"
    url = make_url(POSTGRES_URL).set(database=name, password="s3cret")
    env = clean_env(AIRLOCK_DATABASE_URL=url.render_as_string(hide_password=False))
    for command in (("runs", "list"), ("db", "upgrade")):
        line = one_line(airlock(*command, env=env, cwd=tmp_path), name, "does not exist")
        assert "s3cret" not in line
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_does_not_exist_is_named(tmp_path: Path) -> None:
    env = clean_env(AIRLOCK_DATABASE_URL=f"sqlite:///{tmp_path / 'gone' / 'airlock.db'}")
    one_line(airlock("stats", env=env, cwd=tmp_path), str(tmp_path / "gone"), "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_an_outdated_database_names_its_revision_then_upgrade_fixes_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'airlock.db'}"
    script = ScriptDirectory.from_config(alembic_config(url))
    head = script.get_current_head()
    assert head is not None
    older = script.get_revision(head).down_revision
    assert isinstance(older, str)
    upgrade(url, older)
    env = clean_env(AIRLOCK_DATABASE_URL=url, AIRLOCK_HOME=str(tmp_path / "home"))
    one_line(airlock("stats", env=env, cwd=tmp_path), older, head, "airlock db upgrade")

    assert airlock("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    listed = airlock("runs", "list", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert not (tmp_path / "home").exists()  # reading runs makes no broker folder


def test_tables_gone_under_a_running_command_are_one_line_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked ready, then the tables went (dropped, restored) before the command read
    them: a line and exit 3 still, not a traceback."""
    from airlock.workers.cli import app as cli_app
    from airlock.workers.cli import commands as cli
    from airlock.workers.service.settings import settings

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    monkeypatch.setenv("AIRLOCK_DATABASE_URL", f"sqlite:///{empty}")
    monkeypatch.setattr(cli_app, "ready_database", lambda: None)
    monkeypatch.setattr(sys, "argv", ["airlock", "runs", "list"])
    settings.cache_clear()
    cli_app.built.cache_clear()
    try:
        with pytest.raises(SystemExit) as exit:
            cli.main()
    finally:
        if cli_app.built.cache_info().currsize:
            cli_app.built().store.engine.dispose()
        settings.cache_clear()
        cli_app.built.cache_clear()
    assert exit.value.code == NOT_READY
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "airlock db upgrade" in lines[0], lines
