"""What a lifecycle writes: WAL bytes per task, and the indexes' growth over many tasks.

Two measurements on a scratch database, on queuestore's own table and indexes:

- **WAL per task**: the lifecycle's writes (insert, claim, a progress
  report, the completion) as raw statements under ``EXPLAIN (ANALYZE, WAL)``,
  which reports the WAL each statement wrote, summed over N tasks. It is
  counted per statement because the server is shared: its WAL position
  (``pg_current_wal_lsn``) moves with every other database's writes. Commit
  records (one per write, a few dozen bytes) and full-page images after a
  checkpoint come on top.
- **Index growth**: the size of the table and of each index after N
  lifecycles run one task after another, as a queue that keeps up runs them
  (autovacuum as the server has it), and after a ``VACUUM``.

    uv run python bench/wal_cost.py [--tasks 1000] [--rows 100000]
"""

from __future__ import annotations

import argparse
import json

import psycopg
from benchkit import scratch_database

from queuestore.core.models import new_task_id

LIFECYCLE = {
    "insert": (
        "INSERT INTO queuestore_tasks (id, name, input, status, artifacts, metadata, answers, "
        "errors, created_at, updated_at, attempt, suspends, version, job, priority) VALUES "
        "(%(id)s, 'bench.job', '{\"i\": 1}', 'submitted', '[]', '{}', '[]', '[]', now(), now(), "
        "0, 0, 1, true, 0)"
    ),
    "claim": (
        "UPDATE queuestore_tasks SET status = 'working', worker_id = 'w1', attempt = attempt + 1,"
        " lease_expires_at = now() + interval '30 seconds', started_at = now(), "
        "updated_at = now(), version = version + 1 WHERE id = %(id)s AND status = 'submitted'"
    ),
    "progress": (
        "UPDATE queuestore_tasks SET progress = 0.5, status_message = 'half way', "
        "lease_expires_at = now() + interval '30 seconds', updated_at = now(), "
        "version = version + 1 WHERE id = %(id)s AND worker_id = 'w1'"
    ),
    "complete": (
        "UPDATE queuestore_tasks SET status = 'completed', progress = 1.0, "
        'result = \'{"rows": 42}\', artifacts = \'[{"artifact_id": "a", "parts": ["x"]}]\', '
        "worker_id = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now(), "
        "version = version + 1 WHERE id = %(id)s AND worker_id = 'w1'"
    ),
}

SIZES = """
SELECT c.relname, pg_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND (c.relname = 'queuestore_tasks'
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'queuestore_tasks'::regclass))
ORDER BY c.relname
"""


def wal_bytes(connection: psycopg.Connection, sql: str, task_id: str) -> int:
    plan = connection.execute(
        f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {sql}", {"id": task_id}
    ).fetchone()
    assert plan is not None
    document = plan[0] if isinstance(plan[0], list) else json.loads(plan[0])
    return int(document[0]["Plan"].get("WAL Bytes", 0))


def wal_per_task(url: str, tasks: int) -> dict[str, float]:
    totals = dict.fromkeys(LIFECYCLE, 0)
    with psycopg.connect(url, autocommit=True) as connection:
        for _ in range(tasks):
            task_id = new_task_id()
            for step, sql in LIFECYCLE.items():
                totals[step] += wal_bytes(connection, sql, task_id)
    return {step: total / tasks for step, total in totals.items()}


def sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as connection:
        return dict(connection.execute(SIZES).fetchall())


def growth(url: str, rows: int) -> dict[str, dict[str, int]]:
    """Sizes before, after ``rows`` lifecycles one task after another (autovacuum on, as
    configured), and after a ``VACUUM``."""
    seen = {"empty": sizes(url)}
    with psycopg.connect(url, autocommit=True) as connection, connection.pipeline():
        for _ in range(rows):
            task_id = new_task_id()
            for sql in LIFECYCLE.values():
                connection.execute(sql, {"id": task_id})
    seen["done"] = sizes(url)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM queuestore_tasks")
    seen["vacuumed"] = sizes(url)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with scratch_database("qs_bench_wal", migrate=True) as url:
        per_step = wal_per_task(url, args.tasks)
    print(f"WAL per task, mean of {args.tasks} lifecycles (statements only)")
    for step, size in per_step.items():
        print(f"  {step:<10}{size:>8.0f} B")
    print(f"  {'total':<10}{sum(per_step.values()):>8.0f} B")
    with scratch_database("qs_bench_wal", migrate=True) as url:
        seen = growth(url, args.rows)
    print(f"\nsizes, kB: empty / after {args.rows} lifecycles one by one / after VACUUM")
    for name in seen["empty"]:
        row = [seen[phase][name] // 1024 for phase in ("empty", "done", "vacuumed")]
        print(f"  {name:<48}{row[0]:>9}{row[1]:>9}{row[2]:>9}")


if __name__ == "__main__":
    main()
