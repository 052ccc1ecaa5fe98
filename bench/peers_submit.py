"""Bulk submit against the durable peers: queuestore's ``submit_many`` beside pgqueuer's
batch enqueue and procrastinate's ``batch_defer``, and beside the two floors.

N tasks are enqueued each way, on this machine, in the same run and in
alternating rounds; each way has its own scratch database (created and
dropped here) and one connection:

- **submit_many**: ``TaskQueue.submit_many`` on PostgreSQL and Redis: the rows
  committed in one transaction, then one Celery message per task on Redis.
- **pgqueuer**: ``SyncQueries.enqueue`` of lists (pgqueuer 1.6): one
  ``INSERT ... SELECT unnest(...)``; no broker, workers poll and LISTEN.
- **procrastinate**: ``Task.batch_defer`` (procrastinate 3.10): one
  ``INSERT`` of N rows; no broker either.
- **floor, rows**: the N rows alone into queuestore's table, as raw psycopg:
  one ``INSERT ... SELECT FROM unnest(arrays)``, ids and inputs made beforehand.
- **floor, messages**: the N Celery messages alone, serialised beforehand (taken
  from Redis after a real publish), in one Redis pipeline of ``LPUSH``.

The target: submit_many at least as fast as pgqueuer, never slower than
procrastinate. Each round's messages are purged from Redis, untimed.

    uv run --group bench python bench/peers_submit.py [--tasks 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import redis
from benchkit import scratch_database
from celery import Celery

from queuestore import SqlTaskStore, TaskQueue
from queuestore.core.models import new_task_id
from queuestore.store.sql.engine import make_engine

REDIS = os.environ.get("QUEUESTORE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
QUEUE = "celery"

FLOOR_INSERT = """
INSERT INTO queuestore_tasks (id, name, input, status, artifacts, metadata, answers, errors,
    created_at, updated_at, attempt, suspends, version, job, priority)
SELECT id, 'bench.job', input, 'submitted', '[]', '{}', '[]', '[]', now(), now(), 0, 0, 1,
    true, 0
FROM unnest(%s::text[], %s::jsonb[]) AS new (id, input)
"""


@contextlib.contextmanager
def queuestore_way(n: int) -> Iterator[tuple[Callable[[], object], Callable[[], None]]]:
    """queuestore's submit_many, and how to empty its broker queue."""
    app = Celery("bench-peers", broker=REDIS, set_as_current=False)
    with scratch_database("qs_bench_peers_qs", migrate=True) as url:
        engine = make_engine(url, pool_size=1, max_overflow=1)
        store = SqlTaskStore(engine)
        queue = TaskQueue(store, app)
        items = [{"name": "bench.job", "input": {"i": i}} for i in range(n)]

        def purge() -> None:
            queue.publisher.marks.flush()
            with app.connection_for_write() as connection:
                connection.default_channel.queue_purge(QUEUE)

        queue.submit_many(items[:100])  # warm the connections and the statement caches
        purge()
        try:
            yield (lambda: queue.submit_many(items)), purge
        finally:
            store.close()
            engine.dispose()


@contextlib.contextmanager
def pgqueuer_way(n: int) -> Iterator[Callable[[], object]]:
    """pgqueuer's batch enqueue of N jobs of one entrypoint."""
    from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
    from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment
    from pgqueuer.queries import SyncQueries

    with (
        scratch_database("qs_bench_peers_pgq") as url,
        psycopg.connect(url, autocommit=True) as connection,
    ):
        connection.execute(QueryBuilderEnvironment().build_install_query())
        queries = SyncQueries(SyncPsycopgDriver(connection))
        payloads: list[bytes | None] = [json.dumps({"i": i}).encode() for i in range(n)]
        yield lambda: queries.enqueue(["bench.job"] * n, payloads, [0] * n)


@contextlib.contextmanager
def procrastinate_way(n: int) -> Iterator[Callable[[], object]]:
    """procrastinate's batch_defer of N jobs of one task."""
    from procrastinate import App, SyncPsycopgConnector

    with scratch_database("qs_bench_peers_pro") as url:
        app = App(connector=SyncPsycopgConnector(conninfo=url, min_size=1, max_size=1))

        @app.task(name="bench.job")
        def job(i: int) -> None: ...

        with app.open():
            app.schema_manager.apply_schema()
            kwargs = [{"i": i} for i in range(n)]
            yield lambda: job.batch_defer(*kwargs)


@contextlib.contextmanager
def rows_floor(n: int) -> Iterator[Callable[[], object]]:
    """The rows alone: one INSERT from arrays into queuestore's own table and indexes."""
    with (
        scratch_database("qs_bench_peers_rows", migrate=True) as url,
        psycopg.connect(url, autocommit=True) as connection,
    ):
        inputs = [json.dumps({"i": i}) for i in range(n)]

        def insert() -> None:
            ids = [new_task_id() for _ in range(n)]
            connection.execute(FLOOR_INSERT, (ids, inputs))

        yield insert


@contextlib.contextmanager
def messages_floor(n: int) -> Iterator[tuple[Callable[[], object], Callable[[], None]]]:
    """The messages alone: N real Celery messages, serialised beforehand, in one pipeline."""
    app = Celery("bench-peers-floor", broker=REDIS, set_as_current=False)
    client = redis.Redis.from_url(REDIS)
    client.delete(QUEUE)
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            task_id = new_task_id()
            app.send_task("bench.job", args=(task_id,), task_id=task_id, producer=producer)
    payloads = list(reversed(client.lrange(QUEUE, 0, -1)))  # the order LPUSH took them
    client.delete(QUEUE)

    def push() -> None:
        with client.pipeline(transaction=False) as pipeline:
            for payload in payloads:
                pipeline.lpush(QUEUE, payload)
            pipeline.execute()

    try:
        yield push, lambda: client.delete(QUEUE)
    finally:
        client.close()


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.tasks
    times: dict[str, list[float]] = {
        name: []
        for name in ("submit_many", "pgqueuer", "procrastinate", "floor: rows", "floor: messages")
    }
    with (
        queuestore_way(n) as (submit_many, purge),
        pgqueuer_way(n) as pgqueuer,
        procrastinate_way(n) as procrastinate,
        rows_floor(n) as rows,
        messages_floor(n) as (messages, purge_floor),
    ):
        ways: dict[str, tuple[Callable[[], object], Callable[[], Any]]] = {
            "submit_many": (submit_many, purge),
            "pgqueuer": (pgqueuer, lambda: None),
            "procrastinate": (procrastinate, lambda: None),
            "floor: rows": (rows, lambda: None),
            "floor: messages": (messages, purge_floor),
        }
        for round_ in range(args.rounds):
            for name, (way, after) in ways.items():
                times[name].append(timed(way))
                after()
            print(
                f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items())
            )
    report(n, args.rounds, times)


def report(n: int, rounds: int, times: dict[str, list[float]]) -> None:
    median = {name: statistics.median(values) for name, values in times.items()}
    ours = median["submit_many"]
    print(f"\n{n} tasks, median of {rounds} rounds (PostgreSQL, Redis; one connection each)")
    print(f"{'way':<18}{'seconds':>9}{'tasks/s':>10}{'submit_many / it':>18}")
    for name, seconds in median.items():
        print(f"{name:<18}{seconds:>9.3f}{n / seconds:>10.0f}{seconds / ours:>17.2f}x")
    floors = median["floor: rows"] + median["floor: messages"]
    print(f"{'floors added':<18}{floors:>9.3f}{n / floors:>10.0f}{floors / ours:>17.2f}x")
    for peer, target in (("pgqueuer", "at least as fast"), ("procrastinate", "never slower")):
        ratio = median[peer] / ours
        print(f"submit_many vs {peer}: {ratio:.2f}x ({target}: {'PASS' if ratio >= 1 else 'FAIL'})")


if __name__ == "__main__":
    main()
