"""Whose address a failed inbox sign-in counts against, with a real ``airlock api``
(uvicorn): the peer's, unless the peer is a proxy trusted by ``FORWARDED_ALLOW_IPS``
(uvicorn's setting; by default 127.0.0.1), whose ``X-Forwarded-For`` then names the
client. A client cannot pick the address it counts against."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from airlock.persistence.migrate import upgrade
from airlock.workers.service.sessions import PER_ADDRESS
from airlock.workers.testing import SECRET, TOKEN
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration


def sign_in(base: str, forwarded_for: str, token: str, name: str) -> int:
    answer = httpx.post(
        f"{base}/inbox/login",
        data={"token": token, "name": name},
        headers={"X-Forwarded-For": forwarded_for},
        timeout=30,
    )
    return answer.status_code


@pytest.mark.parametrize("trusted", [True, False], ids=["behind a trusted proxy", "direct"])
def test_a_failed_sign_in_counts_against_the_address_uvicorn_trusts(
    make_stack: StackFactory, tmp_path: Path, trusted: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'airlock.db'}"
    upgrade(url)
    stack = make_stack(
        AIRLOCK_DATABASE_URL=url, AIRLOCK_WEBHOOK_SECRET=SECRET, AIRLOCK_API_TOKEN=TOKEN
    )
    # this test's connections come from 127.0.0.1: a trusted proxy, or not
    base = stack.api(FORWARDED_ALLOW_IPS="127.0.0.1" if trusted else "192.0.2.1")
    for i in range(PER_ADDRESS):
        assert sign_in(base, "203.0.113.7", f"guess-{i}", f"n{i}") == 401
    assert sign_in(base, "203.0.113.7", TOKEN, "ann") == 429
    other = sign_in(base, "203.0.113.8", TOKEN, "ann")
    # trusted: another client behind the proxy; direct: the same peer, whatever it says
    assert other == (303 if trusted else 429)
