"""A2A end to end: the a2a-sdk client against uvicorn servers, a real worker, PostgreSQL.

Each test talks to ``a2a_app.py`` server processes over JSON-RPC and HTTP+JSON
(REST) with the SDK's ``ClientFactory`` client; the agent's work is the
``agent.main`` job on a prefork Celery worker; the store is a fresh PostgreSQL
database for the module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest
from a2a.client import Client
from a2a.helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotCancelableError, TaskNotFoundError

from queuestore import TaskStatus
from tests.a2a.a2a_support import A2ADeployment, Server, a2a_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.postgres]

BINDINGS = ["JSONRPC", "HTTP+JSON"]
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.fixture(scope="module")
def server(pg: A2ADeployment) -> Iterator[Server]:
    """The module's server process."""
    started = pg.start_server()
    yield started
    pg.stop(started)


def message(text: str, *, task_id: str = "", context_id: str = "") -> SendMessageRequest:
    request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
    if task_id:
        request.message.task_id = task_id
    if context_id:
        request.message.context_id = context_id
    return request


async def send(client: Client, request: SendMessageRequest) -> Task:
    """The task a non-streaming send answers with."""
    responses = [response async for response in client.send_message(request)]
    assert len(responses) == 1, responses
    assert responses[0].HasField("task"), responses[0]
    return responses[0].task


async def started(client: Client, text: str) -> Task:
    """A task sent with ``return_immediately``."""
    request = message(text)
    request.configuration.return_immediately = True
    responses = client.send_message(request)
    first = await anext(responses)
    await responses.aclose()  # type: ignore[attr-defined]
    assert first.HasField("task"), first
    return first.task


async def until(client: Client, task_id: str, *states: int, timeout: float = 30) -> Task:
    deadline = time.monotonic() + timeout
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        assert time.monotonic() < deadline, f"task stayed {TaskState.Name(task.status.state)}"
        await asyncio.sleep(0.1)


async def collect(events: AsyncIterator[StreamResponse], timeout: float = 30) -> list[str]:
    """Each event as ``kind:STATE`` or ``artifact:<id>``, until the stream ends."""

    async def read() -> list[str]:
        seen = []
        async for event in events:
            kind = event.WhichOneof("payload")
            if kind == "task":
                seen.append(f"task:{TaskState.Name(event.task.status.state)}")
            elif kind == "status_update":
                seen.append(f"status:{TaskState.Name(event.status_update.status.state)}")
            elif kind == "artifact_update":
                seen.append(f"artifact:{event.artifact_update.artifact.artifact_id}")
            else:
                seen.append(kind or "?")
        return seen

    return await asyncio.wait_for(read(), timeout)


def texts(task: Task) -> dict[str, str]:
    return {
        artifact.artifact_id: " ".join(part.text or str(part.data) for part in artifact.parts)
        for artifact in task.artifacts
    }


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_send_answers_the_finished_task_and_get_returns_it(
    server: Server, binding: str
) -> None:
    async with a2a_client(server.url, binding=binding) as client:
        task = await send(client, message("echo hello"))
        got = await client.get_task(GetTaskRequest(id=task.id))

    assert task.status.state == COMPLETED
    assert texts(task)["echo"] == "echo: hello"
    assert "result" in texts(task)
    assert got.id == task.id
    assert got.status.state == COMPLETED
    assert texts(got) == texts(task)
    assert [m.parts[0].text for m in got.history if m.role == Role.ROLE_USER] == ["echo hello"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_return_immediately_answers_at_once_and_the_job_runs_on(
    server: Server, binding: str
) -> None:
    async with a2a_client(server.url, binding=binding) as client:
        began = time.monotonic()
        task = await started(client, "slow 1.5")
        answered = time.monotonic() - began
        done = await until(client, task.id, COMPLETED)

    assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, WORKING)
    assert answered < 1.5
    assert "slept" in texts(done)["result"]


async def test_list_honours_every_filter_and_keeps_users_apart(server: Server) -> None:
    async with (
        a2a_client(server.url, user="lister") as client,
        a2a_client(server.url, user="other", binding="HTTP+JSON") as other,
    ):
        first = await send(client, message("echo one"))
        before_second = datetime.now(UTC)
        second = await send(client, message("echo two", context_id=first.context_id))
        third = await send(client, message("echo three"))
        asking = await send(client, message("ask"))
        foreign = await send(other, message("echo not yours"))

        everything = await client.list_tasks(ListTasksRequest())
        pages: list[list[str]] = []
        token = ""
        while True:
            page = await client.list_tasks(ListTasksRequest(page_size=2, page_token=token))
            pages.append([task.id for task in page.tasks])
            assert page.total_size == 4
            token = page.next_page_token
            if not token:
                break
        in_context = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
        waiting = await client.list_tasks(ListTasksRequest(status=INPUT_REQUIRED))
        recent_request = ListTasksRequest()
        recent_request.status_timestamp_after.FromDatetime(before_second)
        recent = await client.list_tasks(recent_request)
        with_artifacts = await client.list_tasks(
            ListTasksRequest(include_artifacts=True, history_length=0)
        )
        others = await other.list_tasks(ListTasksRequest())
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=first.id))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=asking.id))
        with pytest.raises(A2AError):
            await client.list_tasks(ListTasksRequest(page_token="bm90IGEgdG9rZW4"))

    mine = [asking.id, third.id, second.id, first.id]
    assert [task.id for task in everything.tasks] == mine  # newest first
    assert everything.total_size == 4
    assert all(not task.artifacts for task in everything.tasks)  # the default leaves them out
    assert pages == [mine[:2], mine[2:]]
    assert {task.id for task in in_context.tasks} == {first.id, second.id}
    assert in_context.total_size == 2
    assert [task.id for task in waiting.tasks] == [asking.id]
    assert {task.id for task in recent.tasks} == {second.id, third.id, asking.id}
    assert all(task.artifacts for task in with_artifacts.tasks if task.id != asking.id)
    assert all(not task.history for task in with_artifacts.tasks)
    assert [task.id for task in others.tasks] == [foreign.id]
    assert others.total_size == 1


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_send_carries_the_workers_progress_and_artifacts(
    server: Server, binding: str
) -> None:
    async with a2a_client(server.url, binding=binding, streaming=True) as client:
        events = await collect(client.send_message(message("echo streamed")))

    assert events[0] == "task:TASK_STATE_SUBMITTED"
    assert "artifact:echo" in events
    assert "artifact:result" in events
    assert events[-1] == "status:TASK_STATE_COMPLETED"


async def test_subscribe_follows_a_running_task_to_its_end(server: Server) -> None:
    async with a2a_client(server.url, streaming=True) as client:
        task = await started(client, "slow 2")
        await until(client, task.id, WORKING)
        events = await collect(client.subscribe(SubscribeToTaskRequest(id=task.id)))

    # The server that runs the task serves the SDK's copy, which follows the row.
    assert events[0] in ("task:TASK_STATE_SUBMITTED", "task:TASK_STATE_WORKING")
    assert "status:TASK_STATE_WORKING" in events  # progress on the way
    assert events[-1] == "status:TASK_STATE_COMPLETED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_stops_the_job_within_seconds_and_it_stays_cancelled(
    pg: A2ADeployment, server: Server, binding: str
) -> None:
    async with a2a_client(server.url, binding=binding) as client:
        task = await started(client, "slow 30")
        await until(client, task.id, WORKING)
        pg.deployment.wait_status(task.id, TaskStatus.WORKING)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        stopped_at = time.monotonic()
        _wait_records(pg, task.id, "stopped:")
        stopped_in = time.monotonic() - stopped_at
        await asyncio.sleep(1.0)
        later = await client.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))

    assert cancelled.status.state == CANCELED
    assert stopped_in < 5
    assert later.status.state == CANCELED
    assert pg.deployment.queue.store.get(task.id).status is TaskStatus.CANCELLED
    assert not any(event.endswith("end") for event in pg.deployment.events_of(task.id))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_second_message_continues_a_task_that_asked_for_input(
    server: Server, binding: str
) -> None:
    async with a2a_client(server.url, binding=binding) as client:
        asked = await send(client, message("ask"))
        answered = await send(client, message("Ada", task_id=asked.id, context_id=asked.context_id))
        got = await client.get_task(GetTaskRequest(id=asked.id))

    assert asked.status.state == INPUT_REQUIRED
    assert asked.status.message.parts[0].text == "What is your name?"
    assert answered.id == asked.id
    assert answered.status.state == COMPLETED
    assert texts(answered)["result"] == "Hello, Ada!"
    users = [m.parts[0].text for m in answered.history if m.role == Role.ROLE_USER]
    assert users == ["ask", "Ada"]
    conversation = [(Role.ROLE_USER, "ask"), (Role.ROLE_AGENT, "What is your name?")]
    conversation.append((Role.ROLE_USER, "Ada"))
    assert [(m.role, m.parts[0].text) for m in got.history] == conversation
    assert [(m.role, m.parts[0].text) for m in answered.history] == conversation


async def test_a_restarted_server_gets_subscribes_and_cancels_and_the_job_is_revoked(
    pg: A2ADeployment,
) -> None:
    first = pg.start_server()
    async with a2a_client(first.url) as client:
        task = await started(client, "slow 30")
        await until(client, task.id, WORKING)
    pg.stop(first)

    second = pg.start_server()
    try:
        async with (
            a2a_client(second.url) as client,
            a2a_client(second.url, streaming=True) as streaming,
        ):
            got = await client.get_task(GetTaskRequest(id=task.id))
            subscription = streaming.subscribe(SubscribeToTaskRequest(id=task.id))
            events = []
            async for event in subscription:
                events.append(event)
                if len(events) == 2:
                    break
            await subscription.aclose()  # type: ignore[attr-defined]
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
            _wait_records(pg, task.id, "stopped:")
            final = await client.get_task(GetTaskRequest(id=task.id))
    finally:
        pg.stop(second)

    assert got.status.state == WORKING
    assert events[0].task.status.state == WORKING
    assert events[1].status_update.status.state == WORKING  # the worker's progress, live
    assert cancelled.status.state == CANCELED
    assert final.status.state == CANCELED


async def test_two_servers_share_one_store(pg: A2ADeployment, server: Server) -> None:
    other = pg.start_server()
    try:
        async with (
            a2a_client(server.url) as here,
            a2a_client(other.url) as there,
            a2a_client(other.url, streaming=True) as watching,
        ):
            task = await started(here, "slow 2")
            await until(there, task.id, WORKING)
            events = await collect(watching.subscribe(SubscribeToTaskRequest(id=task.id)))
            done = await there.get_task(GetTaskRequest(id=task.id))
            listed = await there.list_tasks(ListTasksRequest(page_size=100))

            long = await started(there, "slow 30")
            await until(here, long.id, WORKING)
            cancelled = await here.cancel_task(CancelTaskRequest(id=long.id))
            _wait_records(pg, long.id, "stopped:")
            seen_there = await until(there, long.id, CANCELED, timeout=5)
    finally:
        pg.stop(other)

    assert events[-1] == "status:TASK_STATE_COMPLETED"
    assert done.status.state == COMPLETED
    assert task.id in {listed_task.id for listed_task in listed.tasks}
    assert cancelled.status.state == CANCELED
    assert seen_there.status.state == CANCELED


def _wait_records(pg: A2ADeployment, task_id: str, prefix: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not any(event.split(" ", 1)[1].startswith(prefix) for event in _events(pg, task_id)):
        assert time.monotonic() < deadline, (
            f"no {prefix!r} record for {task_id}: {pg.deployment.events_of(task_id)}{pg.logs()}"
        )
        time.sleep(0.05)


def _events(pg: A2ADeployment, task_id: str) -> list[str]:
    return [event for event in pg.deployment.events_of(task_id) if " " in event]


async def test_a_tenant_is_part_of_the_owner(server: Server) -> None:
    async with a2a_client(server.url, user="tenanted") as client:
        request = message("echo in acme")
        request.tenant = "acme"
        task = await send(client, request)
        inside = await client.get_task(GetTaskRequest(id=task.id, tenant="acme"))
        listed = await client.list_tasks(ListTasksRequest(tenant="acme"))
        outside = await client.list_tasks(ListTasksRequest())
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id, tenant="other"))

    assert inside.status.state == COMPLETED
    assert [t.id for t in listed.tasks] == [task.id]
    assert outside.total_size == 0


async def test_progress_rides_in_the_status_and_the_history_keeps_the_conversation(
    pg: A2ADeployment, server: Server
) -> None:
    updates: list[Task] = []
    async with (
        a2a_client(server.url, streaming=True) as streaming,
        a2a_client(server.url, binding="HTTP+JSON") as client,
    ):
        task_id = ""
        async for event in streaming.send_message(message("burst 200")):
            if event.HasField("task"):
                task_id = event.task.id
            elif event.HasField("status_update"):
                updates.append(Task(status=event.status_update.status))
        latest = await client.get_task(GetTaskRequest(id=task_id, history_length=50))
        whole = await client.get_task(GetTaskRequest(id=task_id))
        sent = await send(client, message("burst 200"))

    progress = [
        update.status.message.metadata["progress"]
        for update in updates
        if update.status.state == WORKING and "progress" in update.status.message.metadata
    ]
    assert len(progress) >= 10, progress  # the change feed may coalesce reports
    assert progress == sorted(progress)
    assert updates[-1].status.state == COMPLETED
    assert [(m.role, m.parts[0].text) for m in whole.history] == [(Role.ROLE_USER, "burst 200")]
    assert latest.history[0].parts[0].text == "burst 200"
    assert [m.role for m in sent.history] == [Role.ROLE_USER]
    # The row stays small however often the job reports.
    assert len(str(pg.deployment.queue.store.get(task_id).metadata)) < 1_000
