"""The embedded broker: Celery's filesystem transport, safe with concurrent publishers.

Kombu's filesystem transport writes a message file in place while consumers
move files away without taking the writer's lock, so a consumer can pick up a
file that is still empty: the JSON decode fails, the worker's consumer dies
and the message is lost. Here a message is written under a hidden name and
renamed into the queue folder once complete -- a rename within one folder is
atomic -- so consumers only ever see whole messages.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

TRANSPORT = "queuestore.broker.filesystem:Transport"
"""What ``broker_transport`` names to use this transport for ``filesystem://`` URLs."""


class Channel(filesystem.Channel):
    """A filesystem channel whose messages appear in the queue folder whole."""

    # Kombu's two base classes name the second argument differently.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # Same name as kombu's, so consumers keep their order and queue filter;
        # the partial file's name matches no queue, so consumers skip it.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")
        try:
            with open(partial, "wb") as file:
                file.write(dumps(payload).encode())  # type: ignore[no-untyped-call]
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    """Kombu's filesystem transport with :class:`Channel`."""

    Channel = Channel
