"""An ``AgentExecutor`` whose agent is a queuestore job: the work runs on Celery workers.

The agent's logic is an ordinary job (``@job``): what its
:class:`~queuestore.TaskContext` reports -- progress and status messages,
artifacts, ``request_input``, the return value or the exception -- is written
to the task's row by the worker, and :meth:`QueuestoreAgentExecutor.execute`
turns each committed version into A2A status and artifact events. ``execute``
returns only when the task is terminal or waits for input, so the SDK's
in-process task never goes stale and is released as the SDK intends; a message
that continues a task waiting for input answers the job's question and runs it
again. ``cancel`` cancels the task in the store and revokes the job; a CANCELED
that reaches the store from a restarted server or another replica does the same
(see :mod:`queuestore.a2a.task_store`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, TaskState, TaskStatus
from a2a.types import Task as A2ATask
from a2a.utils.errors import InvalidParamsError
from pydantic import JsonValue

from queuestore.a2a import convert
from queuestore.a2a.event_stream import ENDS_A_STREAM, events_between
from queuestore.a2a.task_store import JobRequest, VersionedQueuestoreTaskStore
from queuestore.aio import AsyncTaskQueue
from queuestore.core.errors import InvalidTaskData, InvalidTransition, TaskNotFound
from queuestore.core.models import Task
from queuestore.core.models import TaskStatus as Status
from queuestore.core.watch import AsyncWatch

_PARKED: Final = frozenset({Status.INPUT_REQUIRED, Status.AUTH_REQUIRED})

REREAD_INTERVAL: Final = 5.0
"""Seconds after which a follower with no change reads the task again anyway."""

CREATE_TIMEOUT: Final = 60.0
"""Seconds a new task's row may take to appear (the SDK's first save creates it)."""


def text_input(context: RequestContext) -> dict[str, Any]:
    """The default job input: ``{"text": <the text parts of the user's message>}``."""
    return {"text": context.get_user_input()}


def text_answer(context: RequestContext) -> JsonValue:
    """The default answer to a job's ``request_input``: the text of the user's message."""
    return context.get_user_input()


class QueuestoreAgentExecutor(AgentExecutor):
    """Runs each A2A task as the queuestore job ``job`` on a Celery worker.

    Args:
        store: the versioned store the request handler uses, built on the
            :class:`~queuestore.TaskQueue` whose workers run ``job``.
        job: the name of the job (as registered with ``@job``).
        input_from: the job's input for the message that starts a task.
        answer_from: the answer to the job's ``request_input`` for a message
            that continues a task waiting for input.
    """

    def __init__(
        self,
        store: VersionedQueuestoreTaskStore,
        job: str,
        *,
        input_from: Callable[[RequestContext], Mapping[str, Any]] = text_input,
        answer_from: Callable[[RequestContext], JsonValue] = text_answer,
    ) -> None:
        if store.queue is None:
            raise ValueError("the store must be built on a TaskQueue for its tasks to run as jobs")
        self.store = store
        self.queue = AsyncTaskQueue(store.queue)
        self.job = job
        self.input_from = input_from
        self.answer_from = answer_from

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Start the job (or answer its question), then relay its versions until it stops."""
        task_id = _required(context.task_id, "task_id")
        owner = self.store.owner_resolver(context.call_context)
        previous: Task | None = None
        if context.current_task is None:
            job_input = dict(self.input_from(context))
            self._check_input(job_input)
            self.store.request_job(task_id, JobRequest(self.job, job_input))
        else:
            previous = await self._continue(task_id, owner, context)
        try:
            async with self.queue.store.watch(task_ids=[task_id]) as changes:
                if context.current_task is None:
                    await event_queue.enqueue_event(_submitted(context, task_id))
                await self._relay(task_id, owner, previous, changes, event_queue)
        finally:
            self.store.forget_job_request(task_id)

    async def _relay(
        self,
        task_id: str,
        owner: str | None,
        previous: Task | None,
        changes: AsyncWatch,
        event_queue: EventQueue,
    ) -> None:
        """Enqueue the events of each newer version of the task until one ends the stream."""
        current = await self._read(task_id, owner)
        missing = 0
        while True:
            if current is not None and (previous is None or current.version > previous.version):
                await _enqueue_events(event_queue, previous, current)
                previous = current
                if current.status in ENDS_A_STREAM:
                    return
            current = await changes.get(timeout=REREAD_INTERVAL)
            if current is None:
                if _closed(event_queue):
                    return  # the SDK stopped listening (its consumer failed)
                current = await self._read(task_id, owner)
                if current is None and previous is None:
                    missing += 1
                    if missing * REREAD_INTERVAL >= CREATE_TIMEOUT:
                        raise RuntimeError(f"task {task_id} was never created")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task in the store, revoke its job, and say CANCELED."""
        task_id = _required(context.task_id, "task_id")
        owner = self.store.owner_resolver(context.call_context)
        with contextlib.suppress(InvalidTransition, TaskNotFound):
            # When it ended meanwhile, the SDK's CANCELED is refused and it reloads the end.
            await self.queue.cancel(task_id, owner=owner)
        current = context.current_task
        context_id = current.context_id if current is not None else context.context_id
        await TaskUpdater(event_queue, task_id, _required(context_id, "context_id")).cancel()

    async def _continue(self, task_id: str, owner: str | None, context: RequestContext) -> Task:
        """Answer the job's question when the task waits for input; the task as it was."""
        row = await self.queue.store.get(task_id, owner=owner)
        if row.status in _PARKED:
            if context.message is not None:
                # The question and its answer join the history now: the job may
                # finish before the SDK's next save, and a finished task takes no
                # more writes (nor does a save bring the job's status messages).
                status = convert.status_of_task(row)
                asked = [status.message] if status.HasField("message") else []
                row = await self.queue.store.update(
                    task_id, metadata=with_message(row, *asked, context.message), owner=owner
                )
            try:
                await self.queue.resume(task_id, self.answer_from(context), owner=owner)
            except InvalidTaskData as exc:
                raise InvalidParamsError(message=str(exc)) from exc
            except InvalidTransition:
                pass  # answered meanwhile by another request: follow what it started
        return row

    async def _read(self, task_id: str, owner: str | None) -> Task | None:
        try:
            return await self.queue.store.get(task_id, owner=owner)
        except TaskNotFound:
            return None  # not created yet: the SDK's first save submits it

    def _check_input(self, job_input: dict[str, Any]) -> None:
        # A job registered in the workers only is not checked here: the worker refuses bad input.
        try:
            self.queue.sync.check_input(self.job, job_input)
        except InvalidTaskData as exc:
            raise InvalidParamsError(message=str(exc)) from exc


def with_message(row: Task, *messages: Message) -> dict[str, Any]:
    """The row's metadata with ``messages`` added to the A2A history (each once)."""
    content = dict(convert.envelope_of(row))
    history = list(content.get("history") or [])
    known = {convert.message_from_stored(item).message_id for item in history}
    for message in messages:
        if message.message_id not in known:
            history.append(convert.message_to_stored(message))
            known.add(message.message_id)
    content["history"] = history
    return {**row.metadata, convert.ENVELOPE: content}


async def _enqueue_events(event_queue: EventQueue, previous: Task | None, current: Task) -> None:
    """The events that take a reader from ``previous`` to ``current``."""
    if previous is None and current.status is Status.SUBMITTED:
        return  # the Task event said it already
    for event in events_between(previous, current):
        await event_queue.enqueue_event(event)


def _submitted(context: RequestContext, task_id: str) -> A2ATask:
    """The first event of a new task: SUBMITTED, with the user's message as its history."""
    task = A2ATask(
        id=task_id,
        context_id=_required(context.context_id, "context_id"),
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
    )
    if context.message is not None:
        task.history.append(context.message)
    return task


def _closed(event_queue: EventQueue) -> bool:
    """Whether the SDK closed the queue (its concrete queues say so; the ABC does not)."""
    is_closed = getattr(event_queue, "is_closed", None)
    return bool(is_closed()) if callable(is_closed) else False


def _required(value: str | None, name: str) -> str:
    if not value:
        raise InvalidParamsError(message=f"the request has no {name}")
    return value


__all__ = [
    "CREATE_TIMEOUT",
    "REREAD_INTERVAL",
    "QueuestoreAgentExecutor",
    "text_answer",
    "text_input",
]
