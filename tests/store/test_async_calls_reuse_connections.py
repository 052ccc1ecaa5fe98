"""The connections an event loop keeps between its calls (``open_async`` on PostgreSQL).

A call gives its connection back to a short list instead of the pool, and the
next call takes it with its cursor. These tests hold the list to the pool's
own promises: its limit, no wait while a connection sits unused, and no dead
connection lent after the server dropped them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from sqlalchemy import URL, text

from queuestore import SqlTaskStore
from queuestore.store.sql import executor as loop
from queuestore.store.sql.engine import loop_engine as _loop_engine

pytestmark = pytest.mark.postgres

T = TypeVar("T")
STORE = object()


@pytest.fixture
def pg_url(shared: Any) -> Iterator[URL]:
    with shared.fresh_pg_database("queuestore_loop_connections") as url:
        yield url


def on_loop(url: URL, size: int, body: Callable[[loop.LoopConnections], T]) -> T:
    """``body(connections)`` in a greenlet of the loop, on a pool of ``size`` connections."""

    async def main() -> T:
        connections = loop.LoopConnections(_loop_engine(url, max_connections=size, timeout=2.0))
        try:
            return await loop.run(STORE, connections, body, connections)
        finally:
            await connections.dispose()

    return asyncio.run(main())


def test_the_next_call_takes_the_connection_and_cursor_the_last_one_gave_back(
    pg_url: URL,
) -> None:
    def body(connections: loop.LoopConnections) -> list[loop.Lent]:
        pool: Any = connections.sync_engine.pool
        lent = []
        for _ in range(5):
            taken = connections.lend()
            lent.append(taken)
            connections.give_back(taken)
        assert pool.checkedout() == 1
        return lent

    lent = on_loop(pg_url, 4, body)

    assert len({id(taken) for taken in lent}) == 1
    assert len({id(taken.cursor) for taken in lent}) == 1


def test_a_connection_goes_back_to_the_pool_when_no_other_is_left(pg_url: URL) -> None:
    def body(connections: loop.LoopConnections) -> list[int]:
        pool: Any = connections.sync_engine.pool
        first = connections.lend()
        second = connections.lend()
        connections.give_back(first)  # the pool is out: someone may be waiting for one
        counts = [pool.checkedout()]
        connections.give_back(second)  # one is free now: this one is kept
        counts.append(pool.checkedout())
        return counts

    assert on_loop(pg_url, 2, body) == [1, 1]


def test_kept_connections_are_released_for_a_connection_the_pool_must_lend(
    pg_url: URL,
) -> None:
    def body(connections: loop.LoopConnections) -> int:
        pool: Any = connections.sync_engine.pool
        kept = connections.lend()
        connections.give_back(kept)  # kept: one of two is out
        other = connections.sync_engine.raw_connection()  # the pool's last one
        connections.release_idle()  # what a statement through a Connection does first
        with connections.sync_engine.connect() as connection:  # no wait for the timeout
            answer = connection.execute(text("SELECT 42")).scalar_one()
        other.close()
        assert pool.checkedout() == 0
        return int(answer)

    assert on_loop(pg_url, 2, body) == 42


def test_kept_connections_are_dropped_with_the_dead_one(pg_url: URL, shared: Any) -> None:
    store = SqlTaskStore(pg_url.render_as_string(hide_password=False))
    try:
        store.migrate()
        task = store.create("a.job")

        async def main() -> list[Any]:
            async with store.open_async(max_connections=4):
                # Two connections kept: the loop had two calls in flight at once.
                await asyncio.gather(*(store.run_async(store.get, task.id) for _ in range(2)))
                (connections,) = store._executor._loops.values()
                kept = len(connections._idle)
                assert await asyncio.to_thread(shared.terminate_connections, pg_url.database) >= 1
                read = await store.run_async(store.get, task.id)  # tried again, on a new one
                return [kept, read, len(connections._idle)]

        assert asyncio.run(main()) == [2, task, 1]
    finally:
        store.close()
