from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.http.api import create_app
from airlock.workers.service import Service
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.registry import Registry
from airlock.workers.service.settings import Settings
from airlock.workers.testing import SECRET, TOKEN
from tests.issuer import Issuer

OLD_SECRET = "whsec_" + base64.b64encode(b"airlock-old-secret-0123456789abc").decode()


@dataclass
class Api:
    client: TestClient
    service: Service
    enqueued: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def create(self, agent: str = "w1", **extra: Any) -> dict[str, Any]:
        response = self.client.post(
            "/v1/runs", json={"agent": agent, "input": "mail 42", **extra}, headers=self.headers()
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/runs/{run_id}", headers=self.headers())
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def segment(self, run_id: str) -> None:
        self.service.run_segment(run_id, f"test-{uuid.uuid4().hex[:6]}")

    def waiting(self, agent: str = "w1") -> dict[str, Any]:
        run = self.create(agent)
        self.segment(run["id"])
        view = self.run(run["id"])
        assert view["status"] == "waiting_for_approval", view
        return view

    def approve(
        self,
        run_id: str,
        body: dict[str, Any],
        *,
        secret: str = SECRET,
        webhook_id: str | None = None,
        timestamp: float | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        data = raw if raw is not None else json.dumps(body).encode()
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        ts = int(timestamp if timestamp is not None else time.time())
        from datetime import UTC, datetime

        signature = Webhook(secret).sign(
            webhook_id, datetime.fromtimestamp(ts, UTC), data.decode(errors="replace")
        )
        sent = {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": signature,
            "content-type": "application/json",
        }
        if headers is not None:
            sent = headers
        return self.client.post(f"/v1/runs/{run_id}/approval", content=data, headers=sent)


def make_api(url: str, webhook_secret: str = f"{SECRET} {OLD_SECRET}", **extra: Any) -> Api:
    config = Settings.model_validate(
        {
            "database_url": url,
            "agents": "tests.integration.agents:AGENTS",
            "webhook_secret": webhook_secret,
            "api_token": TOKEN,
            **extra,
        }
    )
    enqueued: list[str] = []
    service = Service(
        store=RunStore(make_engine(url)),
        registry=Registry.from_paths(config.agents),
        enqueue=lambda run_id, delay=None: enqueued.append(run_id),
        operator_roles=config.operators,
        policy=PolicyHolder.load(config.policy, config.policy_shadow),
    )
    app = create_app(service, config, check_broker=lambda: None)
    return Api(TestClient(app), service, enqueued)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    """A local OIDC issuer (see ``tests.issuer``)."""
    with Issuer() as issuer:
        yield issuer


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    api = make_api(db_url)
    yield api
    api.service.store.engine.dispose()


@pytest.fixture(autouse=True)
def _issuer_answers_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local issuer answers in milliseconds, but a loaded machine (the suite's own
    workers and servers) can take longer than the shipped 2 s to serve its discovery
    and keys: a test that means a timeout sets its own."""
    from airlock.workers.http import issuer_keys

    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT", 20.0)
