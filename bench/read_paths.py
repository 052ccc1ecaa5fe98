"""How an asyncio caller reads one task: the thread hop against psycopg's async driver.

    uv run python bench/read_paths.py [--gets N] [--rounds R]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust). On a scratch database
(dropped at the end) with 200 tasks of one owner, N owner-scoped gets of a task
by id, on one event loop, one after another, each way:

1. ``store.get`` called directly (blocks the loop: the floor of the sync path);
2. ``await store.run_async(store.get, ...)`` outside ``open_async``: a worker
   thread (``asyncio.to_thread``), what the async surfaces do on a store that
   was not opened on the loop;
3. the same inside ``store.open_async()``: the sync code in a greenlet on the
   loop's own async engine (``queuestore.store.sql.executor``), what ``A2AServer`` and
   the HTTP app do; once with greenlets and connections kept warm between
   calls (the default), once without (``keep_warm=False``: SQLAlchemy's
   ``greenlet_spawn`` and a pool checkout per statement);
4. the store's own compiled fetch statement (the task as one JSON text) on one
   psycopg ``AsyncConnection``, decoded with ``Task.model_validate_json``: the
   async driver's floor;
5. the same through a psycopg_pool ``AsyncConnectionPool`` (a checkout a get).

Every figure is the median of ``--rounds`` interleaved rounds; the ratios are
each way's rate over the thread hop's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable

import psycopg
from benchkit import scratch_database
from psycopg_pool import AsyncConnectionPool
from rich.console import Console
from rich.table import Table

from queuestore import SqlTaskStore, Task
from queuestore.store.sql import queries
from queuestore.store.sql.executor import Prepared

OWNER = "alice"
TASKS = 200


def fetch_statement(store: SqlTaskStore) -> Prepared:
    """The statement ``store.get(task_id, owner=OWNER)`` runs on PostgreSQL."""
    return Prepared(
        queries.fetch_task("owner", [queries.TASK_OBJECT]),
        store.engine.dialect,
        [queries.TASK_JSON],
    )


async def rate(gets: int, get: Callable[[str], Awaitable[object]], ids: list[str]) -> float:
    start = time.perf_counter()
    for i in range(gets):
        await get(ids[i % len(ids)])
    return gets / (time.perf_counter() - start)


async def run(url: str, gets: int, rounds: int) -> None:
    store = SqlTaskStore(url)
    ids = [store.create("bench.read", owner=OWNER).id for _ in range(TASKS)]
    fetch = fetch_statement(store)

    async def direct(task_id: str) -> Task:
        return store.get(task_id, owner=OWNER)

    async def thread(task_id: str) -> Task:
        return await store.run_async(store.get, task_id, owner=OWNER)

    async def on_loop(task_id: str) -> Task:
        return await opened.run_async(opened.get, task_id, owner=OWNER)

    async def on_loop_cold(task_id: str) -> Task:
        return await cold.run_async(cold.get, task_id, owner=OWNER)

    async def on(connection: psycopg.AsyncConnection[tuple[str]], task_id: str) -> Task:
        arguments = fetch.arguments({"task_id": task_id, "owner": OWNER})
        cursor = await connection.execute(fetch.sql, arguments, prepare=True)
        row = await cursor.fetchone()
        assert row is not None
        return Task.model_validate_json(row[0])

    connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
    pool = AsyncConnectionPool(url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False)
    await pool.open()
    opened = SqlTaskStore(url)  # a second store, the one opened on the loop
    on_the_loop = contextlib.AsyncExitStack()
    await on_the_loop.enter_async_context(opened.open_async())
    cold = SqlTaskStore(url, keep_warm=False)  # a third, without the warm greenlets
    await on_the_loop.enter_async_context(cold.open_async())

    async def one_connection(task_id: str) -> Task:
        return await on(connection, task_id)

    async def pooled(task_id: str) -> Task:
        async with pool.connection() as checked_out:
            return await on(checked_out, task_id)

    ways: dict[str, Callable[[str], Awaitable[object]]] = {
        "store.get, direct (blocks the loop)": direct,
        "run_async(store.get), a thread": thread,
        "run_async(store.get) in open_async": on_loop,
        "the same, keep_warm=False": on_loop_cold,
        "AsyncConnection": one_connection,
        "AsyncConnectionPool": pooled,
    }
    try:
        for way in ways.values():  # warm-up: connections, prepared statements
            await rate(200, way, ids)
        rates: dict[str, list[float]] = {name: [] for name in ways}
        for round_ in range(1, rounds + 1):
            for name, way in ways.items():
                rates[name].append(await rate(gets, way, ids))
            print(
                f"round {round_}/{rounds}: " + ", ".join(f"{r[-1]:,.0f}/s" for r in rates.values())
            )
    finally:
        await on_the_loop.aclose()
        await pool.close()
        await connection.close()
        store.close()
        opened.close()
        cold.close()

    hop = statistics.median(rates["run_async(store.get), a thread"])
    table = Table(title=f"One task read from asyncio, {gets} gets, median of {rounds} rounds")
    for column in ("way", "gets/s", "vs the thread hop", "rounds"):
        table.add_column(column, justify="left" if column == "way" else "right")
    for name, values in rates.items():
        median = statistics.median(values)
        rounds_text = " ".join(f"{value:,.0f}" for value in values)
        table.add_row(name, f"{median:,.0f}", f"{median / hop:.2f}x", rounds_text)
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=2000, help="gets per way and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with scratch_database("queuestore_bench_reads", migrate=True) as url:
        asyncio.run(run(url, args.gets, args.rounds))


if __name__ == "__main__":
    main()
