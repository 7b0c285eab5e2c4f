"""Airlock as it ships: the wheel installed in a virtualenv of its own, its commands run
from an empty folder with nothing but environment variables, against PostgreSQL (a
database of the test's own, empty until ``airlock db upgrade``) and Redis (the tests'
db number, as tests/integration/conftest.py chooses it)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from airlock.workers.testing import Process, wait_for
from tests.conftest import IN_CI, POSTGRES_URL, ROOT
from tests.integration.conftest import SHARED_REDIS

SOURCES = (
    "pyproject.toml", "README.md", "airlock", "alembic", "loop", "persistence", "providers",
    "workers",
)  # fmt: skip
"""What the Dockerfile's first stage copies to build the wheel: nothing else."""


def unavailable(message: str) -> None:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def shared(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A folder that all the pytest-xdist workers of this run share, held under a lock:
    the first to come makes what is in it, the others find it made."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = root / name
        folder.mkdir(exist_ok=True)
        yield folder


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as the image builds it: from a copy of its sources alone."""
    with shared(tmp_path_factory, "wheel") as tmp:
        built = sorted((tmp / "dist").glob("airlock-*.whl"))
        if built:
            return built[0]
        source = tmp / "src"
        shutil.rmtree(source, ignore_errors=True)  # a worker before this one failed
        source.mkdir()
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, source / name)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"),
             str(source)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        (wheel,) = (tmp / "dist").glob("airlock-*.whl")
        return wheel


@pytest.fixture(scope="session")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its dependencies (from the package index
    pip is configured with, as for the project's own); its ``bin`` folder."""
    with shared(tmp_path_factory, "venv") as folder:
        venv = folder / "airlock"
        if (venv / "bin" / "airlock").exists():
            return venv / "bin"
        shutil.rmtree(venv, ignore_errors=True)  # a worker before this one failed
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", str(wheel)],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            unavailable(f"could not install the wheel's dependencies: {done.stderr[-2000:]}")
        return venv / "bin"


def bare_env(bin_folder: Path, home: Path, **variables: str) -> dict[str, str]:
    """Only what a container would have: a PATH that finds ``airlock`` first, a HOME,
    and the variables given. Nothing of this test's own environment."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{bin_folder}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **variables,
    }


@pytest.fixture
def database() -> Iterator[str]:
    """A PostgreSQL database of this test's own, without tables."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:
        admin.dispose()
        unavailable(f"PostgreSQL at {POSTGRES_URL} is not reachable: {exc}")
    name = f"airlock_deploy_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(drivername="postgresql", database=name)
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def broker() -> str:
    """The tests' Redis db, emptied."""
    url = SHARED_REDIS
    try:
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
    except redis.RedisError as exc:
        unavailable(f"Redis at {SHARED_REDIS} is not reachable: {exc}")
    return url


class Processes:
    """Long-running commands of a test, each in its own process group, stopped at its
    end (TERM, then KILL)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Process] = []

    def start(self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path) -> Process:
        process = Process(name, argv, env, self.logs / f"{name}.log", cwd=cwd).start()
        self.started.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.started):
            process.stop()

    def logs_of(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.started)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Processes(logs)
    yield started
    started.stop()


def run(argv: list[str], env: Mapping[str, str], cwd: Path, timeout: float = 60) -> str:
    """Run a command to its end; its output, or an assertion naming what failed."""
    done = subprocess.run(
        argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stdout}{done.stderr}"
    return done.stdout


__all__ = ["Processes", "bare_env", "run", "wait_for"]
