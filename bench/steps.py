"""What a named step costs, beside a raw INSERT + COMMIT of the same payload.

    uv run python bench/steps.py [--steps 2000] [--rounds 5] [--payload 1024]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust). It creates a
scratch database ``queuestore_steps_<random>`` (dropped at the end) and, in
this one process, times per step (medians over the rounds, interleaved):

- the baseline: a psycopg connection in autocommit, a prepared ``INSERT INTO
  bench_steps_raw (task_id, name, result) VALUES (...)`` of the same JSON
  (``Jsonb``), into a table with the steps table's primary key;
- queuestore: ``ctx.step(name, body)`` in a run that holds a claimed task (a
  ``Run`` and a ``TaskContext`` built as ``execute`` builds them, no Celery):
  the name's check, the body, the result's check, and the fenced
  ``INSERT ... SELECT ... ON CONFLICT`` that records it, committed.

The two sides take turns every ``BATCH`` items, so that both meet the same
machine (the commit's fsync varies a lot on a shared disk). It prints wall
and client CPU milliseconds per step, and the median of the rounds' ratios of
the walls, and exits 1 when queuestore's step costs more than 1.5x the baseline.
The same loop on an SQLite file is printed for information.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from benchkit import scratch_database
from celery import Celery
from psycopg.types.json import Jsonb

from queuestore import SqlTaskStore, TaskContext, TaskQueue
from queuestore.run.jobs import new_worker_id
from queuestore.run.lease import Run

TARGET = 1.5
BATCH = 50

RAW_TABLE = """
CREATE TABLE bench_steps_raw (
    task_id varchar(64) NOT NULL, name varchar(200) NOT NULL, result jsonb,
    PRIMARY KEY (task_id, name)
)"""
RAW_INSERT = "INSERT INTO bench_steps_raw (task_id, name, result) VALUES (%s, %s, %s)"


def payload_of(size: int) -> dict[str, Any]:
    """A JSON object of about ``size`` bytes: a summary, some numbers, a nested list."""
    return {
        "summary": "x" * max(size - 120, 0),
        "score": 0.875,
        "tokens": 1234,
        "links": [{"href": "https://example.org/a", "rel": "next"}],
    }


def timed(loop: Callable[[], None]) -> tuple[float, float]:
    """Wall and this thread's CPU seconds of ``loop``."""
    cpu, wall = time.thread_time(), time.perf_counter()
    loop()
    return time.perf_counter() - wall, time.thread_time() - cpu


class Bench:
    """One store's claimed task and a context on it, and the raw baseline's connection."""

    def __init__(self, store: SqlTaskStore, raw: psycopg.Connection[Any] | None) -> None:
        self.store = store
        self.raw = raw
        self.queue = TaskQueue(
            store, Celery("bench_steps", broker="memory://", set_as_current=False)
        )
        self.round = 0

    def context(self) -> TaskContext:
        """A fresh task, claimed: a run's context, as ``execute`` makes it."""
        worker = new_worker_id()
        task = self.store.claim(self.store.create("bench.steps").id, worker, timedelta(minutes=10))
        assert task is not None
        return TaskContext(Run(self.queue.publisher, task, worker))

    def round_of(
        self, count: int, payload: dict[str, Any]
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """One round: (wall, CPU) ms per step of ctx.step, and of the raw insert (zeros
        without a baseline connection), the two taking turns every ``BATCH`` items."""
        ctx = self.context()
        self.round += 1
        task_id, raw = f"raw-{self.round}", self.raw
        ours, theirs = [0.0, 0.0], [0.0, 0.0]
        for start in range(0, count, BATCH):
            names = [f"s{i}" for i in range(start, min(start + BATCH, count))]

            def steps(names: list[str] = names) -> None:
                for name in names:
                    ctx.step(name, lambda: payload)

            def inserts(names: list[str] = names) -> None:
                assert raw is not None
                for name in names:
                    raw.execute(RAW_INSERT, (task_id, name, Jsonb(payload)), prepare=True)

            for total, loop in ((ours, steps), (theirs, inserts)):
                if loop is inserts and raw is None:
                    continue
                wall, cpu = timed(loop)
                total[0] += wall
                total[1] += cpu
        per_item = 1000 / count
        return (ours[0] * per_item, ours[1] * per_item), (
            theirs[0] * per_item,
            theirs[1] * per_item,
        )


def median(values: list[tuple[float, float]], k: int) -> float:
    return statistics.median(value[k] for value in values[1:] or values)  # round 1 warms up


def run_postgres(args: argparse.Namespace, payload: dict[str, Any]) -> float:
    with scratch_database("queuestore_steps", migrate=True) as url:
        raw = psycopg.connect(url, autocommit=True)
        raw.execute(RAW_TABLE)
        store = SqlTaskStore(url)
        bench = Bench(store, raw)
        baseline: list[tuple[float, float]] = []
        steps: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            ours, theirs = bench.round_of(args.steps, payload)
            steps.append(ours)
            baseline.append(theirs)
        store.close()
        raw.close()
    print(f"PostgreSQL, {args.steps} steps a round, {args.rounds} rounds, medians per step:")
    print(f"  {'':34} {'wall ms':>9} {'client CPU ms':>14}")
    for label, values in (("raw INSERT + COMMIT (psycopg)", baseline), ("ctx.step", steps)):
        print(f"  {label:34} {median(values, 0):9.3f} {median(values, 1):14.3f}")
    ratios = [ours[0] / theirs[0] for ours, theirs in zip(steps, baseline, strict=True)]
    ratio = statistics.median(ratios[1:] or ratios)
    cpu = median(steps, 1) / median(baseline, 1)
    print(f"  ratio (wall, median of the rounds'): {ratio:.2f}x  (target <= {TARGET}x)")
    print(f"  ratio (client CPU): {cpu:.2f}x")
    return ratio


def run_sqlite(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SqlTaskStore(f"sqlite:///{Path(folder) / 'steps.db'}")
        store.migrate()
        bench = Bench(store, None)
        steps = [bench.round_of(args.steps, payload)[0] for _ in range(args.rounds)]
        store.close()
    print(
        f"SQLite (for information): ctx.step {median(steps, 0):.3f} wall ms, "
        f"{median(steps, 1):.3f} client CPU ms per step"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--payload", type=int, default=1024, help="bytes of JSON per result")
    args = parser.parse_args()
    payload = payload_of(args.payload)
    ratio = run_postgres(args, payload)
    run_sqlite(args, payload)
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
