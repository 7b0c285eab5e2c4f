"""The embedded broker: kombu's filesystem transport, with messages written atomically.

kombu's own ``_put`` creates the message file under its final name, then writes
it; a consumer polling the folder can move and read the file in between, find
it empty, and its worker dies with ``JSONDecodeError`` (an "unrecoverable error"
for Celery). Seen here under the sweeper's and a producer's writes. This channel
writes to a hidden temporary name and renames it into place, which POSIX makes
atomic: a consumer sees a whole message or none.

kombu offers no extension point for it (no transport option, no hook): the channel
class is the way. The fix for upstream (kombu's ``kombu/transport/filesystem.py``,
``Channel._put``; no upstream issue or pull request was found): write the payload to a
name the consumer skips (a leading dot, in the same folder) and ``os.rename`` it to the
``.msg`` name. ``tests/unit/test_embedded_broker.py`` pins kombu's behaviour: it fails
when a kombu release writes a message whole before naming it (then drop this).

The folders are made when a channel is: by a process that publishes or consumes, not
by every process that loads the Celery app (a command that only reads runs leaves no
``.airlock/`` behind).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

FOLDERS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")
"""The transport's options that name a folder it uses."""


class Channel(filesystem.Channel):
    def __init__(self, connection: Any, **kwargs: Any) -> None:
        options = connection.client.transport_options
        for key in FOLDERS:
            if key in options:
                Path(options[key]).mkdir(parents=True, exist_ok=True)
        super().__init__(connection, **kwargs)

    # kombu's stubs give the base class and this one different signatures
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        partial = os.path.join(folder, f".partial-{uuid.uuid4()}")  # no consumer reads it
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.rename(partial, os.path.join(folder, name))
        except OSError as exc:  # as kombu's own says it
            raise ChannelError(f"Cannot add file {name!r} to directory {folder!r}") from exc


class Transport(filesystem.Transport):
    Channel = Channel
