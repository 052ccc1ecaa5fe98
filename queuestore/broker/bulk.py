"""Many jobs' messages at once on Redis: serialised from one template, pushed in one round trip.

``send_task`` builds each message anew (routing, headers, the body's
serialisation, kombu's envelope), about 0.3 ms a message, which is most of a
bulk submit's time. A queuestore job's message differs from another's of the
same job only by the task id (the only argument) and kombu's delivery tag.
So for each job (and priority) of a batch, the message of its first task is
made once by Celery and kombu themselves, caught where kombu's Redis transport
hands it to the pipeline, and the other tasks' messages are that text with
their id and a fresh delivery tag put in, pushed with ``LPUSH`` in one Redis
pipeline, in the order given.

Only where the result is the message ``send_task`` would have sent, and nobody
watches each send: kombu's Redis transport with publish batches (kombu 5.7
and later), no ``before_task_publish``/``after_task_publish`` receivers, no
sent events, no traces, and tasks without a countdown. Anything else, or a
capture that does not look as expected, goes the way of ``send_task``.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals

from queuestore.core import tracing
from queuestore.core.models import Task

_LPUSH_CHUNK = 1000
"""Messages per ``LPUSH`` command (one pipeline carries them all)."""

_BODY, _TAG = "\x00body\x00", "\x00tag\x00"


def usable(app: Celery, producer: Any) -> bool:
    """Whether templated messages equal ``send_task``'s on ``producer`` and nobody watches sends."""
    channel = producer.channel
    return (
        hasattr(producer, "batch")
        and hasattr(channel, "create_publish_batch")
        and getattr(channel, "supports_batch_publish", True)
        and type(channel).__module__.startswith("kombu.transport.redis")
        and not signals.before_task_publish.has_listeners()
        and not signals.after_task_publish.has_listeners()
        and not app.conf.task_send_sent_event
        and not tracing.enabled()
    )


@dataclass(frozen=True)
class Template:
    """One job's message as kombu's Redis transport pushes it, with holes for the task."""

    key: str
    """The Redis list it is pushed on."""
    parts: tuple[str, ...]
    """The message's text, split at its holes (every other part is a hole's name)."""
    body_parts: tuple[str, str]
    """The body's text before and after the task id (before base64)."""

    def text(self, task_id: str) -> str:
        """The message of ``task_id``'s job, with a fresh delivery tag."""
        head, tail = self.body_parts
        holes = {
            _BODY: base64.b64encode(f"{head}{task_id}{tail}".encode()).decode(),
            _TAG: str(uuid.uuid4()),
            "": task_id,
        }
        return "".join([holes[part] if i % 2 else part for i, part in enumerate(self.parts)])


def template(key: str, text: str, task_id: str) -> Template | None:
    """The template of a message ``text`` caught for ``task_id``; None if it looks unexpected."""
    message = json.loads(text)
    properties = message.get("properties", {})
    if properties.get("body_encoding") != "base64" or message.get("headers", {}).get("id") != (
        task_id
    ):
        return None
    body, tag = message["body"], str(properties.get("delivery_tag"))
    plain = base64.b64decode(body).decode()
    if plain.count(task_id) != 1 or text.count(body) != 1 or text.count(tag) != 1:
        return None
    holed = text.replace(body, _BODY).replace(tag, _TAG)
    pieces = re.split(f"({re.escape(_BODY)}|{re.escape(_TAG)}|{re.escape(task_id)})", holed)
    parts = tuple("" if i % 2 and piece == task_id else piece for i, piece in enumerate(pieces))
    head, tail = plain.split(task_id)
    return Template(key, parts, (head, tail))


class _Catch:
    """A publish batch that keeps the Redis commands kombu would pipeline, and sends nothing."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.commands: list[tuple[str, tuple[Any, ...]]] = []

    def publish(self, message: Any, **kwargs: Any) -> Any:
        return self.channel.basic_publish(message, _publish_batch=self, **kwargs)

    def add(self, name: str, *args: Any) -> None:
        self.commands.append((name, args))

    def flush(self) -> None: ...

    def discard(self) -> None: ...

    def close(self) -> None: ...


def catch(producer: Any, publish: Callable[[], object], task_id: str) -> Template | bool:
    """The template of the message ``publish`` makes on ``producer``, which is not sent.

    Where no template can be made: True if ``publish`` sent its message some
    other way (nothing reached kombu's Redis batch), False if it is unsent.
    """
    channel = producer.channel
    caught = _Catch(channel)
    channel.create_publish_batch = lambda max_size: caught
    try:
        with producer.batch():
            publish()
    finally:
        del channel.create_publish_batch
    if not caught.commands:
        return True
    if len(caught.commands) != 1 or caught.commands[0][0] != "lpush":
        return False
    key, text = caught.commands[0][1]
    return template(key, text, task_id) or False


def push(producer: Any, messages: list[tuple[str, str]]) -> None:
    """``LPUSH`` the ``(key, text)`` messages in order, in one Redis pipeline."""
    channel = producer.channel
    with channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipeline:
        for key, texts in _runs(messages):
            for start in range(0, len(texts), _LPUSH_CHUNK):
                pipeline.lpush(key, *texts[start : start + _LPUSH_CHUNK])
        pipeline.execute()


def _runs(messages: list[tuple[str, str]]) -> Iterator[tuple[str, list[str]]]:
    """The messages grouped into runs of one key, in order."""
    key: str | None = None
    texts: list[str] = []
    for next_key, text in messages:
        if next_key != key and texts:
            yield str(key), texts
            texts = []
        key = next_key
        texts.append(text)
    if texts:
        yield str(key), texts


def shape(task: Task) -> tuple[str, int]:
    """What a task's message depends on besides its id."""
    return task.name, task.priority
