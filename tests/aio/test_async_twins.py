"""The async twins delegate to the one sync implementation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from celery import Celery

from queuestore import Artifact, InMemoryTaskStore, InvalidTransition, TaskNotFound, TaskQueue
from queuestore.aio import AsyncTaskQueue, AsyncTaskStore
from queuestore.core.callbacks import DeliveryState
from queuestore.store.base import Listener
from queuestore.store.deliveries import Settlement


def test_async_store_speaks_every_verb_with_the_same_rules() -> None:
    inner = InMemoryTaskStore()
    subscribed = threading.Event()
    subscribe = inner.subscribe

    @contextmanager
    def announced() -> Iterator[Listener]:
        with subscribe() as listen:
            subscribed.set()
            yield listen

    inner.subscribe = announced  # type: ignore[method-assign]

    async def scenario() -> None:
        store = AsyncTaskStore(inner)
        task = await store.create("a.job", {"n": 1}, owner="alice", ttl=timedelta(0))
        assert (await store.get(task.id, owner="alice")).input == {"n": 1}
        with pytest.raises(TaskNotFound):
            await store.get(task.id, owner="bob")
        await store.update(task.id, status="working", progress=0.5)
        await store.add_artifact(task.id, Artifact(artifact_id="a", parts=[1]), append=True)
        page = await store.list(owner="alice", status=["working"])
        assert [t.id for t in page.tasks] == [task.id]
        waiting = asyncio.create_task(store.wait(task.id, timeout=5))
        assert await asyncio.to_thread(subscribed.wait, 5)  # wait listens: the cancel wakes it
        await store.cancel(task.id, reason="stop")
        assert (await waiting).status == "cancelled"
        with pytest.raises(InvalidTransition):
            await store.cancel(task.id)
        assert await store.cleanup(timedelta(hours=1)) == 1
        await store.delete(task.id)
        parent = await store.create("a.job", start_by=None, deadline=None, timeout=None)
        assert await store.steps(parent.id) == []
        assert await store.count(parent_id=None) == 1
        assert (await store.list(parent_id=parent.id)).tasks == []
        assert [t.id for t in await store.cancel_tree(parent.id)] == [parent.id]

    asyncio.run(scenario())


def test_async_queue_submits_cancels_and_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    app = Celery("aio", broker="memory://", set_as_current=False)
    sent: list[str] = []
    monkeypatch.setattr(app, "send_task", lambda name, **options: sent.append(options["task_id"]))
    monkeypatch.setattr(app.control, "revoke", lambda *args, **options: None)
    queue = AsyncTaskQueue(TaskQueue(InMemoryTaskStore(), app))

    async def scenario() -> None:
        task = await queue.submit("a.job", {"n": 1}, owner="alice")
        assert sent == [task.id]
        await queue.cancel(task.id, owner="alice")
        assert (await queue.result(task.id, timeout=1, owner="alice")).status == "cancelled"
        with pytest.raises(InvalidTransition):
            await queue.resume(task.id, "yes", owner="alice")

    asyncio.run(scenario())


def test_async_store_speaks_the_push_verbs() -> None:
    inner = InMemoryTaskStore()
    url = "https://93.184.216.34/hook"

    async def scenario() -> None:
        store = AsyncTaskStore(inner)
        task = await store.create("a.job", owner="alice")
        await store.add_callback(task.id, url, events="all", owner="alice")
        assert [c.url for c in await store.callbacks(task.id, owner="alice")] == [url]
        await store.update(task.id, status="working")
        (delivery,) = await store.deliveries(task.id, owner="alice")
        (taken,) = inner.take_deliveries()
        inner.settle_delivery(taken.delivery, Settlement.dead("HTTP 410", 410))
        revived = await store.redeliver(task.id, delivery.id, owner="alice")
        assert revived.state is DeliveryState.PENDING
        assert await store.remove_callback(task.id, owner="alice") == 1

    asyncio.run(scenario())
