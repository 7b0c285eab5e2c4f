"""The tests and benchmarks flush their Redis db: each takes its number from the
environment (``AIRLOCK_TEST_REDIS_DB``, ``AIRLOCK_BENCH_REDIS_DB``), read in one place
each, so that runs side by side on one Redis never flush each other's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "bench", "scripts", ".ci")
SUFFIXES = {".py", ".sh", ".toml", ".ini", ".cfg", ".yml", ".yaml", ""}
READERS = {
    "AIRLOCK_TEST_REDIS_DB": "tests/integration/conftest.py",
    "AIRLOCK_BENCH_REDIS_DB": "bench/common.py",
}
"""The one module that reads each variable; every other takes the URL from it."""

FIXED = [
    # a URL on the shared server (the default address) with a db of its own
    re.compile(r"redis://(127\.0\.0\.1|localhost|\[::1\])(:6379)?/"),
    # a db number appended to a server's URL
    re.compile(r"(?i)redis.*\+\s*f?[\"']/(\d|\{)"),
    # a db number handed to a client or to redis-cli
    re.compile(r"\bdb\s*=\s*\d"),
    re.compile(r"redis-cli\b.*\s-n\s*\d"),
]


def offences(path: Path, text: str) -> list[str]:
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = [
        f"{name}:{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if any(p.search(line) for p in FIXED)
    ]
    for variable, reader in READERS.items():
        if variable in text and name != reader:
            found.append(f"{name}: reads {variable} (only {reader} does)")
    return found


def scanned() -> list[Path]:
    files = [
        f
        for folder in SCANNED
        for f in sorted((ROOT / folder).rglob("*"))
        if f.is_file() and f.suffix in SUFFIXES and ".venv" not in f.parts
    ]
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def test_no_test_or_benchmark_picks_a_redis_db_of_its_own() -> None:
    files = scanned()
    assert {"conftest.py", "common.py"} <= {f.name for f in files}
    found = [o for f in files for o in offences(f, f.read_text(errors="replace"))]
    assert found == []


def test_the_checker_sees_fixed_db_numbers(tmp_path: Path) -> None:
    """What was in the tree before the dbs came from the environment."""
    bench = tmp_path / "bench.py"
    for line in (
        'REDIS = os.environ.get("AIRLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/12"',
        'broker = f"redis://127.0.0.1:6379/{redis_db}"',
        '("redis://127.0.0.1:6379/0", redis_broker.TRANSPORT),',
        "client = redis.Redis(host='localhost', db=3)",
        "redis-cli -n 11 flushdb",
    ):
        assert offences(bench, line), line
    assert offences(bench, 'DB = os.environ.get("AIRLOCK_TEST_REDIS_DB", "11")')
    for fine in (
        'REDIS_URL = os.environ.get("AIRLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")',
        'return f"redis://127.0.0.1:{self.port}/0"',  # a private server of its own
        'REDIS = {"AIRLOCK_BROKER_URL": "redis://redis:6379/0"}',  # never connected to
    ):
        assert offences(bench, fine) == [], fine
