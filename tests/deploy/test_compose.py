"""docker-compose.yml as Docker runs it (issue 27, done-when 2): each Airlock service's
``command`` and each ``healthcheck.test``, interpolated as Compose does and then run as
Docker does (exec form: no shell, no variable expansion; ``CMD-SHELL``: ``sh -c``),
with the service's environment (its hosts ``postgres`` and ``redis`` mapped to the
local servers), from an empty working folder, with the wheel's ``airlock``. And,
where a Docker daemon answers, ``docker compose up`` itself."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from airlock.workers.testing import free_port
from tests.conftest import ROOT
from tests.deploy.conftest import Processes, bare_env, run

pytestmark = pytest.mark.deploy

COMPOSE = ROOT / "docker-compose.yml"
DOTENV = {  # what an operator's .env holds (see .env.example)
    "AIRLOCK_WEBHOOK_SECRET": "whsec_Y29tcG9zZS10ZXN0LXdlYmhvb2stc2VjcmV0LTMy",
    "AIRLOCK_API_TOKEN": "compose-test-token-0123456789",
    "AIRLOCK_SWEEP_INTERVAL": "1",
    "AIRLOCK_SOFT_SHUTDOWN_TIMEOUT": "0",  # the test's worker stops at once
}
VARIABLE = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}|\$(\w+)")


def services() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    result: dict[str, Any] = loaded["services"]
    return result


def interpolate(value: str, shell: Mapping[str, str]) -> str:
    """Compose's interpolation of a value of the file: ``${VAR}``, ``${VAR:-default}``,
    ``${VAR:?error}`` (refused when unset or empty) and ``$$`` for a literal ``$``."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        found = shell.get(name, "")
        if match.group(2) == "-" and not found:
            return match.group(3)
        if match.group(2) == "?" and not found:
            raise AssertionError(f"compose refuses to start: {match.group(3)}")
        return found

    return "$".join(VARIABLE.sub(one, part) for part in value.split("$$"))


def environment(service: Mapping[str, Any], shell: Mapping[str, str]) -> dict[str, str]:
    """The variables Compose gives the service's container: a variable without a value
    is passed through from the shell (or .env) when set there, else left out."""
    env: dict[str, str] = {}
    for name, value in service.get("environment", {}).items():
        if value is None:
            if name in shell:
                env[name] = shell[name]
        else:
            env[name] = interpolate(str(value), shell)
    return env


def on_this_machine(env: dict[str, str], database: str, broker: str) -> dict[str, str]:
    """The service hosts ``postgres`` and ``redis`` mapped to the local servers (and the
    test's own database and Redis db)."""
    assert make_url(env["AIRLOCK_DATABASE_URL"]).host == "postgres"
    assert urlsplit(env["AIRLOCK_BROKER_URL"]).hostname == "redis"
    return {**env, "AIRLOCK_DATABASE_URL": database, "AIRLOCK_BROKER_URL": broker}


def as_docker_runs(test: list[str] | str) -> list[str]:
    """A healthcheck's argv: exec form as it is, ``CMD-SHELL`` (or a string) through
    ``sh -c``."""
    if isinstance(test, str):
        return ["sh", "-c", test]
    kind, *rest = test
    if kind == "CMD-SHELL":
        return ["sh", "-c", rest[0]]
    assert kind == "CMD", f"healthcheck {test} is neither CMD nor CMD-SHELL"
    return rest


def seconds(duration: str) -> float:
    return float(duration.removesuffix("s"))


def check(
    name: str, shell: Mapping[str, str], env: Mapping[str, str], cwd: Path
) -> tuple[bool, str]:
    """Run the service's healthcheck once, as Docker does: healthy on exit 0."""
    healthcheck = services()[name]["healthcheck"]
    test = healthcheck["test"]
    argv = as_docker_runs(
        [interpolate(w, shell) for w in test]
        if isinstance(test, list)
        else interpolate(test, shell)
    )
    try:
        done = subprocess.run(
            argv, env=dict(env), cwd=cwd, capture_output=True, text=True,
            timeout=seconds(healthcheck["timeout"]), check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"{argv}: timed out"
    return done.returncode == 0, f"{argv} exited {done.returncode}: {done.stdout}{done.stderr}"


def healthy(
    name: str, shell: Mapping[str, str], env: Mapping[str, str], cwd: Path, timeout: float = 90
) -> str:
    """Poll the healthcheck until it passes (Docker retries it every interval)."""
    deadline = time.monotonic() + timeout
    while True:
        ok, said = check(name, shell, env, cwd)
        if ok:
            return said
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}'s healthcheck never passed; last: {said}")
        time.sleep(0.5)


def test_every_service_runs_and_passes_its_healthcheck(
    installed: Path, database: str, broker: str, processes: Processes, tmp_path: Path
) -> None:
    folder = tmp_path / "workdir"  # the image's WORKDIR: an empty folder
    folder.mkdir()
    shell = {
        **DOTENV,
        "AIRLOCK_API_PORT": str(free_port()),
        "AIRLOCK_WORKER_METRICS_PORT": str(free_port()),
    }
    image = {"AIRLOCK_HOME": str(tmp_path / "var-lib-airlock"), "PYTHONUNBUFFERED": "1"}

    def env_of(name: str) -> dict[str, str]:
        compose_env = environment(services()[name], shell)
        mapped = on_this_machine(compose_env, database, broker)
        return bare_env(installed, tmp_path / "home", **{**image, **mapped})

    def command(name: str) -> list[str]:
        return [interpolate(word, shell) for word in services()[name]["command"]]

    run(command("migrate"), env_of("migrate"), folder)
    before, said = check("worker", shell, env_of("worker"), folder)
    assert not before, f"the worker's healthcheck passed with no worker: {said}"
    for name in ("api", "worker", "beat"):
        processes.start(name, command(name), env_of(name), folder)
    try:
        for name in ("api", "worker", "beat"):
            healthy(name, shell, env_of(name), folder)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{processes.logs_of()}") from exc


def test_the_image_gives_airlock_a_writable_home() -> None:
    """Beat keeps its schedule in AIRLOCK_HOME: the image sets it to a folder its user
    owns (issue 27, defect 1: /tmp/airlock did not exist in the image)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert "AIRLOCK_HOME=/var/lib/airlock" in final
    assert "chown airlock:airlock /var/lib/airlock" in final and "USER airlock" in final
    assert "pip install /wheels/" in final and "-e ." not in dockerfile
    assert "AIRLOCK_HOME" not in services()["beat"]["environment"]


def docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no `docker` command on this machine"
    info = subprocess.run(
        ["docker", "info"], capture_output=True, text=True, timeout=60, check=False
    )
    if info.returncode != 0:
        return f"`docker info` failed: {(info.stderr or info.stdout).strip()[:300]}"
    return None


def test_docker_compose_up(tmp_path: Path) -> None:
    problem = docker_problem()
    if problem:
        pytest.skip(f"the `docker compose up` smoke test needs a Docker daemon: {problem}")
    port = free_port()
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "".join(f"{k}={v}\n" for k, v in {**DOTENV, "AIRLOCK_API_PORT": str(port)}.items())
    )
    compose = [
        "docker", "compose", "-p", f"airlock-test-{uuid.uuid4().hex[:8]}",
        "-f", str(COMPOSE), "--env-file", str(dotenv),
    ]  # fmt: skip
    try:
        up = subprocess.run(
            [*compose, "up", "-d", "--build", "--wait", "--wait-timeout", "300"],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        listed = subprocess.run(
            [*compose, "ps", "--format", "json"], capture_output=True, text=True, check=True
        ).stdout
        states = (
            json.loads(listed)
            if listed.lstrip().startswith("[")
            else [json.loads(line) for line in listed.splitlines() if line.strip()]
        )
        for state in states:
            if state["Service"] in ("api", "worker", "beat"):
                assert state["Health"] == "healthy", state
    finally:
        subprocess.run([*compose, "down", "-v"], capture_output=True, timeout=300, check=False)
