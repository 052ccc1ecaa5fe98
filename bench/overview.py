"""The operator's overview: its read at a million tasks, and what its rollup costs the writes.

Usage::

    uv run python bench/overview.py [--rows 1000000] [--writes 300] [--rounds 8] [--reads 15]

Two parts, on a fresh PostgreSQL database:

1. **the writes' cost**: the store's own writes (``create``, a claim, a progress
   report, the completion, a ``create_many`` of 100) with the rollup's triggers
   enabled and disabled, alternating rounds on one store; each figure is the
   median over rounds of the median time of one write. Then the same with
   ``synchronous_commit`` off, so that no commit waits for the disk: what is
   left is the server's and the client's work, the triggers' included.
2. **the overview at --rows tasks**: the table is loaded with one
   ``INSERT ... SELECT generate_series`` (10 jobs, 200 owners, mixed statuses,
   created over the last day, waits and run times spread over four decades),
   with the triggers on, as the store's writes would have filled the rollup;
   the fold of those entries is timed once. Then ``TaskStore.rollup`` over the
   last hour and over the last day (the counts now, the series, the latency
   percentiles and the oldest waiting task, as the overview reads them) beside
   the raw aggregate queries over the tasks table that compute the same numbers.

The server: ``benchkit.PG_ADMIN`` (127.0.0.1:5432 as ``postgres``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from benchkit import scratch_database
from rich.console import Console

from queuestore import SqlTaskStore
from queuestore.core.rollup import RUN, WAIT, percentile

console = Console(width=int(os.environ.get("COLUMNS", "160")))

TRIGGERS = ("queuestore_rollup_inserted", "queuestore_rollup_updated", "queuestore_rollup_deleted")

LOAD = """
INSERT INTO queuestore_tasks (id, name, input, owner, status, artifacts, metadata, answers,
    errors, created_at, updated_at, started_at, finished_at, attempt, version, worker_id,
    lease_expires_at, job)
SELECT 'b' || g, 'job.' || mod(g, 10), '{}', 'owner-' || mod(g, 200), st, '[]', '{}', '[]', '[]',
    c, coalesce(f, s, c), s, f, CASE WHEN s IS NULL THEN 0 ELSE 1 END, 3,
    CASE WHEN st = 'working' THEN 'bench:1:' || g END,
    CASE WHEN st = 'working' THEN now() + interval '1 hour' END, true
FROM (
    SELECT g, c, st,
        CASE WHEN st <> 'submitted' AND NOT (st = 'cancelled' AND r < 0.5)
            THEN c + wait END AS s,
        CASE WHEN st IN ('completed', 'failed', 'cancelled') THEN c + wait + run END AS f
    FROM (
        SELECT g, r, now() - interval '1 day' * (1 - g::float8 / %(n)s) AS c,
            interval '1 millisecond' * exp(random() * ln(20000)) AS wait,
            interval '1 millisecond' * exp(random() * ln(600000)) AS run,
            CASE WHEN r < 0.80 THEN 'completed' WHEN r < 0.88 THEN 'failed'
                 WHEN r < 0.92 THEN 'cancelled' WHEN r < 0.97 THEN 'submitted'
                 ELSE 'working' END AS st
        FROM (SELECT g, random() AS r FROM generate_series(1, %(n)s) AS g OFFSET 0) AS x
    ) AS y
) AS z
"""

RAW = {
    "counts by status, job, owner": (
        "SELECT status, name, owner, count(*) FROM queuestore_tasks GROUP BY status, name, owner"
    ),
    "submitted and started per step": (
        "SELECT to_timestamp(floor(extract(epoch FROM created_at) / %(step)s) * %(step)s), "
        "name, count(*) FROM queuestore_tasks WHERE created_at >= now() - %(window)s "
        "GROUP BY 1, 2 UNION ALL "
        "SELECT to_timestamp(floor(extract(epoch FROM started_at) / %(step)s) * %(step)s), "
        "name, count(*) FROM queuestore_tasks WHERE started_at >= now() - %(window)s "
        "GROUP BY 1, 2"
    ),
    "ended per step and status": (
        "SELECT to_timestamp(floor(extract(epoch FROM finished_at) / %(step)s) * %(step)s), "
        "status, name, count(*) FROM queuestore_tasks WHERE finished_at >= now() - %(window)s "
        "GROUP BY 1, 2, 3"
    ),
    "wait and run p50/p95 per job": (
        "SELECT name, percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY "
        "extract(epoch FROM started_at - created_at)), percentile_cont(ARRAY[0.5, 0.95]) "
        "WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) "
        "FROM queuestore_tasks WHERE finished_at >= now() - %(window)s GROUP BY name"
    ),
    "oldest waiting": (
        "SELECT id FROM queuestore_tasks WHERE status = 'submitted' "
        "AND (run_at IS NULL OR run_at <= now()) ORDER BY updated_at, id LIMIT 1"
    ),
}
"""The raw aggregates over the tasks that give the overview's numbers."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="0: the writes only")
    parser.add_argument("--writes", type=int, default=300, help="writes of each kind per round")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--reads", type=int, default=15, help="reads of each overview")
    args = parser.parse_args()
    console.print(f"load average {os.getloadavg()[0]:.2f}", highlight=False)
    with scratch_database("queuestore_bench_overview", migrate=True) as url:
        store = SqlTaskStore(url)
        raw = psycopg.connect(url, autocommit=True)
        try:
            write_costs(store, raw, args.writes, args.rounds)
            store.close()
            # Again without waiting for the disk at each commit: the triggers' own cost.
            raw.execute(f"ALTER DATABASE {raw.info.dbname} SET synchronous_commit = off")
            store = SqlTaskStore(url)
            write_costs(store, raw, args.writes, args.rounds, title="synchronous_commit off")
            raw.execute(f"ALTER DATABASE {raw.info.dbname} RESET synchronous_commit")
            if args.rows:
                overview(store, raw, args.rows, args.reads)
        finally:
            raw.close()
            store.close()
    console.print(f"load average {os.getloadavg()[0]:.2f}", highlight=False)


def triggers(raw: psycopg.Connection[Any], enabled: bool) -> None:
    verb = "ENABLE" if enabled else "DISABLE"
    for name in TRIGGERS:
        raw.execute(f"ALTER TABLE queuestore_tasks {verb} TRIGGER {name}")


def write_costs(
    store: SqlTaskStore,
    raw: psycopg.Connection[Any],
    writes: int,
    rounds: int,
    *,
    title: str = "each commit waits for the disk",
) -> None:
    console.rule(f"1. the writes, rollup triggers on and off ({title}): {rounds} x {writes}")
    lease = timedelta(seconds=30)
    kinds = ("create", "claim", "progress", "complete", "create_many(100)")
    times: dict[tuple[str, bool], list[float]] = {}
    for index in range(rounds * 2):
        enabled = (index % 2 == 0) == (index % 4 < 2)  # on, off, off, on, ...
        triggers(raw, enabled)
        spent: dict[str, list[float]] = {kind: [] for kind in kinds}
        ids = []
        for _ in range(writes):
            began = time.perf_counter()
            ids.append(store.create("job.0", {"n": 1}, owner="owner-1").id)
            spent["create"].append(time.perf_counter() - began)
        for number, task_id in enumerate(ids):
            worker = f"bench:1:{number}"
            calls: list[tuple[str, Callable[[], object]]] = [
                ("claim", lambda t=task_id, w=worker: store.claim(t, w, lease)),
                ("progress", lambda t=task_id, w=worker: store.report(t, w, progress=0.5)),
                ("complete", lambda t=task_id, w=worker: store.report(t, w, status="completed")),
            ]
            for kind, call in calls:
                began = time.perf_counter()
                call()
                spent[kind].append(time.perf_counter() - began)
        for _ in range(max(writes // 100, 3)):
            began = time.perf_counter()
            store.create_many([{"name": "job.0", "owner": "owner-1"} for _ in range(100)])
            spent["create_many(100)"].append(time.perf_counter() - began)
        for kind, values in spent.items():
            times.setdefault((kind, enabled), []).append(statistics.median(values) * 1000)
        store.fold_rollup()
    for kind in kinds:
        on = statistics.median(times[(kind, True)])
        off = statistics.median(times[(kind, False)])
        console.print(
            f"  {kind}: {on:.3f} ms with the rollup, {off:.3f} ms without: {on / off:.2f}x",
            highlight=False,
        )
    triggers(raw, True)
    raw.execute("TRUNCATE queuestore_tasks")
    store.fold_rollup()
    raw.execute("TRUNCATE queuestore_rollup_series, queuestore_rollup_counts")


def overview(store: SqlTaskStore, raw: psycopg.Connection[Any], rows: int, reads: int) -> None:
    console.rule(f"2. the overview at {rows:,} tasks")
    began = time.perf_counter()
    raw.execute(LOAD, {"n": rows})
    loaded = time.perf_counter() - began
    (entries,) = raw.execute("SELECT count(*) FROM queuestore_rollup_log").fetchone() or (0,)
    began = time.perf_counter()
    folded = store.fold_rollup()
    fold = time.perf_counter() - began
    raw.execute("VACUUM ANALYZE")
    (series,) = raw.execute("SELECT count(*) FROM queuestore_rollup_series").fetchone() or (0,)
    console.print(
        f"  loaded {rows:,} tasks in {loaded:.1f} s ({entries:,} rollup entries); "
        f"folded {folded:,} in {fold:.1f} s into {series:,} series rows",
        highlight=False,
    )
    for label, window in (("hour", timedelta(hours=1)), ("day", timedelta(days=1))):
        step = 60 if window <= timedelta(hours=2) else 900
        params = {"step": step, "window": window}
        rollups = timed(lambda window=window: read_overview(store, window), reads)
        baselines = timed(
            lambda params=params: [raw.execute(q, params).fetchall() for q in RAW.values()],
            max(reads // 5, 3),
        )
        each = {
            name: statistics.median(timed(lambda q=q, p=params: raw.execute(q, p).fetchall(), 3))
            for name, q in RAW.items()
        }
        rollup_ms, raw_ms = statistics.median(rollups), statistics.median(baselines)
        console.print(
            f"  overview of the last {label}: {rollup_ms:.1f} ms (p95 {pct(rollups, 0.95):.1f} ms);"
            f" raw aggregates over the table: {raw_ms:.0f} ms; ratio {raw_ms / rollup_ms:.0f}x"
            f" [{'PASS' if rollup_ms <= 100 else 'MISS'} <= 100 ms]",
            highlight=False,
        )
        for name, ms in each.items():
            console.print(f"    raw {name}: {ms:.0f} ms", highlight=False)
    check_equal(store, raw)


def read_overview(store: SqlTaskStore, window: timedelta) -> None:
    """What the overview does with a rollup: the counts, the series, the percentiles."""
    rollup = store.rollup(window)
    rollup.status_counts()
    for metric in ("completed", "failed", "cancelled", "submitted", "started", "retried", "lost"):
        rollup.per_step(metric)
    for metric in (WAIT, RUN):
        rollup.percentiles(metric, 0.5)
        rollup.percentiles(metric, 0.95)
        for name in rollup.names():
            histogram = rollup.job_histogram(name, metric)
            percentile(histogram, 0.5)
            percentile(histogram, 0.95)


def check_equal(store: SqlTaskStore, raw: psycopg.Connection[Any]) -> None:
    """The rollup's counts now equal the table's, as a sanity check of the load."""
    rollup = store.rollup(timedelta(days=1))
    by_status = {str(k): v for k, v in rollup.status_counts().items() if v}
    counted = dict(
        raw.execute("SELECT status, count(*) FROM queuestore_tasks GROUP BY 1").fetchall()
    )
    console.print(f"  counts now equal the table's: {by_status == counted}", highlight=False)


def timed(call: Callable[[], object], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        call()
        spent.append((time.perf_counter() - began) * 1000)
    return spent


def pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


if __name__ == "__main__":
    main()
