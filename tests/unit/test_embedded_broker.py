"""The embedded broker writes each message whole before a consumer can see it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem

from airlock.workers.service.settings import Settings
from airlock.workers.tasks import embedded_broker
from airlock.workers.tasks.broker import broker_options


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
    with Connection("filesystem://", transport=embedded_broker.Transport,
                    transport_options=options) as conn:  # fmt: skip
        queue = conn.SimpleQueue("q")
        queue.put({"n": 1})
        message = queue.get(timeout=1)
        assert message.payload == {"n": 1}
        message.ack()
        queue.close()
    assert seen_mid_write == [[]]


def test_the_celery_app_uses_it_on_embedded_defaults(tmp_path: Path) -> None:
    from airlock.workers.tasks.broker import make_app

    app = make_app(Settings(broker_url="filesystem://", home=tmp_path))
    assert app.conf.broker_transport is embedded_broker.Transport
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, embedded_broker.Transport)
    redis = make_app(Settings(broker_url="redis://redis:6379/0")).conf.broker_transport
    assert redis is not embedded_broker.Transport


def test_its_folders_are_made_by_a_channel_not_by_loading_the_app(tmp_path: Path) -> None:
    from airlock.workers.tasks.broker import make_app

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


def test_kombus_own_put_shows_a_message_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pins the upstream behaviour ``embedded_broker.Channel._put`` works around (kombu's
    ``kombu/transport/filesystem.py``, ``Channel._put``, no upstream issue found): the
    file is created under its final ``.msg`` name, then locked and written, so a consumer
    polling the folder in between reads it empty. When a kombu release writes it whole
    before naming it, this fails: then drop the override."""
    options = broker_options(Settings(broker_url="filesystem://", home=tmp_path))
    queue_folder = Path(str(options["data_folder_in"]))
    queue_folder.mkdir(parents=True)
    seen_empty: list[str] = []

    def watching_lock(file: Any, flags: int) -> None:  # kombu locks it before writing
        seen_empty.extend(
            n for n in os.listdir(queue_folder) if n.endswith(".q.msg") and not file.tell()
        )

    monkeypatch.setattr(filesystem, "lock", watching_lock)
    monkeypatch.setattr(filesystem, "unlock", lambda file: None)
    with Connection(transport=filesystem.Transport, transport_options=options) as conn:
        channel = conn.default_channel
        assert type(channel) is filesystem.Channel  # kombu's own
        channel._put("q", {"n": 1})
    assert len(seen_empty) == 1, "kombu now writes a message whole: drop embedded_broker's _put"
