"""The research's probes P2, P5, P6 and P8: a2a-sdk's own stores lose, queuestore's keep.

Each test runs one scenario twice on the same PostgreSQL database, through
a2a-sdk's ``DefaultRequestHandler`` in this process: once on the SDK's
``DatabaseTaskStore`` (asyncpg), where the probe's loss shows, and once on
queuestore's stores, where it does not. P8 runs a real job on the module's
worker, so "the job is revoked" is what the job itself recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import DatabaseTaskStore, TaskUpdater
from a2a.server.tasks import TaskStore as A2ATaskStore
from a2a.types import (
    AgentSkill,
    CancelTaskRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from queuestore import Artifact, SqlTaskStore
from queuestore import TaskStatus as Status
from queuestore.a2a import (
    QueuestoreAgentExecutor,
    QueuestoreEventStream,
    QueuestoreTaskStore,
    VersionedQueuestoreTaskStore,
    agent_card,
)
from tests.a2a.a2a_support import A2ADeployment, call_context

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.postgres]

CARD = agent_card(
    "http://127.0.0.1:9",
    name="probes",
    description="the research's probes",
    skills=[AgentSkill(id="work", name="work", description="works", tags=["probe"])],
)
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
ALICE = call_context("alice")


class Handoff(AgentExecutor):
    """Starts the task (Task, WORKING) and leaves the work to someone else.

    ``wait``: keep ``execute`` running until cancelled (a waiter); else return at once.
    ``late``: on cancel, say CANCELED and then a late COMPLETED (P5).
    """

    def __init__(self, *, wait: bool = False, late: bool = False) -> None:
        self.wait = wait
        self.late = late
        self.cancels = 0

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        if context.current_task is None:
            task = Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message else [],
            )
            await event_queue.enqueue_event(task)
        await TaskUpdater(event_queue, context.task_id, context.context_id).start_work()
        if self.wait:
            await asyncio.Event().wait()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancels += 1
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        if self.late:
            status = TaskStatus(state=COMPLETED)
            await event_queue.enqueue_event(
                TaskStatusUpdateEvent(
                    task_id=context.task_id, context_id=context.context_id, status=status
                )
            )


@pytest.fixture(scope="module")
def sql_store(pg: A2ADeployment) -> Iterator[SqlTaskStore]:
    store = SqlTaskStore(pg.deployment.database_url)
    yield store
    store.close()


@pytest.fixture
async def sdk_engine(pg: A2ADeployment) -> AsyncIterator[AsyncEngine]:
    url = pg.deployment.database_url.replace("postgresql+psycopg://", "postgresql://")
    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://"))
    yield engine
    await engine.dispose()


def handler(store: Any, executor: AgentExecutor, event_stream: Any = None) -> DefaultRequestHandler:
    return DefaultRequestHandler(
        agent_executor=executor, task_store=store, agent_card=CARD, event_stream=event_stream
    )


async def start(serving: DefaultRequestHandler, text: str = "work") -> Task:
    """A task sent with return_immediately."""
    request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
    request.configuration.return_immediately = True
    task = await serving.on_message_send(request, ALICE)
    assert isinstance(task, Task)
    return task


async def stored(store: A2ATaskStore, task_id: str, state: int, timeout: float = 5) -> Task:
    deadline = time.monotonic() + timeout
    while True:
        task = await store.get(task_id, ALICE)
        assert task is not None
        if task.status.state == state:
            return task
        assert time.monotonic() < deadline, f"stored task stayed {task.status.state}"
        await asyncio.sleep(0.02)


async def test_p2_a_cancel_keeps_the_artifact_a_worker_wrote(
    sdk_engine: AsyncEngine, sql_store: SqlTaskStore
) -> None:
    """P2: the worker writes an artifact to the store; the cancel from the SDK's stale copy."""

    async def scenario(store: A2ATaskStore, worker_writes: Callable[[Task], Any]) -> Task:
        serving = handler(store, Handoff())
        try:
            task = await start(serving)
            current = await stored(store, task.id, WORKING)
            await worker_writes(current)
            await serving.on_cancel_task(CancelTaskRequest(id=task.id), ALICE)
            final = await store.get(task.id, ALICE)
            assert final is not None
            return final
        finally:
            await serving.aclose()

    sdk_store = DatabaseTaskStore(sdk_engine)

    async def sdk_worker(current: Task) -> None:
        current.artifacts.append(_artifact())
        await sdk_store.save(current, ALICE)

    ours = QueuestoreTaskStore(sql_store)

    async def queuestore_worker(current: Task) -> None:
        await asyncio.to_thread(
            sql_store.add_artifact,
            current.id,
            Artifact(artifact_id="report", name="report", parts=[{"text": "rows: 42"}]),
        )

    sdk_final = await scenario(sdk_store, sdk_worker)
    our_final = await scenario(ours, queuestore_worker)

    assert sdk_final.status.state == CANCELED
    assert len(sdk_final.artifacts) == 0  # the SDK's store lost the worker's artifact
    assert our_final.status.state == CANCELED
    assert [artifact.artifact_id for artifact in our_final.artifacts] == ["report"]
    assert our_final.artifacts[0].parts[0].text == "rows: 42"
    assert len(our_final.history) == 1


async def test_p5_a_late_completed_never_overwrites_canceled(
    sdk_engine: AsyncEngine, sql_store: SqlTaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    """P5: the executor's cancel says CANCELED, then a late COMPLETED follows."""

    async def scenario(store: A2ATaskStore) -> tuple[Task, Task]:
        serving = handler(store, Handoff(wait=True, late=True))
        try:
            task = await start(serving)
            await stored(store, task.id, WORKING)
            answered = await serving.on_cancel_task(CancelTaskRequest(id=task.id), ALICE)
            assert isinstance(answered, Task)
            await asyncio.sleep(0.3)  # the late event has had its chance
            final = await store.get(task.id, ALICE)
            assert final is not None
            return answered, final
        finally:
            await serving.aclose()

    sdk_answer, sdk_final = await scenario(DatabaseTaskStore(sdk_engine))
    our_answer, our_final = await scenario(QueuestoreTaskStore(sql_store))

    assert sdk_answer.status.state == CANCELED
    assert sdk_final.status.state == COMPLETED  # the SDK's store: CANCELED overwritten
    assert our_answer.status.state == CANCELED
    assert our_final.status.state == CANCELED
    assert sql_store.get(our_final.id).status is Status.CANCELLED
    assert any("refused a late TASK_STATE_COMPLETED" in line for line in caplog.messages)


async def test_p6_subscribe_after_a_restart_receives_the_workers_completion(
    sdk_engine: AsyncEngine, sql_store: SqlTaskStore
) -> None:
    """P6: a fresh handler (a restarted server) subscribes to a task a worker finishes."""

    async def scenario(
        store: Any, event_stream: Any, worker_completes: Callable[[Task], Any]
    ) -> list[str]:
        before = handler(store, Handoff(), event_stream)
        task = await start(before)
        current = await stored(_plain(store), task.id, WORKING)
        await before.aclose()
        after = handler(store, Handoff(), event_stream)  # the restarted server
        seen: list[str] = []
        try:

            async def follow() -> None:
                subscription = after.on_subscribe_to_task(SubscribeToTaskRequest(id=task.id), ALICE)
                async for event in subscription:
                    seen.append(_kind(event))
                    if len(seen) == 1:
                        await worker_completes(current)

            try:
                await asyncio.wait_for(follow(), timeout=3)
            except TimeoutError:
                seen.append("(no more events within 3s)")
        finally:
            await after.aclose()
        return seen

    sdk_store = DatabaseTaskStore(sdk_engine)

    async def sdk_worker(current: Task) -> None:
        current.status.state = COMPLETED
        await sdk_store.save(current, ALICE)

    async def queuestore_worker(current: Task) -> None:
        await asyncio.to_thread(sql_store.update, current.id, status=Status.COMPLETED)

    sdk_seen = await scenario(sdk_store, None, sdk_worker)
    ours = VersionedQueuestoreTaskStore(sql_store)
    our_seen = await scenario(ours, QueuestoreEventStream(sql_store), queuestore_worker)

    # The SDK's stream ends (or hangs) after the snapshot: the completion never arrives.
    assert sdk_seen[0] == "task:TASK_STATE_WORKING"
    assert "status:TASK_STATE_COMPLETED" not in sdk_seen
    assert our_seen == ["task:TASK_STATE_WORKING", "status:TASK_STATE_COMPLETED"]


async def test_p8_a_cancel_after_a_restart_revokes_the_job(
    pg: A2ADeployment, sdk_engine: AsyncEngine
) -> None:
    """P8: a restarted server cancels a running task: the SDK never reaches the work."""
    sdk_store = DatabaseTaskStore(sdk_engine)
    waiter = Handoff(wait=True)
    before = handler(sdk_store, waiter)
    after = handler(sdk_store, waiter)
    try:
        task = await start(before)
        await stored(sdk_store, task.id, WORKING)
        sdk_answer = await after.on_cancel_task(CancelTaskRequest(id=task.id), ALICE)
    finally:
        await before.aclose()
        await after.aclose()

    queue = pg.deployment.queue
    ours = VersionedQueuestoreTaskStore(queue)
    events = QueuestoreEventStream(queue.store)
    running = handler(ours, QueuestoreAgentExecutor(ours, "agent.main"), events)
    try:
        job = await start(running, "slow 30")
        pg.deployment.wait_status(job.id, Status.WORKING)
        _wait_record(pg, job.id, "start")
        fresh = VersionedQueuestoreTaskStore(queue)  # the restarted server's
        restarted = handler(fresh, QueuestoreAgentExecutor(fresh, "agent.main"), events)
        try:
            our_answer = await restarted.on_cancel_task(CancelTaskRequest(id=job.id), ALICE)
            _wait_record(pg, job.id, "stopped:")
        finally:
            await restarted.aclose()
    finally:
        await running.aclose()

    assert isinstance(sdk_answer, Task)
    assert sdk_answer.status.state == CANCELED
    assert waiter.cancels == 0  # the SDK never told the executor: nothing revoked the work
    assert isinstance(our_answer, Task)
    assert our_answer.status.state == CANCELED
    assert queue.store.get(job.id).status is Status.CANCELLED
    assert not any(event.endswith(" end") for event in pg.deployment.events_of(job.id))


def _artifact() -> Any:
    from a2a.types import Artifact as A2AArtifact

    return A2AArtifact(artifact_id="report", name="report", parts=[new_text_part("rows: 42")])


def _plain(store: Any) -> A2ATaskStore:
    return store.as_task_store if isinstance(store, VersionedQueuestoreTaskStore) else store


def _kind(event: Any) -> str:
    if isinstance(event, Task):
        return f"task:{TaskState.Name(event.status.state)}"
    if isinstance(event, TaskStatusUpdateEvent):
        return f"status:{TaskState.Name(event.status.state)}"
    return type(event).__name__


def _wait_record(pg: A2ADeployment, task_id: str, prefix: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not any(
        event.split(" ", 1)[1].startswith(prefix) for event in pg.deployment.events_of(task_id)
    ):
        assert time.monotonic() < deadline, (
            f"no {prefix!r} record for {task_id}: {pg.deployment.events_of(task_id)}{pg.logs()}"
        )
        time.sleep(0.05)
