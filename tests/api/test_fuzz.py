"""Property: no request generated from the OpenAPI schema makes the API answer 5xx."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from airlock.persistence.migrate import upgrade as migrate
from airlock.workers.testing import TOKEN
from tests.api.conftest import make_api

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _schema() -> schemathesis.BaseSchema:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="airlock-fuzz-"))
    url = f"sqlite:///{folder / 'fuzz.db'}"
    migrate(url)
    api = make_api(url)
    view = api.waiting()  # so that some generated requests find a waiting run
    del view
    return schemathesis.openapi.from_asgi("/openapi.json", api.client.app)


# a live stream answers until its run ends (the queue's never does): a client that reads
# each answer whole would wait forever; tests/api/test_streams.py covers their refusals
schema = _schema().exclude(path_regex=r"/stream$")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (case.method, case.path, response.text)
