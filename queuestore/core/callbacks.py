"""Callbacks and their deliveries: the records of push.

A :class:`Callback` asks for a task's status changes to be sent to a URL, as a
signed webhook or as an A2A push notification. Each change a callback wants is
committed as a :class:`Delivery` in the same transaction as the change itself
(the deliveries), and sent at least once from there by a
:class:`~queuestore.push.deliverer.Deliverer`, never by the process that made the change.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final

from pydantic import AwareDatetime, Field

from queuestore.core.models import TERMINAL, Record, Task, TaskStatus


class CallbackEvents(StrEnum):
    """Which status changes a callback is sent."""

    TERMINAL = "terminal"
    """Only the change that ends the task: completed, failed, cancelled or rejected."""
    ALL = "all"
    """Every status change: working, input or auth required, and the end."""


class CallbackFormat(StrEnum):
    """How a delivery is written on the wire."""

    WEBHOOK = "webhook"
    """A Standard Webhooks call: a JSON event, signed with the deployment's secret."""
    A2A = "a2a"
    """An A2A push notification: a ``StreamResponse``, with the config's token."""


class DeliveryState(StrEnum):
    """Where a delivery is: still to be sent, sent, or given up on."""

    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"
    """Refused by the receiver for good, or still failing at its maximum age."""


CALLBACK_ID_PATTERN: Final = r"^[A-Za-z0-9_.:-]{1,200}$"

DEFAULT_CALLBACK_ID: Final = "default"
"""The id of a callback registered without one (the HTTP API's ``callback``)."""


class CallbackRequest(Record):
    """A callback asked for with a submit: where to send the task's changes, and which."""

    url: str
    events: CallbackEvents = CallbackEvents.TERMINAL


class Callback(Record):
    """A URL a task's status changes are sent to.

    A task has any number of callbacks, each known by its ``id`` within the
    task (the A2A push config's id); registering one with a taken id replaces it.
    """

    id: Annotated[str, Field(pattern=CALLBACK_ID_PATTERN)]
    task_id: str
    owner: str | None = None
    url: str
    events: CallbackEvents = CallbackEvents.TERMINAL
    format: CallbackFormat = CallbackFormat.WEBHOOK
    token: str | None = None
    """Sent as ``X-A2A-Notification-Token`` (A2A format)."""
    auth_scheme: str | None = None
    """With ``auth_credentials``: sent as ``Authorization: <scheme> <credentials>``."""
    auth_credentials: str | None = Field(default=None, repr=False)
    created_at: AwareDatetime

    def wants(self, status: TaskStatus) -> bool:
        """Whether a change to ``status`` is sent to this callback."""
        return self.events is CallbackEvents.ALL or status in TERMINAL


class Delivery(Record):
    """One status change of a task, to be sent to one callback.

    ``task`` is the task as the change left it (without its input and answers),
    captured in the transaction that made the change: what the receiver is
    told, however long the delivery takes. ``event_id`` is the same on every
    try (the ``webhook-id``), so a receiver de-duplicates by it.
    """

    id: int
    event_id: str
    task_id: str
    callback_id: str
    url: str
    status: TaskStatus
    version: int
    state: DeliveryState = DeliveryState.PENDING
    tries: int = 0
    created_at: AwareDatetime
    """When the change was committed."""
    next_try_at: AwareDatetime | None = None
    """When it is tried next (pending); while a try runs, when it may be taken again."""
    delivered_at: AwareDatetime | None = None
    last_error: str | None = None
    response_status: int | None = None
    task: Task | None = Field(default=None, repr=False)


SNAPSHOT_FIELDS: Final = frozenset(
    {
        "id",
        "name",
        "context_id",
        "status",
        "status_message",
        "progress",
        "result",
        "error",
        "artifacts",
        "metadata",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "attempt",
        "version",
    }
)
"""The fields of the task a delivery carries (``Delivery.task``); the others keep their defaults."""


def snapshot(task: Task) -> Task:
    """The task as a delivery carries it: without its input, answers, owner or bookkeeping."""
    return Task.model_validate(task.model_dump(include=set(SNAPSHOT_FIELDS)))


def event_id(callback_key: str, version: int) -> str:
    """The id every try of one delivery carries: its callback's key and the task's version."""
    return f"msg_{callback_key}_{version}"


__all__ = [
    "DEFAULT_CALLBACK_ID",
    "Callback",
    "CallbackEvents",
    "CallbackFormat",
    "CallbackRequest",
    "Delivery",
    "DeliveryState",
    "event_id",
    "snapshot",
]
