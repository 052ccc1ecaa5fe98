"""A2A push notifications from the store: durable configs, sent by ``queuestore deliver``.

:class:`QueuestorePushConfigStore` is a2a-sdk's ``PushNotificationConfigStore``
on queuestore's callbacks: each push config is a row of the task's callbacks
(format ``a2a``, every status change), owner-scoped like the task store.
:func:`a2a_request` writes one of their deliveries as an A2A push notification.

- **Durable.** A config is a row in the database, not process memory: it
  survives a restart of the server, and every replica sees it.
- **From the store, not the process.** Nothing is sent by the server: each
  status change a config wants is committed as a delivery in the transaction
  of the change, whoever made it (a worker, another replica), and sent by a
  ``queuestore deliver`` process at least once, retried with backoff. The
  receiver de-duplicates by ``webhook-id``. Run a deliverer beside the server,
  or nothing is sent.
- **In order, per config.** A config's notifications go one at a time, in the
  order of the task's changes; different configs do not wait for each other.
- **Status changes only.** A notification is sent for each change of the
  task's state: a ``statusUpdate`` while the task goes on (working, input or
  auth required), and the whole ``task``, artifacts included, when it ends.
  Progress and artifacts of a running task are not pushed on their own.

Each request carries the config's token as ``X-A2A-Notification-Token`` and
its ``authentication`` as ``Authorization: <scheme> <credentials>``, as the
SDK's own sender does, plus the Standard Webhooks headers (``webhook-id``,
``webhook-timestamp`` and, with the deployment's secrets, ``webhook-signature``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Final

from a2a.server.context import ServerCallContext
from a2a.server.tasks.push_notification_config_store import (
    PushNotificationConfigStore,
    normalize_push_notification_config,
)
from a2a.types import (
    AuthenticationInfo,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types import Task as A2ATask
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from queuestore import TaskQueue, TaskStore
from queuestore.a2a import convert
from queuestore.a2a.principal import OwnerResolver, resolve_owner
from queuestore.core.callbacks import Callback, CallbackEvents, CallbackFormat, Delivery
from queuestore.core.errors import CallbackRefused, InvalidTaskData, TaskNotFound
from queuestore.core.models import TERMINAL
from queuestore.core.owner import ANY, Owner
from queuestore.store.sql import blocking

log = logging.getLogger(__name__)

TOKEN_HEADER: Final = "X-A2A-Notification-Token"
"""The header that carries a config's token (a2a-sdk's spelling)."""

_FIELDS: Final = {
    "callback.url": "url",
    "callback.id": "id",
    "callback.token": "token",
    "callback.auth_scheme": "authentication.scheme",
    "callback.auth_credentials": "authentication.credentials",
}
"""The config's field for each field of the callback it is stored as."""


class QueuestorePushConfigStore(PushNotificationConfigStore):
    """a2a-sdk's ``PushNotificationConfigStore`` on the store's callbacks (see the module).

    A config is known by its id within the task (the task id when it has none);
    setting one with a taken id replaces it. A config may be set before its
    task's row exists (``SendMessage`` sets it first): it reports the task
    once the row is written.

    Args:
        backend: the :class:`~queuestore.TaskQueue` or :class:`~queuestore.TaskStore`
            whose tasks the configs are for.
        owner_resolver: the owner of a call; the same as the A2A task store's,
            so a caller sees the configs of the tasks it sees.
    """

    def __init__(
        self, backend: TaskQueue | TaskStore, *, owner_resolver: OwnerResolver = resolve_owner
    ) -> None:
        self.store = backend.store if isinstance(backend, TaskQueue) else backend
        self.owner_resolver = owner_resolver

    async def accepts_url(self, url: str) -> bool:
        """Whether the store's ``url_policy`` accepts ``url``: the handler's ``push_url_validator``.

        A refused URL is logged with the reason; the caller is only told the
        URL is invalid, so that the answer reveals nothing of the network.
        """
        try:
            await asyncio.to_thread(self.store.url_policy.check_url, url)
        except CallbackRefused as exc:
            log.warning("push notification URL %r refused: %s", url, exc.reason)
            return False
        return True

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        """Store the config (a copy, its id defaulted to the task id) for the caller; return it.

        Raises:
            InvalidParamsError: the URL is refused by the store's ``url_policy``,
                or a field is malformed; nothing is written.
            TaskNotFoundError: the task exists and is another owner's.
        """
        config = normalize_push_notification_config(task_id, notification_config)
        owner = self.owner_resolver(context)
        await self.store.run_async(self._add, config, owner)
        return config

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[TaskPushNotificationConfig]:
        """The task's configs that the caller set, oldest first (``tenant``: the call's)."""
        callbacks = await self.store.run_async(self._configs, task_id, self.owner_resolver(context))
        return [config_of(callback, tenant=context.tenant) for callback in callbacks]

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every config of the task, whoever set it, oldest first."""
        callbacks = await self.store.run_async(self._configs, task_id, ANY)
        return [config_of(callback) for callback in callbacks]

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        """Delete the caller's config ``config_id`` of the task (all of them without one).

        Its notifications not sent yet are dropped with it. Nothing happens
        when there is no such config.
        """
        await self.store.run_async(self._delete, task_id, config_id, self.owner_resolver(context))

    # -- implementation (sync: run by the store's run_async) -----------------

    def _add(self, config: TaskPushNotificationConfig, owner: str | None) -> Callback:
        auth = config.authentication if config.HasField("authentication") else AuthenticationInfo()
        try:
            for field, value in (
                ("token", config.token),
                ("authentication.scheme", auth.scheme),
                ("authentication.credentials", auth.credentials),
            ):
                _check_header_value(field, value)
            self._refuse_taken_id(config)
            # The URL check may resolve a name: off the event loop.
            return blocking(
                self.store.add_callback,
                config.task_id,
                config.url,
                events=CallbackEvents.ALL,
                format=CallbackFormat.A2A,
                callback_id=config.id,
                token=config.token or None,
                auth_scheme=auth.scheme or None,
                auth_credentials=auth.credentials or None,
                owner=owner,
                task_may_follow=True,
            )
        except CallbackRefused as exc:
            raise InvalidParamsError(
                message=f"push notification URL {exc.url!r} refused: {exc.reason}"
            ) from exc
        except InvalidTaskData as exc:
            raise InvalidParamsError(message=_params_message(exc)) from exc
        except TaskNotFound as exc:
            raise TaskNotFoundError from exc

    def _refuse_taken_id(self, config: TaskPushNotificationConfig) -> None:
        """Refuse an id another kind of callback of the task has (a webhook's ``default``)."""
        for callback in self.store.callbacks(config.task_id, owner=ANY):
            if callback.id == config.id and callback.format is not CallbackFormat.A2A:
                raise InvalidParamsError(
                    message=f"push notification config id {config.id!r} is taken by a "
                    f"{callback.format.value} callback of task {config.task_id!r}; "
                    "choose another id"
                )

    def _configs(self, task_id: str, owner: Owner) -> list[Callback]:
        try:
            callbacks = self.store.callbacks(task_id, owner=owner)
        except InvalidTaskData:  # not a task id queuestore holds: no configs
            return []
        return [callback for callback in callbacks if callback.format is CallbackFormat.A2A]

    def _delete(self, task_id: str, config_id: str | None, owner: str | None) -> int:
        removed = 0
        for callback in self._configs(task_id, owner):
            if config_id is None or callback.id == config_id:
                removed += self.store.remove_callback(task_id, callback.id, owner=owner)
        return removed


def config_of(callback: Callback, *, tenant: str = "") -> TaskPushNotificationConfig:
    """The A2A push config a callback of format ``a2a`` stores."""
    config = TaskPushNotificationConfig(
        tenant=tenant,
        id=callback.id,
        task_id=callback.task_id,
        url=callback.url,
        token=callback.token or "",
    )
    if callback.auth_scheme is not None or callback.auth_credentials is not None:
        config.authentication.CopyFrom(
            AuthenticationInfo(
                scheme=callback.auth_scheme or "", credentials=callback.auth_credentials or ""
            )
        )
    return config


def a2a_request(delivery: Delivery, callback: Callback) -> tuple[bytes, dict[str, str]]:
    """A delivery as an A2A push notification: the body and the A2A headers.

    The body is the proto JSON of a ``StreamResponse``: ``task``, the whole A2A
    task (artifacts and history included) for a terminal status, and
    ``statusUpdate`` for any other. Headers: ``X-A2A-Notification-Token`` when
    the config has a token, ``Authorization: <scheme> <credentials>`` when its
    authentication has both. The deliverer adds the Standard Webhooks headers.
    """
    response = StreamResponse()
    task = _task_of(delivery)
    if delivery.status in TERMINAL:
        response.task.CopyFrom(task)
    else:
        response.status_update.CopyFrom(
            TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
        )
    body = json.dumps(MessageToDict(response), separators=(",", ":"), ensure_ascii=False)
    headers: dict[str, str] = {}
    if callback.token:
        headers[TOKEN_HEADER] = callback.token
    if callback.auth_scheme and callback.auth_credentials:
        headers["Authorization"] = f"{callback.auth_scheme} {callback.auth_credentials}"
    return body.encode(), headers


def _task_of(delivery: Delivery) -> A2ATask:
    """The A2A view of the task as the change left it (its id and state when there is none)."""
    if delivery.task is not None:
        return convert.to_a2a(delivery.task)
    status = TaskStatus(state=convert.STATES[delivery.status])
    status.timestamp.FromDatetime(delivery.created_at)
    return A2ATask(id=delivery.task_id, status=status)


def _check_header_value(field: str, value: str) -> None:
    """Refuse a value an HTTP header cannot carry (control or non-ASCII characters)."""
    if any(not (" " <= char <= "~" or char == "\t") for char in value):
        raise InvalidParamsError(
            message=f"push notification config {field}: must be printable ASCII "
            "(it is sent in an HTTP header)"
        )


def _params_message(exc: InvalidTaskData) -> str:
    """The store's refusal, named by the config's field."""
    message = str(exc)
    if exc.field is None:
        return f"push notification config: {message}"
    reason = message.removeprefix(f"{exc.field}: ")
    return f"push notification config {_FIELDS.get(exc.field, exc.field)}: {reason}"


__all__ = ["TOKEN_HEADER", "QueuestorePushConfigStore", "a2a_request", "config_of"]
