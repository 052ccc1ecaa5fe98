"""Benchmark SqlTaskStore on PostgreSQL against raw psycopg baselines measured in the same run.

Usage::

    uv run python bench/store.py [--rows N] [--quick]

What it measures (issue 3, "Benchmark"):

1. Single-row operations on one connection, each beside its raw psycopg 3 baseline on the
   same ``queuestore_tasks`` table: INSERT+COMMIT vs ``create``, UPDATE+COMMIT vs
   ``update(status="working")`` (submitted -> working), SELECT by key vs ``get``. Rounds are
   interleaved (raw first on even rounds, store first on odd ones); each figure is the median
   over rounds of ops/s and of the median latency.
2. ``list`` with owner and status filters, a page of 100, on a small table (10,000 rows) and a
   large one (``--rows``, 1,000,000 by default), bulk-loaded with ``INSERT ... SELECT
   generate_series`` (1,000 owners with a Zipf-like skew, mixed statuses), then ``VACUUM
   ANALYZE``; page 1 and page 2 (following the cursor). Small and large rounds are interleaved.
3. ``cleanup`` of ``--rows`` expired terminal rows (mixed with old parked tasks, recent
   terminal tasks and live tasks, none of which may be deleted) for a couple of batch sizes,
   while writer threads update live ``working`` tasks in a loop; their latency is recorded
   before (idle baseline) and during the cleanup.

The server: ``QUEUESTORE_BENCH_PG_URL`` names a database to connect to first (for example
``postgresql://postgres@127.0.0.1:5432/postgres``); by default 127.0.0.1:5432 as ``postgres``,
trying the ``test`` database, then ``postgres``. A fresh database ``queuestore_bench_<random>``
is created on that server and dropped at the end, also on error or interrupt.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table
from sqlalchemy import URL, make_url

from queuestore import SqlTaskStore, make_engine, new_task_id

console = Console(width=int(os.environ.get("COLUMNS", "200")))

DEFAULT_SERVERS = (
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://postgres@127.0.0.1:5432/postgres",
)
TABLE = "queuestore_tasks"
COLUMNS = (
    "id, name, input, owner, context_id, status, status_message, progress, result, error, "
    "artifacts, metadata, answers, created_at, updated_at, started_at, finished_at, ttl_ms, "
    "attempt, version, worker_id, lease_expires_at"
)
ALL_COLUMNS = (
    "id, name, input, owner, context_id, status, status_message, progress, result, error, "
    "artifacts, metadata, answers, created_at, updated_at, started_at, finished_at, ttl_ms, "
    "expires_at, attempt, version, worker_id, lease_expires_at, published_at"
)
RAW_INSERT = (
    f"INSERT INTO {TABLE} (id, name, input, owner, context_id, status, artifacts, metadata, "
    "answers, created_at, updated_at, attempt, version) "
    "VALUES (%s, %s, %s, %s, %s, 'submitted', '[]', '{}', '[]', now(), now(), 0, 1)"
)
RAW_UPDATE = (
    f"UPDATE {TABLE} SET status = 'working', updated_at = now(), version = version + 1 "
    "WHERE id = %s"
)
RAW_SELECT = f"SELECT {COLUMNS} FROM {TABLE} WHERE id = %s"

# Tasks are named url-safe base64 of 16 random bytes, without padding, as the store does.
SQL_TASK_ID = "rtrim(translate(encode(uuid_send(gen_random_uuid()), 'base64'), '+/', '-_'), '=')"

# 1,000 owners, log-uniform (Zipf-like: owner-0000 has ~10% of the rows), mixed statuses,
# created over 30 days in heap order. OFFSET 0 keeps random() evaluated once per row.
LIST_ROWS = """
INSERT INTO @TABLE@ (@COLUMNS@)
SELECT @ID@, 'reports.build', jsonb_build_object('n', g, 'month', '2026-11'),
       'owner-' || lpad(o::text, 4, '0'), 'ctx-' || mod(g, 10000), st,
       CASE WHEN st = 'failed' THEN 'boom' WHEN st = 'input_required' THEN 'Proceed?' END,
       CASE WHEN st IN ('working', 'input_required', 'auth_required') THEN 0.5
            WHEN st = 'completed' THEN 1.0 END,
       CASE WHEN st = 'completed' THEN jsonb_build_object('rows', g) END,
       CASE WHEN st = 'failed' THEN '{"type": "ValueError", "message": "boom"}'::jsonb END,
       '[]', '{}', '[]',
       c, c + interval '90 seconds',
       CASE WHEN st NOT IN ('submitted', 'rejected') THEN c + interval '5 seconds' END,
       CASE WHEN st IN ('completed', 'failed', 'cancelled', 'rejected')
            THEN c + interval '90 seconds' END,
       NULL, NULL,
       CASE WHEN st = 'submitted' THEN 0 ELSE 1 END, 3,
       CASE WHEN st = 'working' THEN 'worker-' || mod(g, 8) END,
       CASE WHEN st = 'working' THEN now() + interval '5 minutes' END,
       c
FROM (
    SELECT g, floor(exp(random() * ln(1001)))::int - 1 AS o, random() AS r,
           now() - interval '30 days' * (1 - g::float8 / %(n)s) AS c
    FROM generate_series(1, %(n)s) AS g
    OFFSET 0
) AS x
CROSS JOIN LATERAL (
    SELECT CASE WHEN r < 0.50 THEN 'completed' WHEN r < 0.70 THEN 'working'
                WHEN r < 0.80 THEN 'failed' WHEN r < 0.85 THEN 'submitted'
                WHEN r < 0.90 THEN 'cancelled' WHEN r < 0.95 THEN 'input_required'
                WHEN r < 0.97 THEN 'auth_required' ELSE 'rejected' END AS st
) AS s
"""

# The janitor's table: %(r)s old rows finished 2..40 days ago, every 101st of them a parked
# (input_required) live task and the rest expired terminal ones (10% with their own ttl of 1h);
# then %(m)s recent rows: half terminal (not expired), half live (working / submitted).
CLEANUP_ROWS = """
INSERT INTO @TABLE@ (@COLUMNS@)
SELECT @ID@, 'reports.build', jsonb_build_object('n', g), 'owner-' || mod(g, 1000),
       NULL, st, NULL, NULL,
       CASE WHEN st = 'completed' THEN jsonb_build_object('rows', g) END,
       CASE WHEN st = 'failed' THEN '{"type": "ValueError", "message": "boom"}'::jsonb END,
       '[]', '{}', '[]',
       f - interval '90 seconds', f, f - interval '80 seconds',
       CASE WHEN st IN ('completed', 'failed', 'cancelled', 'rejected') THEN f END,
       CASE WHEN own_ttl THEN 3600000 END,
       CASE WHEN own_ttl THEN f + interval '1 hour' END,
       1, 4, NULL, NULL, f - interval '90 seconds'
FROM (
    SELECT g, random() AS r, mod(g, 101) = 0 AS parked,
           mod(g, 10) = 0 AND mod(g, 101) <> 0 AS own_ttl,
           now() - interval '40 days' + interval '38 days' * (g::float8 / %(r)s) AS f
    FROM generate_series(1, %(r)s) AS g
    OFFSET 0
) AS x
CROSS JOIN LATERAL (
    SELECT CASE WHEN parked THEN 'input_required' WHEN r < 0.85 THEN 'completed'
                WHEN r < 0.95 THEN 'failed' WHEN r < 0.99 THEN 'cancelled'
                ELSE 'rejected' END AS st
) AS s;

INSERT INTO @TABLE@ (@COLUMNS@)
SELECT @ID@, 'reports.build', jsonb_build_object('n', g), 'owner-' || mod(g, 1000),
       NULL, st, NULL, NULL, NULL, NULL, '[]', '{}', '[]',
       f - interval '90 seconds', f, f - interval '80 seconds',
       CASE WHEN st = 'completed' THEN f END,
       CASE WHEN st = 'completed' AND mod(g, 10) = 0 THEN 172800000 END,
       CASE WHEN st = 'completed' AND mod(g, 10) = 0 THEN f + interval '2 days' END,
       1, 3, NULL, NULL, f - interval '90 seconds'
FROM (
    SELECT g, now() - interval '6 hours' * random() AS f,
           CASE WHEN mod(g, 2) = 0 THEN 'completed' WHEN mod(g, 5) = 1 THEN 'submitted'
                ELSE 'working' END AS st
    FROM generate_series(1, %(m)s) AS g
    OFFSET 0
) AS x
"""

RAW_LIST = (
    f"SELECT {COLUMNS} FROM {TABLE} WHERE owner = %s AND status = ANY(%s) "
    "ORDER BY created_at DESC, id DESC LIMIT 101"
)
RAW_LIST_AFTER = (
    f"SELECT {COLUMNS} FROM {TABLE} WHERE owner = %s AND status = ANY(%s) "
    "AND (created_at, id) < (%s, %s) ORDER BY created_at DESC, id DESC LIMIT 101"
)

TERMINAL_SQL = "status IN ('completed', 'failed', 'cancelled', 'rejected')"


# -- results -------------------------------------------------------------------------------


@dataclass
class Line:
    section: str
    figure: str
    value: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    verdict: str = ""


@dataclass
class Report:
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, line: Line) -> None:
        self.lines.append(line)
        mark = f"  [{line.verdict}]" if line.verdict else ""
        extra = f"  (baseline {line.baseline}, ratio {line.ratio})" if line.baseline else ""
        console.print(f"  {line.figure}: {line.value}{extra}{mark}", highlight=False)

    def print(self, title: str) -> None:
        table = Table(title=title, show_lines=False)
        for column in ("section", "figure", "value", "baseline", "ratio", "target", "verdict"):
            table.add_column(column, justify="right" if column in ("value", "ratio") else "left")
        for line in self.lines:
            verdict = {"PASS": "[green]PASS[/]", "MISS": "[red]MISS[/]"}.get(
                line.verdict, line.verdict
            )
            table.add_row(
                line.section,
                line.figure,
                line.value,
                line.baseline,
                line.ratio,
                line.target,
                verdict,
            )
        console.print(table)
        for note in self.notes:
            console.print(f"note: {note}", highlight=False)
        passed = sum(line.verdict == "PASS" for line in self.lines)
        missed = sum(line.verdict == "MISS" for line in self.lines)
        console.print(f"targets: {passed} PASS, {missed} MISS")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# -- database plumbing ---------------------------------------------------------------------


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def sqlalchemy_url(url: URL) -> str:
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def connect_server() -> tuple[psycopg.Connection[Any], URL]:
    override = os.environ.get("QUEUESTORE_BENCH_PG_URL")
    candidates = (override,) if override else DEFAULT_SERVERS
    failure: Exception | None = None
    for candidate in candidates:
        url = make_url(candidate)
        try:
            return psycopg.connect(libpq(url), autocommit=True, connect_timeout=5), url
        except psycopg.OperationalError as exc:
            failure = exc
    raise SystemExit(f"PostgreSQL is unreachable: {failure}")


@contextmanager
def bench_database() -> Iterator[URL]:
    """A fresh database, dropped on the way out whatever happens."""
    admin, server = connect_server()
    name = f"queuestore_bench_{secrets.token_hex(4)}"
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    console.print(f"created database {name}", highlight=False)
    try:
        yield server.set(database=name)
    finally:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.close()
        console.print(f"dropped database {name}", highlight=False)


def load(url: URL, schema: str, statement: str, params: dict[str, int]) -> float:
    """Empty ``schema.queuestore_tasks``, bulk-load it with its secondary indexes dropped and
    rebuilt afterwards (same definitions), then VACUUM ANALYZE. Returns the seconds taken."""
    start = time.perf_counter()
    table = sql.Identifier(schema, TABLE)
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        indexes = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes AS i WHERE i.schemaname = %s "
            "AND i.tablename = %s AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c "
            "WHERE c.conname = i.indexname AND c.connamespace = %s::regnamespace)",
            (schema, TABLE, schema),
        ).fetchall()
        conn.execute(sql.SQL("TRUNCATE {}").format(table))
        for name, _ in indexes:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, name)))
        with conn.transaction():
            for part in statement.split(";\n"):
                if part.strip():
                    statement_text = (
                        part.replace("@TABLE@", table.as_string(conn))
                        .replace("@COLUMNS@", ALL_COLUMNS)
                        .replace("@ID@", SQL_TASK_ID)
                    )
                    conn.execute(statement_text.encode(), params)
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(table))
    return time.perf_counter() - start


# -- 1. single-row operations --------------------------------------------------------------


@dataclass
class Sample:
    ops: float
    latency_ms: float


def measure(operation: Callable[[Any], object], items: Sequence[Any]) -> Sample:
    latencies = []
    start = time.perf_counter()
    for item in items:
        began = time.perf_counter()
        operation(item)
        latencies.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    return Sample(len(items) / elapsed, median(latencies) * 1000)


def bench_operations(  # noqa: PLR0915 - one linear benchmark script
    url: URL, store: SqlTaskStore, rounds: int, count: int, report: Report
) -> None:
    console.rule(f"1. single-row operations: {rounds} rounds x {count} ops, one connection")
    raw = psycopg.connect(libpq(url))
    store_ids: list[str] = []

    def raw_insert(task_id: str) -> None:
        raw.execute(RAW_INSERT, (task_id, "reports.build", Jsonb({"n": 1}), "owner-0001", "c"))
        raw.commit()

    def raw_update(task_id: str) -> None:
        raw.execute(RAW_UPDATE, (task_id,))
        raw.commit()

    def raw_select(task_id: str) -> None:
        raw.execute(RAW_SELECT, (task_id,)).fetchone()

    def raw_select_in_transaction(task_id: str) -> None:
        raw.execute(RAW_SELECT, (task_id,)).fetchone()
        raw.commit()

    def store_create(_: int) -> None:
        task = store.create("reports.build", {"n": 1}, owner="owner-0001", context_id="c")
        store_ids.append(task.id)

    def store_update(task_id: str) -> None:
        store.update(task_id, status="working")

    def store_get(task_id: str) -> None:
        store.get(task_id)

    samples: dict[str, list[Sample]] = {}
    Job = tuple[str, Callable[[Any], object], Sequence[Any]]

    def interleaved(first: Job, second: Job, block: int = 25) -> None:
        """Both sides in alternating blocks of ``block`` ops, so drift hits both alike."""
        latencies: dict[str, list[float]] = {first[0]: [], second[0]: []}
        for start in range(0, len(first[2]), block):
            for name, operation, items in (first, second):
                for item in items[start : start + block]:
                    began = time.perf_counter()
                    operation(item)
                    latencies[name].append(time.perf_counter() - began)
        for name, values in latencies.items():
            sample = Sample(len(values) / sum(values), median(values) * 1000)
            samples.setdefault(name, []).append(sample)

    def one_round(size: int, index: int) -> None:
        raw_ids = [new_task_id() for _ in range(size)]
        store_ids.clear()
        raw_first = index % 2 == 0
        pairs: list[tuple[Job, Job]] = [
            (("raw insert", raw_insert, raw_ids), ("create", store_create, range(size))),
            (("raw update", raw_update, raw_ids), ("update", store_update, store_ids)),
            (("raw select", raw_select, raw_ids), ("get", store_get, store_ids)),
        ]
        for raw_job, store_job in pairs:
            if raw_job[0] == "raw select":
                raw.autocommit = True
            if raw_first:
                interleaved(raw_job, store_job)
            else:
                interleaved(store_job, raw_job)
        raw.autocommit = False
        samples.setdefault("raw select+commit", []).append(
            measure(raw_select_in_transaction, raw_ids)
        )

    one_round(min(count, 200), 0)  # warm-up: prepared statements, caches, pool
    samples.clear()
    for index in range(rounds):
        one_round(count, index)
    raw.close()

    def figure(name: str) -> Sample:
        runs = samples[name]
        return Sample(median([s.ops for s in runs]), median([s.latency_ms for s in runs]))

    def show(sample: Sample) -> str:
        return f"{sample.ops:,.0f} ops/s, p50 {sample.latency_ms:.3f} ms"

    for store_name, raw_name, target in (
        ("create", "raw insert", 0.7),
        ("update", "raw update", 0.7),
        ("get", "raw select", 0.6),
    ):
        mine, base = figure(store_name), figure(raw_name)
        ratio = mine.ops / base.ops
        label = "update(status=working)" if store_name == "update" else store_name
        report.add(
            Line(
                "ops",
                label,
                show(mine),
                f"{raw_name}: {show(base)}",
                f"{ratio:.2f}x",
                f">= {target}x",
                verdict(ratio >= target),
            )
        )
    report.add(
        Line("ops", "raw select+commit (info)", show(figure("raw select+commit")), target="info")
    )


# -- 2. list -------------------------------------------------------------------------------


def schema_store(url: URL, schema: str) -> SqlTaskStore:
    engine = make_engine(sqlalchemy_url(url), connect_args={"options": f"-c search_path={schema}"})
    return SqlTaskStore(engine)


def bench_list(  # noqa: PLR0915 - one linear benchmark script
    url: URL, *, small: int, large: int, rounds: int, calls: int, report: Report
) -> None:
    console.rule(f"2. list, page of 100, at {small:,} and {large:,} rows")
    sizes = {"small": (small, "list_small"), "large": (large, "list_large")}
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        for _, schema in sizes.values():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                    sql.Identifier(schema, TABLE), sql.Identifier("public", TABLE)
                )
            )
    for size, schema in sizes.values():
        seconds = load(url, schema, LIST_ROWS, {"n": size})
        console.print(f"  loaded {size:,} rows into {schema} in {seconds:.1f} s", highlight=False)

    live = ["submitted", "working", "input_required", "auth_required"]
    queries: list[tuple[str, dict[str, Any], int]] = [
        ("owner + status=working, page 1", {"status": "working"}, 1),
        ("owner + status=completed, page 1", {"status": "completed"}, 1),
        ("owner + status=completed, page 2 (cursor)", {"status": "completed"}, 2),
        ("owner + 4 live statuses, page 1", {"status": live}, 1),
    ]
    owner = "owner-0000"
    stores = {key: schema_store(url, schema) for key, (_, schema) in sizes.items()}
    raws = {
        key: psycopg.connect(libpq(url), autocommit=True, options=f"-c search_path={schema}")
        for key, (_, schema) in sizes.items()
    }
    try:
        cursors: dict[tuple[str, int], str | None] = {}
        raw_queries: dict[tuple[str, int], tuple[str, tuple[Any, ...]]] = {}
        for key, store in stores.items():
            for index, (_, filters, page) in enumerate(queries):
                statuses = filters["status"]
                statuses = [statuses] if isinstance(statuses, str) else statuses
                text, params = RAW_LIST, (owner, statuses)
                if page == 2:
                    first = store.list(owner=owner, limit=100, **filters)
                    cursors[key, index] = first.next_cursor
                    if first.next_cursor is None:
                        report.notes.append(f"{key}: query {index} has no page 2")
                    last = first.tasks[-1]
                    text, params = RAW_LIST_AFTER, (*params, last.created_at, last.id)
                raw_queries[key, index] = (text, params)

        timings: dict[tuple[str, int, str], list[float]] = {}
        short_pages: set[tuple[str, int]] = set()
        for round_index in range(rounds + 1):  # round 0 warms up
            order = list(stores) if round_index % 2 == 0 else list(reversed(stores))
            for key in order:
                store, raw = stores[key], raws[key]
                for index, (_, filters, page) in enumerate(queries):
                    cursor = cursors.get((key, index)) if page == 2 else None
                    text, params = raw_queries[key, index]
                    mine, theirs = [], []
                    for _ in range(calls):  # store and raw psycopg, call by call
                        began = time.perf_counter()
                        result = store.list(owner=owner, limit=100, cursor=cursor, **filters)
                        mine.append(time.perf_counter() - began)
                        began = time.perf_counter()
                        raw.execute(text, params).fetchall()  # type: ignore[arg-type]
                        theirs.append(time.perf_counter() - began)
                    if len(result.tasks) != 100:
                        short_pages.add((key, index))
                    if round_index:
                        timings.setdefault((key, index, "store"), []).append(median(mine) * 1e3)
                        timings.setdefault((key, index, "raw"), []).append(median(theirs) * 1e3)
        for key, index in sorted(short_pages):
            report.notes.append(f"list {key}: {queries[index][0]!r} returned a short page")
        for index, (label, _, _) in enumerate(queries):
            at_small = median(timings["small", index, "store"])
            at_large = median(timings["large", index, "store"])
            ratio = at_large / at_small
            ok = at_large < 5.0 and ratio <= 2.0
            report.add(
                Line(
                    "list",
                    label,
                    f"{at_large:.2f} ms @ {large // 1000:,}k",
                    f"{at_small:.2f} ms @ {small // 1000:,}k",
                    f"{ratio:.2f}x",
                    "< 5 ms, <= 2x",
                    verdict(ok),
                )
            )
            server = {key: explain(raws[key], *raw_queries[key, index]) for key in stores}
            raw_small = median(timings["small", index, "raw"])
            raw_large = median(timings["large", index, "raw"])
            report.add(
                Line(
                    "list",
                    "  same SQL, raw psycopg / server (EXPLAIN ANALYZE)",
                    f"raw {raw_large:.2f} ms, server {server['large'][0]:.2f} ms",
                    f"raw {raw_small:.2f} ms, server {server['small'][0]:.2f} ms",
                    f"{raw_large / raw_small:.2f}x",
                    "info",
                )
            )
            report.notes.append(f"{label} @ {large:,}: {server['large'][1]}")
    finally:
        for store in stores.values():
            store.engine.dispose()
        for raw in raws.values():
            raw.close()


def explain(conn: psycopg.Connection[Any], text: str, params: tuple[Any, ...]) -> tuple[float, str]:
    """Median server execution time (ms) of ``text`` over 5 runs, and a plan summary."""
    times, plan = [], {}
    for _ in range(5):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text,  # type: ignore[operator]
            params,
        ).fetchone()
        result = row[0][0] if row else {}
        times.append(float(result.get("Execution Time", 0.0)))
        plan = result.get("Plan", {})
    nodes, node = [], plan
    while node:
        name = node.get("Node Type", "?")
        if "Index Name" in node:
            name += f" {node['Index Name']}"
        nodes.append(name)
        children = node.get("Plans") or [{}]
        node = children[0]
    hits = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return median(times), f"{' > '.join(nodes)}; {hits} buffers"


# -- 3. cleanup under concurrent writers ---------------------------------------------------


class Writers:
    """Threads that update live ``working`` tasks in a loop, recording each write's latency."""

    def __init__(self, store: SqlTaskStore, task_ids: Sequence[str], threads: int) -> None:
        self.store = store
        self.phase = "idle"
        self.latencies: dict[str, list[float]] = {"idle": [], "cleanup": [], "after": []}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        share = len(task_ids) // threads
        self._threads = [
            threading.Thread(
                target=self._loop, args=(task_ids[n * share : (n + 1) * share],), daemon=True
            )
            for n in range(threads)
        ]

    def _loop(self, task_ids: Sequence[str]) -> None:
        step = 0
        deadline = time.monotonic() + 3600  # a hard bound, should the main thread vanish
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                phase = self.phase
                task_id = task_ids[step % len(task_ids)]
                began = time.perf_counter()
                self.store.update(
                    task_id, progress=(step % 100) / 100, status_message=f"step {step}"
                )
                elapsed = time.perf_counter() - began
                with self._lock:
                    self.latencies[phase].append(elapsed * 1000)
                step += 1
                time.sleep(0.002)
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def bench_cleanup(
    url: URL, store: SqlTaskStore, rows: int, batch_sizes: Sequence[int], report: Report
) -> None:
    recent = 40_000
    old = rows + rows // 100  # every 101st old row is a parked live task: ``rows`` expire
    console.rule(f"3. cleanup of {rows:,} expired rows under 4 writer threads")
    for batch_size in batch_sizes:
        seconds = load(url, "public", CLEANUP_ROWS, {"r": old, "m": recent})
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            expired, total = conn.execute(
                f"SELECT count(*) FILTER (WHERE {TERMINAL_SQL} AND coalesce(expires_at, "
                "finished_at + interval '1 day') <= now()), count(*) FROM queuestore_tasks"
            ).fetchone() or (0, 0)
            working = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM queuestore_tasks WHERE status = 'working' LIMIT 200"
                )
            ]
            conn.execute("CHECKPOINT")
        console.print(
            f"  loaded {total:,} rows ({expired:,} expired) in {seconds:.1f} s", highlight=False
        )
        with Writers(store, working, threads=4) as writers:
            time.sleep(3)
            writers.phase = "cleanup"
            began = time.perf_counter()
            deleted = store.cleanup(timedelta(days=1), batch_size=batch_size)
            elapsed = time.perf_counter() - began
            writers.phase = "after"
            time.sleep(0.5)
        if writers.errors:
            raise RuntimeError(f"a writer failed: {writers.errors[0]!r}")
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            left, live = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE NOT ({TERMINAL_SQL})) "
                "FROM queuestore_tasks"
            ).fetchone() or (0, 0)
        kept_right = deleted == expired and left == total - expired
        if not kept_right:
            report.notes.append(
                f"batch {batch_size}: deleted {deleted:,} of {expired:,} expired; "
                f"{left:,} rows left of {total:,} ({live:,} live)"
            )
        rate = deleted / elapsed
        report.add(
            Line(
                "cleanup",
                f"batch_size={batch_size}: {deleted:,} rows in {elapsed:.1f} s",
                f"{rate:,.0f} rows/s",
                target=">= 20,000 rows/s",
                verdict=verdict(rate >= 20_000 and kept_right),
            )
        )
        during, idle = writers.latencies["cleanup"], writers.latencies["idle"]
        worst = max(during)
        report.add(
            Line(
                "cleanup",
                f"batch_size={batch_size}: writer latency ({len(during):,} writes)",
                f"p99 {percentile(during, 0.99):.1f} ms, max {worst:.1f} ms",
                f"idle: p99 {percentile(idle, 0.99):.1f} ms, max {max(idle):.1f} ms",
                target="max <= 100 ms",
                verdict=verdict(worst <= 100),
            )
        )


# -- main ----------------------------------------------------------------------------------


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, help="large table size (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100k rows, fewer rounds")
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    rows -= rows % 100
    rounds, count, calls = (3, 300, 20) if args.quick else (5, 1000, 50)
    batch_sizes = (1000, 10_000)
    signal.signal(signal.SIGTERM, _terminate)

    report = Report()
    with bench_database() as url:
        with psycopg.connect(libpq(url)) as conn:
            settings = conn.execute(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'),"
                " current_setting('shared_buffers')"
            ).fetchone()
        report.notes.append(
            "PostgreSQL {}, synchronous_commit={}, shared_buffers={}".format(*settings or ())
        )
        store = SqlTaskStore(sqlalchemy_url(url))
        try:
            store.migrate()
            try:
                bench_operations(url, store, rounds, count, report)
                bench_list(url, small=10_000, large=rows, rounds=rounds, calls=calls, report=report)
                bench_cleanup(url, store, rows, batch_sizes, report)
            finally:
                report.print(f"queuestore SqlTaskStore benchmark (rows={rows:,})")
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
