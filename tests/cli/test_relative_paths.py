"""An SQLite file named relative to the folder the command runs in is shown by its
absolute path in every line that names it (issue 47, item 3: run from another folder,
the hint named a path that did not exist there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.persistence.db import shown_url
from tests.cli.test_cli import airlock, clean_env
from tests.cli.test_schema_cli import one_line


def test_shown_url_resolves_a_relative_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert shown_url("sqlite:///./airlock.db") == f"sqlite:///{tmp_path / 'airlock.db'}"
    assert shown_url("sqlite:///data/a.db") == f"sqlite:///{tmp_path / 'data' / 'a.db'}"
    assert shown_url("sqlite:////srv/a.db") == "sqlite:////srv/a.db"
    assert shown_url("sqlite://") == "sqlite://"  # in memory: no file
    assert shown_url("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"


def test_upgrade_names_the_file_it_made_by_its_absolute_path(tmp_path: Path) -> None:
    done = airlock("db", "upgrade", env=clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"database sqlite:///{tmp_path / 'airlock.db'} upgraded" in done.stdout


@pytest.mark.parametrize("command", [("runs", "list"), ("stats",), ("db", "upgrade")], ids=" ".join)
def test_a_relative_file_in_a_folder_not_there_is_named_absolutely(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    env = clean_env(AIRLOCK_DATABASE_URL="sqlite:///data/airlock.db")
    line = one_line(airlock(*command, env=env, cwd=tmp_path), "does not exist")
    assert f"the folder {tmp_path / 'data'} does not exist" in line
    assert "sqlite:///data" not in line
    assert list(tmp_path.iterdir()) == []


def test_from_another_folder_the_hint_names_the_file_there(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert airlock("db", "upgrade", env=clean_env(), cwd=tmp_path).returncode == 0
    line = one_line(airlock("runs", "list", env=clean_env(), cwd=other), "airlock db upgrade")
    assert f"the database file {other / 'airlock.db'} does not exist" in line
