"""Server-Sent Events: each committed change of the tasks a caller may see, as it happens.

The stream is fed by the store's change feed (``AsyncTaskStore.watch``), which
PostgreSQL's LISTEN/NOTIFY wakes, so an event follows a worker's write by
milliseconds, not a polling interval. Each event is ``event: task`` whose data
is the task as committed (the same JSON as ``GET /tasks/{id}``) and whose id
is ``<updated_at>/<task id>/<version>``; a task written several times between
two sends shows only its newest version. Deletions are not streamed.

A task's own stream starts with the task as it is now and ends after its
terminal status. The stream of all tasks runs until the client leaves; a
client that reconnects with ``Last-Event-ID`` first gets every task written
since that event (at most ``REPLAY_LIMIT``; beyond, one ``event: reset`` tells
it to read the list again). Idle streams carry a comment every ``keepalive``
seconds so that proxies keep them open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from datetime import datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Path
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from queuestore.core.errors import StoreUnavailable, TaskNotFound
from queuestore.core.models import Task
from queuestore.core.views import TaskView
from queuestore.core.watch import AsyncWatch
from queuestore.http.auth import named
from queuestore.http.problems import ProblemError, responses
from queuestore.http.service import Principal, Service, ServiceDep

router = APIRouter(tags=["events"])

MEDIA_TYPE: Final = "text/event-stream"
RETRY_MS: Final = 2000
REPLAY_LIMIT: Final = 1000
"""The most tasks replayed to a reconnecting client before it is told to reset."""
REPLAY_OVERLAP: Final = timedelta(seconds=2)
"""Replay starts this long before the last event: commits land slightly out of clock order."""
HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}

_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "An event stream: `event: task`, data a Task as JSON.",
        "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
    }
}


def encode(task: Task) -> bytes:
    """One ``task`` event."""
    data = TaskView.of(task).model_dump_json()
    written = task.updated_at.isoformat().replace("+00:00", "Z")
    return f"id: {written}/{task.id}/{task.version}\nevent: task\ndata: {data}\n\n".encode()


RESET: Final = b"event: reset\ndata: too many changes were missed: read the list again\n\n"


def _since(last_event_id: str | None) -> datetime | None:
    """When the event named by ``Last-Event-ID`` was written.

    Raises:
        ProblemError: 400 for an id this server did not send.
    """
    if last_event_id is None or not last_event_id.strip():
        return None
    try:
        written = datetime.fromisoformat(last_event_id.split("/", 1)[0])
    except ValueError:
        written = None
    if written is None or written.tzinfo is None:
        raise ProblemError(
            400, "invalid-last-event-id", "Last-Event-ID is not an id of this event stream"
        )
    return written


@router.get(
    "/tasks/{task_id}/events",
    response_class=StreamingResponse,
    responses={**_STREAM, **responses(401, 404, 422, 503)},
)
async def task_events(
    task_id: Annotated[str, Path(description="The task's id.")],
    principal: Principal,
    service: ServiceDep,
) -> StreamingResponse:
    """The changes of one task: its current state first, then each change until it ends."""
    owner = service.owner_for(principal)
    changes = service.store.watch(owner=owner, task_ids=[task_id])
    # Opened before the read, so no change between the two is missed.
    await changes.__aenter__()
    try:
        task = await service.store.get(task_id, owner=owner)
    except BaseException:
        await changes.__aexit__(None, None, None)
        raise
    return EventStream(_one_task(service, changes, task, owner), changes)


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={**_STREAM, **responses(400, 401, 503)},
)
async def all_events(
    principal: Principal,
    service: ServiceDep,
    last_event_id: Annotated[
        str | None,
        Header(description="The last event received: first replay what was missed since."),
    ] = None,
) -> StreamingResponse:
    """The changes of every task the caller may see (an admin: every owner's), until the
    client leaves; 401 anonymous."""
    owner = service.owner_for(named(principal, "watching every task"))
    since = _since(last_event_id)
    changes = service.store.watch(owner=owner)
    # Opened before the replay's read, so no change between the two is missed.
    await changes.__aenter__()
    try:
        missed: list[Task] | None = []
        if since is not None:
            page = await service.store.list(
                owner=owner, updated_after=since - REPLAY_OVERLAP, limit=REPLAY_LIMIT
            )
            missed = None if page.next_cursor is not None else page.tasks
    except BaseException:
        await changes.__aexit__(None, None, None)
        raise
    return EventStream(_every_task(service, changes, missed), changes)


class EventStream(StreamingResponse):
    """An event stream that closes its watch however the response ends.

    Closing it here, not in the generator, also covers a client that leaves
    before the first byte, when the generator never starts.
    """

    def __init__(self, events: AsyncIterator[bytes], changes: AsyncWatch) -> None:
        super().__init__(events, media_type=MEDIA_TYPE, headers=HEADERS)
        self.changes = changes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.changes.__aexit__(None, None, None)


async def _one_task(
    service: Service, changes: AsyncWatch, current: Task, owner: Any
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode() + encode(current)
    if current.is_terminal:
        return
    async with aclosing(_until_closing(service, changes)) as following:
        async for change in following:
            if change is None:
                # Idle: deletions are not streamed, so look whether the task is still there.
                try:
                    await service.store.get(current.id, owner=owner)
                except TaskNotFound:
                    return
                except StoreUnavailable:
                    pass
                yield b": keep-alive\n\n"
            elif change.version > current.version:
                current = change
                yield encode(current)
                if current.is_terminal:
                    return


async def _every_task(
    service: Service, changes: AsyncWatch, missed: list[Task] | None
) -> AsyncIterator[bytes]:
    """``missed`` first (None: too many, a reset), then each change."""
    yield f"retry: {RETRY_MS}\n\n".encode()
    if missed is None:
        yield RESET
    sent = {task.id: task.version for task in missed or ()}
    for task in sorted(missed or (), key=lambda task: task.updated_at):
        yield encode(task)
    async with aclosing(_until_closing(service, changes)) as following:
        async for change in following:
            if change is None:
                yield b": keep-alive\n\n"
            elif change.version > sent.pop(change.id, 0):
                yield encode(change)


async def _until_closing(
    service: Service, changes: AsyncWatch
) -> AsyncGenerator[Task | None, None]:
    """Each change (None after ``keepalive`` idle seconds) until the server shuts down."""
    closing = asyncio.ensure_future(service.closing.wait())
    try:
        while True:
            change = asyncio.ensure_future(changes.get(timeout=service.keepalive))
            await asyncio.wait({change, closing}, return_when=asyncio.FIRST_COMPLETED)
            if not change.done():
                change.cancel()
                return
            yield change.result()
    finally:
        closing.cancel()
