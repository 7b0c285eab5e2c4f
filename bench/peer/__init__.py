"""The peer that bench.approval_path and bench.w2 measure Airlock against, run in its own
virtualenv (``python -m bench.peer`` makes it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import progress

HERE = Path(__file__).parent
VENV = HERE.parent / ".peer-venv"
REQUIREMENTS = HERE / "requirements.txt"


def ready() -> bool:
    """Whether bench/.peer-venv exists with the current requirements."""
    stamp = VENV / "requirements.txt"
    return (
        (VENV / "bin" / "python").exists()
        and stamp.exists()
        and stamp.read_text() == REQUIREMENTS.read_text()
    )


MAKE = ".venv/bin/python -m bench.peer"
"""The command that makes (or refreshes) the peer's virtualenv."""


def python() -> Path:
    """The peer's interpreter: bench/.peer-venv, made and filled from requirements.txt
    when it is missing or its requirements changed."""
    exe = VENV / "bin" / "python"
    stamp = VENV / "requirements.txt"
    wanted = REQUIREMENTS.read_text()
    if exe.exists() and stamp.exists() and stamp.read_text() == wanted:
        return exe
    progress(f"installing the peer into {VENV} (once)…")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run(
        [
            str(exe),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    stamp.write_text(wanted)
    return exe


def versions() -> dict[str, str]:
    out = subprocess.run(
        [str(python()), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wanted = {"langgraph", "langgraph-checkpoint-postgres", "psycopg"}
    return {p["name"]: p["version"] for p in json.loads(out) if p["name"] in wanted}


def langgraph_w1(database_url: str, n: int) -> dict[str, Any]:
    """W1 on LangGraph + PostgresSaver (durability "sync"), ``n`` runs one after the other
    in one process against ``database_url`` (a libpq URL): per-run seconds and the
    wall time of all ``n``."""
    result = subprocess.run(
        [str(python()), str(HERE / "langgraph_w1.py"), database_url, str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def langgraph_w2(
    database_url: str,
    model_url: str,
    *,
    clients: int,
    seconds: float,
    warmup: float,
    pool: int,
    poll: float = 0.25,
) -> list[str]:
    """The command of W2 on LangGraph + AsyncPostgresSaver, one process (see
    bench/peer/langgraph_w2.py): the caller runs it and measures it from outside."""
    return [
        str(python()), str(HERE / "langgraph_w2.py"), database_url, model_url,
        str(clients), str(seconds), str(warmup), str(pool), str(poll),
    ]  # fmt: skip
