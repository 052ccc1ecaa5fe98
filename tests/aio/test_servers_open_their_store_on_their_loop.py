"""The servers open their store on their event loop for their lifespan (``open_async``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from celery import Celery

from queuestore import Settings, SqlTaskStore, TaskQueue


@pytest.fixture
def queue(postgres_url: str) -> Iterator[TaskQueue]:
    app = Celery("lifespans")
    store = SqlTaskStore(postgres_url)
    try:
        yield TaskQueue(store, app)
    finally:
        store.close()
        app.close()


def a2a_lifespan(queue: TaskQueue) -> AbstractAsyncContextManager[Any]:
    from queuestore.a2a import A2AServer, agent_card

    card = agent_card("http://127.0.0.1:1", name="lifespans", description="a test")
    app = A2AServer(queue, job="lifespans.echo", card=card).app()
    return app.router.lifespan_context(app)


def http_lifespan(queue: TaskQueue) -> AbstractAsyncContextManager[Any]:
    from queuestore.http import create_app

    app = create_app(Settings(), queue=queue)
    return app.router.lifespan_context(app)


def mcp_lifespan(queue: TaskQueue) -> AbstractAsyncContextManager[Any]:
    from queuestore.mcp import McpTasks

    return McpTasks(queue.app).lifespan(object())


@pytest.mark.postgres
@pytest.mark.parametrize(
    "lifespan", [a2a_lifespan, http_lifespan, mcp_lifespan], ids=["a2a", "http", "mcp"]
)
def test_a_server_opens_its_store_on_its_loop_while_it_runs(
    queue: TaskQueue, lifespan: Callable[[TaskQueue], AbstractAsyncContextManager[Any]]
) -> None:
    store = queue.store
    assert isinstance(store, SqlTaskStore)

    async def serve() -> None:
        async with lifespan(queue):
            assert list(store._executor._loops) == [asyncio.get_running_loop()]
        assert store._executor._loops == {}

    asyncio.run(serve())
