"""The embedded broker writes each message whole before a consumer can see it."""

from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

import pytest
from kombu import Connection
from kombu.transport import filesystem

from airlock.workers.service import embedded_broker
from airlock.workers.service.broker import broker_options
from airlock.workers.service.settings import Settings


def test_a_message_appears_only_when_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = broker_options(Settings(broker_url="filesystem://", home=tmp_path))
    queue_folder = Path(str(options["data_folder_in"]))
    seen_mid_write: list[list[str]] = []
    rename = os.rename

    def watching_rename(src: str, dst: str) -> None:
        if Path(src).name.startswith(".partial-"):  # the producer publishing
            # what a polling consumer would list while the message is being written
            seen_mid_write.append([n for n in os.listdir(queue_folder) if n.endswith(".q.msg")])
            assert Path(src).read_bytes()  # the content is all there before the name is
        rename(src, dst)

    monkeypatch.setattr(os, "rename", watching_rename)
    with Connection("filesystem://", transport=embedded_broker.TRANSPORT,
                    transport_options=options) as conn:  # fmt: skip
        queue = conn.SimpleQueue("q")
        queue.put({"n": 1})
        message = queue.get(timeout=1)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()
    assert seen_mid_write == [[]]


def test_the_celery_app_uses_it_on_embedded_defaults(tmp_path: Path) -> None:
    from airlock.workers.service.broker import make_app

    app = make_app(Settings(broker_url="filesystem://", home=tmp_path))
    assert app.conf.broker_transport == embedded_broker.TRANSPORT
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, embedded_broker.Transport)
    redis = make_app(Settings(broker_url="redis://redis:6379/0")).conf.broker_transport
    assert redis != embedded_broker.TRANSPORT


def test_its_folders_are_made_by_a_channel_not_by_loading_the_app(tmp_path: Path) -> None:
    from airlock.workers.service.broker import make_app

    home = tmp_path / "home"
    app = make_app(Settings(broker_url="filesystem://", home=home))
    assert not home.exists()
    with app.connection_for_write() as conn:
        conn.default_channel  # noqa: B018 - made on first use
        assert sorted(p.name for p in (home / "broker").iterdir()) == [
            "control",
            "processed",
            "queue",
        ]


def test_the_override_matches_the_pinned_kombu() -> None:
    """``embedded_broker.Channel._put`` replaces kombu's: when kombu changes its own,
    this fails, so that someone checks whether the override is still needed."""
    source = inspect.getsource(filesystem.Channel._put)
    assert hashlib.sha256(source.encode()).hexdigest() == embedded_broker.KOMBU_PUT, (
        "kombu's filesystem Channel._put changed: check whether it now writes a message "
        "atomically (then drop workers/embedded_broker.py's _put), else update KOMBU_PUT"
    )
