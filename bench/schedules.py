"""Schedules' ticks: what ``run_schedules`` costs per tick, against a plain ``create``.

A tick is one transaction on the store: the schedule's compare-and-set write
(next run, last run, last task), the tick's task inserted beside it, and the
task read back. The baseline is the same number of tasks made by
``TaskStore.create`` (one autocommit insert each), in the same run, on the
same PostgreSQL database, alternating rounds. A second figure has two tickers
(two beats' messages on two workers) race over the same due schedules: the
time to make them all, and that each tick made exactly one task.

    uv run python bench/schedules.py [--schedules 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from datetime import timedelta

from benchkit import scratch_database

from queuestore import SqlTaskStore
from queuestore.store.sql.engine import make_engine

EVERY = timedelta(seconds=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.schedules
    with scratch_database("qs_bench_schedules", migrate=True) as url:
        engine = make_engine(url, pool_size=2, max_overflow=0)
        store = SqlTaskStore(engine)
        ticks: list[float] = []
        creates: list[float] = []
        races: list[float] = []
        try:
            for _ in range(args.rounds):
                ticks.append(one_tick_each(store, n))
                creates.append(plain_creates(store, n))
                races.append(racing_tickers(url, store, n))
        finally:
            store.close()
            engine.dispose()
    tick, create, race = (statistics.median(values) for values in (ticks, creates, races))
    print(f"schedules per round: {n}, rounds: {args.rounds} (medians)")
    print(f"run_schedules, one tick each: {tick:.3f} s ({n / tick:,.0f} ticks/s)")
    print(f"create, one task each (baseline): {create:.3f} s ({n / create:,.0f} tasks/s)")
    print(f"ratio, a tick's cost over a create's: {tick / create:.2f}x")
    print(f"two tickers racing over the same {n} due schedules: {race:.3f} s, one task per tick")


def due_schedules(store: SqlTaskStore, n: int) -> list[str]:
    return [store.create_schedule("bench.job", {"i": i}, every=EVERY).id for i in range(n)]


def one_tick_each(store: SqlTaskStore, n: int) -> float:
    ids = due_schedules(store, n)
    later = store.get_schedule(ids[-1]).next_run_at
    assert later is not None
    start = time.perf_counter()
    made = store.run_schedules(now=later, limit=n)
    elapsed = time.perf_counter() - start
    assert len(made) == n, len(made)
    for schedule_id in ids:
        store.delete_schedule(schedule_id)
    return elapsed


def plain_creates(store: SqlTaskStore, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        store.create("bench.job", {"i": i})
    return time.perf_counter() - start


def racing_tickers(url: str, store: SqlTaskStore, n: int) -> float:
    ids = due_schedules(store, n)
    later = store.get_schedule(ids[-1]).next_run_at
    assert later is not None
    before = store.count()
    engines = [make_engine(url, pool_size=2, max_overflow=0) for _ in range(2)]
    others = [SqlTaskStore(engine) for engine in engines]
    made: list[int] = []

    def tick(ticker: SqlTaskStore) -> None:
        made.append(len(ticker.run_schedules(now=later, limit=n)))

    threads = [threading.Thread(target=tick, args=(ticker,)) for ticker in others]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    assert sum(made) == n, made
    assert store.count() - before == n, store.count() - before
    for engine in engines:
        engine.dispose()
    for schedule_id in ids:
        store.delete_schedule(schedule_id)
    return elapsed


if __name__ == "__main__":
    main()
