"""``airlock dev`` keeps its API token and webhook secret across restarts (in
``$AIRLOCK_HOME/dev.env``, mode 0600), prints them, and ``--new-secrets`` replaces
them; a variable set in the environment wins."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from airlock.persistence.migrate import upgrade
from airlock.workers.cli.demo import dev_secrets, free_port, poll
from tests.cli.test_cli import airlock, clean_env

TOKEN = "AIRLOCK_API_TOKEN"
SECRET = "AIRLOCK_WEBHOOK_SECRET"


@contextmanager
def dev(folder: Path, *args: str) -> Iterator[tuple[dict[str, str], str]]:
    """``airlock dev`` started in ``folder``: what it printed of its secrets, and its
    API's address once it answers. Stopped as an operator does (Ctrl-C)."""
    port = free_port()
    out = folder / f"dev-{port}.out"
    env = clean_env(PYTHONUNBUFFERED="1", AIRLOCK_SOFT_SHUTDOWN_TIMEOUT="0")
    argv = [sys.executable, "-m", "airlock.workers", "dev", "--port", str(port), *args]
    with out.open("w") as sink:
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        poll("airlock dev's API", lambda: _answers(base) or proc.poll() is not None, 90, 0.2)
        assert proc.poll() is None, out.read_text()
        printed = dict(re.findall(rf"^({TOKEN}|{SECRET})=(\S+)$", out.read_text(), re.M))
        assert set(printed) == {TOKEN, SECRET}, out.read_text()
        yield printed, base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.unlink()


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def listed_with(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{base}/v1/runs", headers=headers, timeout=10).status_code


@pytest.mark.timeout(400)
def test_dev_keeps_its_token_and_secret_across_restarts_until_renewed(tmp_path: Path) -> None:
    with dev(tmp_path) as (first, base):
        assert listed_with(base, first[TOKEN]) == 200
    kept = tmp_path / ".airlock" / "dev.env"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600

    with dev(tmp_path) as (again, base):
        assert again == first  # a script's token, an inbox sign-in, still work
        assert listed_with(base, first[TOKEN]) == 200

    with dev(tmp_path, "--new-secrets") as (renewed, base):
        assert renewed[TOKEN] != first[TOKEN] and renewed[SECRET] != first[SECRET]
        assert listed_with(base, first[TOKEN]) == 401
        assert listed_with(base, renewed[TOKEN]) == 200
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_the_environment_wins_and_is_not_kept(tmp_path: Path) -> None:
    first = dev_secrets(tmp_path, {})
    assert set(first.origins.values()) == {"new"}
    assert stat.S_IMODE(first.file.stat().st_mode) == 0o600
    given = dev_secrets(tmp_path, {TOKEN: "a-token-of-my-own"})
    assert given.values[TOKEN] == "a-token-of-my-own" and given.origins[TOKEN] == "environment"
    assert given.values[SECRET] == first.values[SECRET] and given.origins[SECRET] == "kept"
    assert dev_secrets(tmp_path, {}).values == first.values  # the file still holds its own
    assert "a-token-of-my-own" not in first.file.read_text()


def test_secrets_all_given_are_neither_made_nor_kept(tmp_path: Path) -> None:
    given = dev_secrets(tmp_path, {TOKEN: "a-token-of-my-own", SECRET: "whsec_given"})
    assert set(given.origins.values()) == {"environment"}
    assert not given.file.exists()
    only_token = dev_secrets(tmp_path, {TOKEN: "a-token-of-my-own"})
    assert only_token.origins == {TOKEN: "environment", SECRET: "new"}
    assert "a-token-of-my-own" not in only_token.file.read_text()
    assert TOKEN not in only_token.file.read_text()  # nothing made for a given variable


def test_a_kept_file_readable_by_others_is_made_private(tmp_path: Path) -> None:
    first = dev_secrets(tmp_path, {})
    os.chmod(first.file, 0o644)
    assert dev_secrets(tmp_path, {}).values == first.values
    assert stat.S_IMODE(first.file.stat().st_mode) == 0o600


def test_dev_on_a_database_it_cannot_upgrade_says_so_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'airlock.db'}"
    upgrade(url)
    with sqlite3.connect(tmp_path / "airlock.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dcafe0099'")
    port = str(free_port())
    result = airlock("dev", "--port", port, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    # named by its absolute path (issue 47, item 3), however it was given
    assert f"cannot upgrade the database sqlite:///{tmp_path / 'airlock.db'}" in result.stdout
    assert "f00dcafe0099" in result.stdout and "Traceback" not in result.stdout + result.stderr


def test_dev_on_a_taken_port_says_so_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = airlock("dev", "--port", port, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"127.0.0.1:{port} is taken" in result.stdout and "--port" in result.stdout
    assert not (tmp_path / ".airlock").exists()  # no worker, no beat, no kept secrets
