"""The wake-up publisher (``airlock.workers.tasks.broker.Publisher``) against a real Redis: its
message is the one Celery's ``send_task`` publishes, a dropped connection is
replaced, and a forked child never shares its parent's."""

from __future__ import annotations

import base64
import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import kombu.exceptions
import pytest
import redis
from celery import Celery

from airlock.workers.service.settings import Settings
from airlock.workers.tasks.broker import QUEUE, RUN_SEGMENT, make_app
from airlock.workers.tasks.publisher import Publisher


@pytest.fixture
def celery(shared_redis: str, tmp_path: Path) -> Celery:
    return make_app(Settings(broker_url=shared_redis, home=tmp_path / "home"))


def queued(url: str) -> list[dict[str, Any]]:
    """The messages waiting in the queue, oldest first, their bodies decoded."""
    client = redis.Redis.from_url(url)
    try:
        raw = [json.loads(m) for m in reversed(client.lrange(QUEUE, 0, -1))]
    finally:
        client.close()
    for message in raw:
        message["body"] = json.loads(base64.b64decode(message["body"]))
    return raw


def test_a_wake_up_is_the_message_celery_publishes(celery: Celery, shared_redis: str) -> None:
    task_id = Publisher(celery, QUEUE)(RUN_SEGMENT, ("run-1",))
    celery.send_task(RUN_SEGMENT, ("run-2",))
    ours, celerys = queued(shared_redis)
    assert ours["headers"]["id"] == task_id
    assert ours["body"][0] == ["run-1"] and celerys["body"][0] == ["run-2"]
    assert ours["body"][1:] == celerys["body"][1:]  # kwargs, callbacks, chain…
    assert set(ours["headers"]) == set(celerys["headers"])
    for same in ("lang", "task", "retries", "eta", "expires", "timelimit", "group", "kwargsrepr"):
        assert ours["headers"][same] == celerys["headers"][same], same
    for same in ("content-type", "content-encoding"):
        assert ours[same] == celerys[same]
    for same in ("delivery_mode", "delivery_info", "priority", "body_encoding"):
        assert ours["properties"][same] == celerys["properties"][same], same


def test_a_dropped_connection_is_replaced(celery: Celery, shared_redis: str) -> None:
    publish = Publisher(celery, QUEUE)
    publish(RUN_SEGMENT, ("before",))
    admin = redis.Redis.from_url(shared_redis)
    killed = admin.client_kill_filter(_type="normal", skipme=True)
    admin.close()
    assert killed >= 1
    publish(RUN_SEGMENT, ("after",))
    assert [m["body"][0] for m in queued(shared_redis)] == [["before"], ["after"]]


def test_a_failed_publish_goes_celerys_own_way(
    celery: Celery, shared_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish = Publisher(celery, QUEUE)
    publish(RUN_SEGMENT, ("first",))
    failing = publish._local.producer
    monkeypatch.setattr(failing, "publish", _raise(ConnectionResetError("reset by peer")))
    task_id = publish(RUN_SEGMENT, ("second",))  # through send_task, the same task id
    publish(RUN_SEGMENT, ("third",))  # on a new producer
    assert publish._local.producer is not failing
    messages = queued(shared_redis)
    assert [m["body"][0] for m in messages] == [["first"], ["second"], ["third"]]
    assert messages[1]["headers"]["id"] == task_id
    # both ways failing: the caller hears of it (the run waits for the sweeper)
    monkeypatch.setattr(Publisher, "_producer", _raise(ConnectionRefusedError("down")))
    monkeypatch.setattr(celery, "send_task", _raise(ConnectionRefusedError("down")))
    with pytest.raises(ConnectionRefusedError):
        publish(RUN_SEGMENT, ("fourth",))
    assert len(queued(shared_redis)) == 3


@pytest.mark.timeout(60)
def test_a_broker_that_is_down_is_an_error_not_a_hang(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    celery = make_app(Settings(broker_url=f"redis://127.0.0.1:{port}/0", home=tmp_path))
    with pytest.raises(kombu.exceptions.OperationalError):
        Publisher(celery, QUEUE)(RUN_SEGMENT, ("run",))


def _raise(exc: Exception) -> Any:
    def fail(*_: object, **__: object) -> None:
        raise exc

    return fail


def test_a_forked_child_publishes_on_its_own_connection(celery: Celery, shared_redis: str) -> None:
    publish = Publisher(celery, QUEUE)
    publish(RUN_SEGMENT, ("parent",))
    parents = publish._local.connection
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a threaded process
        pid = os.fork()
    if pid == 0:  # the child: say by the exit code whether it kept the parent's connection
        code = 2 if getattr(publish._local, "connection", None) is not None else 0
        try:
            publish(RUN_SEGMENT, ("child",))
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    publish(RUN_SEGMENT, ("parent again",))
    assert publish._local.connection is parents  # not dropped, nor closed by the child
    bodies = [m["body"][0] for m in queued(shared_redis)]
    assert bodies == [["parent"], ["child"], ["parent again"]]
