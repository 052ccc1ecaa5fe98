"""``run_async``: the sync verbs, awaited, in a thread or on the event loop's own connections."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from queuestore import (
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    SqlTaskStore,
    StoreUnavailable,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)
from queuestore.aio import AsyncTaskStore
from queuestore.store.sql import blocking

from .support import CLOSED_PORT_URL

POSTGRES = [pytest.param("postgres", marks=pytest.mark.postgres)]


async def scenario(store: TaskStore) -> dict[str, Any]:
    """Every verb of the async twin, as a server would call them; what they answered."""
    astore = AsyncTaskStore(store)
    alice = [await astore.create("a.job", {"n": n}, owner="alice") for n in range(5)]
    await astore.create("b.job", owner="alice", context_id="c1")
    for _ in range(3):
        await astore.create("a.job", owner="bob")
    await astore.update(alice[0].id, status=TaskStatus.WORKING, progress=0.5)
    await astore.add_artifact(alice[0].id, {"artifact_id": "a1", "parts": [1]})
    await astore.cancel(alice[1].id, reason="enough")
    await astore.delete(alice[2].id, owner="alice")
    pages, cursor = [], None
    while True:
        page = await astore.list(owner="alice", limit=2, cursor=cursor)
        pages.append([task.id for task in page.tasks])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    with pytest.raises(TaskNotFound):
        await astore.get(alice[0].id, owner="bob")
    with pytest.raises(TaskNotFound):
        await astore.get(alice[2].id, owner="alice")
    with pytest.raises(InvalidTransition):
        await astore.update(alice[1].id, status=TaskStatus.WORKING)
    with pytest.raises(InvalidTaskData):
        await astore.list(owner="alice", limit=0)
    alices_cursor = (await astore.list(owner="alice", limit=2)).next_cursor
    assert alices_cursor is not None
    with pytest.raises(InvalidCursor):  # it pages alice's listing, not bob's
        await astore.list(owner="bob", limit=2, cursor=alices_cursor)
    return {
        "ids": [task.id for task in alice],
        "first": await astore.get(alice[0].id, owner="alice"),
        "cancelled": await astore.get(alice[1].id),
        "pages": pages,
        "counts": [
            await astore.count(owner="alice"),
            await astore.count(owner="bob"),
            await astore.count(status=["working", "cancelled"]),
        ],
    }


@pytest.mark.parametrize("opened", [False, True], ids=["thread", "open_async"])
def test_the_async_verbs_keep_the_sync_rules_in_a_thread_or_on_the_loop(
    store: TaskStore, opened: bool
) -> None:
    async def run() -> dict[str, Any]:
        if not opened:
            return await scenario(store)
        async with store.open_async():
            return await scenario(store)

    seen = asyncio.run(run())

    first, cancelled = seen["first"], seen["cancelled"]
    assert (first.status, first.progress, [a.artifact_id for a in first.artifacts]) == (
        TaskStatus.WORKING,
        0.5,
        ["a1"],
    )
    assert (cancelled.status, cancelled.status_message) == (TaskStatus.CANCELLED, "enough")
    assert store.get(first.id) == first  # what the loop wrote, the sync side reads
    assert [len(page) for page in seen["pages"]] == [2, 2, 1]  # 6 of alice's, one deleted
    assert seen["counts"] == [5, 3, 2]


def test_open_async_refuses_pool_options_out_of_range(store: TaskStore) -> None:
    async def open_with(**options: Any) -> None:
        async with store.open_async(**options):
            raise AssertionError("opened")

    with pytest.raises(ValueError, match="max_connections must be 1 or more"):
        asyncio.run(open_with(max_connections=0))
    with pytest.raises(ValueError, match="timeout must be positive"):
        asyncio.run(open_with(timeout=0))


# -- PostgreSQL: the loop's own connections ------------------------------------


def refuse_sync_statements(store: SqlTaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the engine's (sync) pool refuse every checkout: a witness of where calls run."""

    class Refusing:
        def connect(self) -> Any:
            raise AssertionError("a statement went through the sync pool")

    monkeypatch.setattr(store._executor, "_statements", Refusing())


@pytest.mark.parametrize("backend", POSTGRES)
def test_inside_open_async_no_statement_takes_the_sync_pool_or_a_thread(
    store: SqlTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_sync_statements(store, monkeypatch)
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def get_on(task_id: str) -> Any:
        threads.append(threading.get_ident())
        return store.get(task_id)

    async def run() -> dict[str, Any]:
        async with store.open_async():
            seen = await scenario(store)
            await store.run_async(get_on, seen["ids"][0])
        with pytest.raises(AssertionError, match="sync pool"):  # the block is over
            await store.run_async(store.get, seen["ids"][0])
        return seen

    assert asyncio.run(run())["counts"] == [5, 3, 2]
    assert threads == [loop_thread]


@pytest.mark.parametrize("backend", POSTGRES)
def test_blocking_calls_leave_the_loop_and_take_the_sync_way(
    store: SqlTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What blocks on something else than the store runs in a thread, its statements sync."""
    task = store.create("a.job")
    loop_thread = threading.get_ident()
    ran_on: list[int] = []
    sync_checkouts: list[int] = []
    connect = store._executor._statements.connect

    def counted_connect() -> Any:
        sync_checkouts.append(threading.get_ident())
        return connect()

    monkeypatch.setattr(store._executor._statements, "connect", counted_connect)

    def publish(task_id: str) -> str:  # a broker call, say, that also reads the store
        ran_on.append(threading.get_ident())
        return store.get(task_id).id

    def save(task_id: str) -> str:
        store.update(task_id, progress=0.25)  # on the loop's connections
        return blocking(publish, task_id)

    async def run() -> str:
        async with store.open_async():
            return await store.run_async(save, task.id)

    assert asyncio.run(run()) == task.id
    assert sync_checkouts == ran_on  # only the blocking call's read took the sync pool
    assert len(ran_on) == 1
    assert ran_on[0] != loop_thread
    assert store.get(task.id).progress == 0.25
    assert blocking(publish, task.id) == task.id  # outside a loop: a plain call
    assert ran_on[-1] == threading.get_ident()


@pytest.mark.parametrize("backend", POSTGRES)
def test_blocks_on_one_loop_share_an_engine_and_other_loops_keep_the_thread(
    store: SqlTaskStore,
) -> None:
    task = store.create("a.job")
    other_loop: list[bool] = []

    def read_from_another_loop() -> None:
        async def read() -> bool:
            where: list[int] = []

            def get() -> Any:
                where.append(threading.get_ident())
                return store.get(task.id)

            assert (await store.run_async(get)).id == task.id
            return where[0] != threading.get_ident()

        other_loop.append(asyncio.run(read()))

    async def run() -> None:
        async with store.open_async():
            (outer,) = store._executor._loops.values()
            async with store.open_async(max_connections=1):
                assert list(store._executor._loops.values()) == [outer]
            assert list(store._executor._loops.values()) == [outer]  # the inner block left it open
            assert (await store.run_async(store.get, task.id)).id == task.id
            reader = threading.Thread(target=read_from_another_loop)
            reader.start()
            await asyncio.to_thread(reader.join)
        assert store._executor._loops == {}

    asyncio.run(run())

    assert other_loop == [True]  # the other loop's call ran in a worker thread


@pytest.mark.parametrize("backend", POSTGRES)
def test_concurrent_calls_wait_for_the_loops_connections(store: SqlTaskStore) -> None:
    tasks = [store.create("a.job", owner="alice") for _ in range(5)]

    async def run() -> list[Any]:
        async with store.open_async(max_connections=2):
            return await asyncio.gather(
                *(store.run_async(store.get, tasks[n % 5].id) for n in range(40)),
                *(store.run_async(store.update, t.id, progress=0.5) for t in tasks),
                *(store.run_async(store.count, owner="alice") for _ in range(10)),
            )

    answers = asyncio.run(run())

    assert [task.id for task in answers[:40]] == [tasks[n % 5].id for n in range(40)]
    assert [task.progress for task in answers[40:45]] == [0.5] * 5
    assert answers[45:] == [5] * 10


@pytest.mark.parametrize("backend", POSTGRES)
@pytest.mark.parametrize("keep_warm", [True, False], ids=["kept", "checked_out_each_time"])
def test_every_call_gives_its_connection_back_also_a_failed_or_cancelled_one(
    store: SqlTaskStore, keep_warm: bool
) -> None:
    task = store.create("a.job")
    store._executor.keep_warm = keep_warm  # as SqlTaskStore(..., keep_warm=...) sets it

    async def run() -> list[int]:
        async with store.open_async(max_connections=3):
            (connections,) = store._executor._loops.values()
            pool: Any = connections.sync_engine.pool

            def lent() -> int:  # out of the pool, and not kept for the next call
                return int(pool.checkedout()) - len(connections._idle)

            await asyncio.gather(*(store.run_async(store.get, task.id) for _ in range(10)))
            out = [lent()]
            with pytest.raises(TaskNotFound):
                await store.run_async(store.get, "no-such-task")
            out.append(lent())
            reads = [asyncio.ensure_future(store.run_async(store.get, task.id)) for _ in range(6)]
            await asyncio.sleep(0)  # each has its statement sent, or waits for a connection
            for read in reads:
                read.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            out.append(lent())
            out.append(len([await store.run_async(store.get, task.id) for _ in range(3)]))
            assert bool(connections._idle) is keep_warm
            return out

    assert asyncio.run(run()) == [0, 0, 0, 3]


@pytest.mark.postgres
@pytest.mark.parametrize("keep_warm", [True, False], ids=["kept", "checked_out_each_time"])
def test_reads_on_the_loop_ride_out_dropped_connections(shared: Any, keep_warm: bool) -> None:
    """Every server-side connection of the database is killed between two reads (a restart,
    as the pool sees it): the next read is tried again on a fresh connection."""
    # A database of its own: the killing must not reach other tests' pooled connections.
    with shared.fresh_pg_database("queuestore_ride_out") as url:
        store = SqlTaskStore(url.render_as_string(hide_password=False), keep_warm=keep_warm)
        try:
            store.migrate()
            task = store.create("a.job", owner="alice")

            async def run() -> list[Any]:
                async with store.open_async(max_connections=2):
                    read = [await store.run_async(store.get, task.id)]
                    assert await asyncio.to_thread(shared.terminate_connections, url.database) >= 1
                    read.append(await store.run_async(store.get, task.id))
                    read.append(await store.run_async(store.count, owner="alice"))
                    return read

            assert asyncio.run(run()) == [task, task, 1]
        finally:
            store.close()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "call",
    [
        lambda store: store.get("some-id"),
        lambda store: store.list(),
        lambda store: store.create("a.job"),
    ],
    ids=["get", "list", "create"],
)
def test_an_unreachable_database_raises_store_unavailable_on_the_loop(
    call: Callable[[SqlTaskStore], Any],
) -> None:
    store = SqlTaskStore(CLOSED_PORT_URL)

    async def run() -> None:
        async with store.open_async():
            with pytest.raises(StoreUnavailable):
                await store.run_async(call, store)

    try:
        asyncio.run(run())
    finally:
        store.close()


@pytest.mark.parametrize("backend", POSTGRES)
def test_a_call_cancelled_while_it_waits_on_the_database_leaves_the_loop_sound(
    store: SqlTaskStore, postgres_url: str
) -> None:
    """A client goes away while its write waits on a row lock: the coroutine is cancelled,
    the statement with it, and the loop's next calls run on sound connections."""
    task = store.create("a.job")
    conninfo = postgres_url.replace("postgresql+psycopg://", "postgresql://")

    async def run() -> list[Any]:
        async with store.open_async(max_connections=1):
            with psycopg.connect(conninfo) as locker:  # holds the row until it commits
                locker.execute(
                    "SELECT 1 FROM queuestore_tasks WHERE id = %s FOR UPDATE", (task.id,)
                )
                waiting = asyncio.create_task(store.run_async(store.update, task.id, progress=0.5))
                await asyncio.sleep(0.3)
                assert not waiting.done()  # blocked on the lock
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                locker.commit()
            # The one connection of the loop serves the next calls.
            after = await store.run_async(store.get, task.id)
            updated = await store.run_async(store.update, task.id, progress=0.75)
            return [after.progress, updated.progress, updated.version - task.version]

    # The cancelled write never applied: the next one is the first after create.
    assert asyncio.run(run()) == [None, 0.75, 1]
