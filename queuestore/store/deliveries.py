"""Push verbs of every store (:class:`DeliveryVerbs`): callbacks on a task, and their deliveries.

A callback is registered on a task (:meth:`DeliveryVerbs.add_callback`).
From then on every status change it wants is committed as a delivery in the
transaction of the change: by a trigger on the SQL stores (migration 0009),
under the one lock in memory. A :class:`~queuestore.push.deliverer.Deliverer` takes
the deliveries that are due (:meth:`~DeliveryVerbs.take_deliveries`), sends
them and settles each (:meth:`~DeliveryVerbs.settle_delivery`).

The order of one callback's deliveries is its task's order of changes: only
the oldest pending delivery of a callback is ever taken, so a later status is
never sent before an earlier one has been delivered or given up on.
"""

from __future__ import annotations

import builtins
import re
import secrets
from abc import abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from queuestore.core import validation as check
from queuestore.core.callbacks import (
    CALLBACK_ID_PATTERN,
    DEFAULT_CALLBACK_ID,
    Callback,
    CallbackEvents,
    CallbackFormat,
    Delivery,
    DeliveryState,
)
from queuestore.core.errors import InvalidTaskData, TaskNotFound
from queuestore.core.models import TaskStatus
from queuestore.core.owner import ANY, Owner, OwnerScope
from queuestore.core.urls import UrlPolicy
from queuestore.core.watch import Listener
from queuestore.store.backend import StoreBackend

_CALLBACK_ID = re.compile(CALLBACK_ID_PATTERN)
_MAX_SECRET = 4096


@dataclass(frozen=True)
class Outgoing:
    """A delivery taken to be sent, with the callback it goes to."""

    delivery: Delivery
    callback: Callback


@dataclass(frozen=True)
class Settlement:
    """How a try ended: delivered, to be tried again at ``retry_at``, or dead.

    Build one with :meth:`delivered`, :meth:`retry` or :meth:`dead`.
    """

    state: DeliveryState
    response_status: int | None = None
    error: str | None = None
    retry_at: datetime | None = None

    @classmethod
    def delivered(cls, response_status: int) -> Settlement:
        """The receiver took it (a 2xx answer)."""
        return cls(DeliveryState.DELIVERED, response_status)

    @classmethod
    def retry(cls, at: datetime, error: str, response_status: int | None = None) -> Settlement:
        """It failed and is tried again at ``at``."""
        return cls(DeliveryState.PENDING, response_status, error[:1000], check.aware(at, "at"))

    @classmethod
    def dead(cls, error: str, response_status: int | None = None) -> Settlement:
        """It failed for good: the receiver refused it, or it reached its maximum age."""
        return cls(DeliveryState.DEAD, response_status, error[:1000])


class DeliveryVerbs(StoreBackend):
    """Callbacks and deliveries: part of every :class:`~queuestore.store.base.TaskStore`."""

    url_policy: UrlPolicy
    """Which callback URLs are accepted, checked at registration and again at
    each connection; set with the store's ``url_policy`` argument."""

    def add_callback(
        self,
        task_id: str,
        url: str,
        *,
        events: CallbackEvents | str = CallbackEvents.TERMINAL,
        format: CallbackFormat | str = CallbackFormat.WEBHOOK,
        callback_id: str = DEFAULT_CALLBACK_ID,
        token: str | None = None,
        auth_scheme: str | None = None,
        auth_credentials: str | None = None,
        owner: Owner = ANY,
        task_may_follow: bool = False,
    ) -> Callback:
        """Send the task's status changes to ``url`` from now on.

        A callback with the same ``callback_id`` on the task is replaced: its
        pending deliveries go to the new URL. If a new callback's task is
        already in a status it wants (other than ``submitted``), a delivery
        of that status is committed with the callback, so a task that ended
        before its callback was registered is still reported.

        Args:
            events: ``terminal`` (the default) or ``all`` status changes.
            format: ``webhook`` (Standard Webhooks) or ``a2a`` (an A2A push notification).
            token: the A2A config's token, sent as ``X-A2A-Notification-Token``.
            auth_scheme, auth_credentials: sent as ``Authorization: <scheme> <credentials>``.
            task_may_follow: accept a task id with no task yet (A2A registers a
                message's push config before the task's row is written); the
                callback is then the caller's, and reports the task once it exists.

        Raises:
            CallbackRefused: the URL is not one :attr:`url_policy` accepts; nothing is written.
            InvalidTaskData: another argument is malformed.
            TaskNotFound: no such task visible to ``owner`` (unless ``task_may_follow``).
        """
        task_id = check.task_id(task_id)
        scope = self._scope(owner)
        callback = Callback(
            id=_callback_id(callback_id),
            task_id=task_id,
            owner=scope.owner,
            url=_text(url, "callback.url") or "",
            events=_enum(CallbackEvents, events, "callback.events"),
            format=_enum(CallbackFormat, format, "callback.format"),
            token=_text(token, "callback.token"),
            auth_scheme=check.label(auth_scheme, "callback.auth_scheme"),
            auth_credentials=_text(auth_credentials, "callback.auth_credentials"),
            created_at=self._now(),
        )
        self.url_policy.check_url(callback.url)
        added = self._add_callback(secrets.token_hex(16), callback, scope, task_may_follow)
        if added is None:
            raise TaskNotFound(task_id)
        return added

    def callbacks(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Callback]:
        """The task's callbacks that ``owner`` registered (every one for ``ANY``), oldest first."""
        return self._callbacks(check.task_id(task_id), self._scope(owner))

    def remove_callback(
        self, task_id: str, callback_id: str | None = None, *, owner: Owner = ANY
    ) -> int:
        """Remove one of the task's callbacks (all of them without ``callback_id``).

        Its pending deliveries are dropped with it. Returns how many were removed.
        """
        wanted = None if callback_id is None else _callback_id(callback_id)
        return self._remove_callbacks(check.task_id(task_id), wanted, self._scope(owner))

    def deliveries(self, task_id: str, *, owner: Owner = ANY) -> builtins.list[Delivery]:
        """Every delivery of the task, oldest first, pending, delivered and dead.

        Raises:
            TaskNotFound: no such task visible to ``owner``.
        """
        task_id = check.task_id(task_id)
        scope = self._scope(owner)
        if self._fetch(task_id, scope) is None:
            raise TaskNotFound(task_id)
        return self._deliveries(task_id)

    def redeliver(self, task_id: str, delivery_id: int, *, owner: Owner = ANY) -> Delivery:
        """Try a dead delivery again, now, as if it had just been committed.

        Raises:
            TaskNotFound: no such task visible to ``owner``, or no dead delivery of it with that id.
        """
        task_id = check.task_id(task_id)
        if self._fetch(task_id, self._scope(owner)) is None:
            raise TaskNotFound(task_id)
        revived = self._revive(task_id, check.positive_int(delivery_id, "delivery_id"))
        if revived is None:
            raise TaskNotFound(task_id)
        return revived

    def take_deliveries(
        self, *, limit: int = 16, lease: timedelta = timedelta(seconds=30)
    ) -> builtins.list[Outgoing]:
        """Up to ``limit`` due deliveries, each the oldest pending one of its callback.

        Each is taken for ``lease``: its ``tries`` counts the try, and
        no one else takes it until the lease runs out, so a deliverer that
        dies mid-call leaves it to be sent again (at least once). Concurrent
        deliverers never take the same delivery (``FOR UPDATE SKIP LOCKED``
        on PostgreSQL).
        """
        limit = check.positive_int(limit, "limit")
        return self._take_deliveries(limit, _positive(lease, "lease"))

    def settle_delivery(self, delivery: Delivery, settlement: Settlement) -> bool:
        """Record how the try of a taken delivery ended.

        False if the try was no longer the delivery's own (its lease ran
        out and another deliverer took it again): nothing is written.
        """
        return self._settle(delivery.id, delivery.tries, settlement)

    def subscribe_deliveries(self) -> AbstractContextManager[Listener]:
        """Hear of committed deliveries while the context is open, to send them at once.

        Each call of the listener waits up to its ``seconds`` for one; the
        changes it returns are the tasks and statuses delivered (PostgreSQL
        NOTIFY), or nothing when the backend has no notifications: a
        deliverer polls :meth:`take_deliveries` after each call either way.
        """
        return self.subscribe()

    def delivery_counts(self) -> dict[DeliveryState, int]:
        """How many deliveries are in each state, every task's: for operators and metrics."""
        counts = self._count_deliveries()
        return {state: counts.get(state, 0) for state in DeliveryState}

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _add_callback(
        self, key: str, callback: Callback, scope: OwnerScope, task_may_follow: bool
    ) -> Callback | None:
        """Insert or replace ``callback`` (known by ``key``) and its catch-up delivery, atomically.

        None if the task is not visible in ``scope`` (and not ``task_may_follow``).
        """

    @abstractmethod
    def _callbacks(self, task_id: str, scope: OwnerScope) -> builtins.list[Callback]:
        """The task's callbacks whose owner ``scope`` admits, oldest first."""

    @abstractmethod
    def _remove_callbacks(self, task_id: str, callback_id: str | None, scope: OwnerScope) -> int:
        """Delete the callbacks (one, or all) and their pending deliveries."""

    @abstractmethod
    def _deliveries(self, task_id: str) -> builtins.list[Delivery]:
        """The task's deliveries, oldest first, with their task snapshot."""

    @abstractmethod
    def _revive(self, task_id: str, delivery_id: int) -> Delivery | None:
        """Make a dead delivery pending and due now."""

    @abstractmethod
    def _take_deliveries(self, limit: int, lease: timedelta) -> builtins.list[Outgoing]:
        """Take the due heads of the callbacks' queues (see :meth:`take_deliveries`)."""

    @abstractmethod
    def _settle(self, delivery_id: int, tries: int, settlement: Settlement) -> bool:
        """Write the settlement if the delivery is still pending at ``tries``."""

    @abstractmethod
    def _count_deliveries(self) -> dict[DeliveryState, int]:
        """Deliveries by state."""


def catch_up(callback: Callback, status: TaskStatus) -> bool:
    """Whether registering ``callback`` on a task in ``status`` commits a delivery of it."""
    return status is not TaskStatus.SUBMITTED and callback.wants(status)


def _callback_id(value: object) -> str:
    if not isinstance(value, str) or not _CALLBACK_ID.match(value):
        raise InvalidTaskData(
            "must be 1 to 200 letters, digits or '_', '.', ':', '-'", field="callback.id"
        )
    return value


E = TypeVar("E", CallbackEvents, CallbackFormat)


def _enum(kind: type[E], value: object, field: str) -> E:
    if isinstance(value, str) and value in kind._value2member_map_:
        return kind(value)
    allowed = ", ".join(member.value for member in kind)
    raise InvalidTaskData(f"must be one of {allowed}, not {value!r}", field=field)


def _text(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > _MAX_SECRET:
        raise InvalidTaskData(f"must be a string of 1 to {_MAX_SECRET} characters", field=field)
    return value


def _positive(value: object, field: str) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidTaskData("must be a positive timedelta", field=field)
    return value
