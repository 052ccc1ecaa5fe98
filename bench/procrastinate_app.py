"""procrastinate's side of ``bench/celery_lifecycle.py``: the same lifecycle on procrastinate 3.10.

    python -m procrastinate --app=procrastinate_app.app worker --concurrency N ...

procrastinate keeps the job's state (todo, doing, succeeded) but neither its
progress, artifacts nor result, so its users write those to a table of their
own. The job below does that the way such a user would, with two statements on
procrastinate's own pool: a row with the progress when the job starts, then
the artifact and the result when it is done. The job is durable as
queuestore's is: every statement commits on its own, synchronously.

Configuration: ``QUEUESTORE_DATABASE_URL`` (the bench's scratch database),
``BENCH_RUN`` (this run's queue) and ``BENCH_REDIS_URL`` (the ready signal).
"""

from __future__ import annotations

import json
import os

import redis
from procrastinate import App, JobContext, PsycopgConnector

RUN = os.environ.get("BENCH_RUN", "local")
QUEUE = f"bench_{RUN}_procrastinate"
STATE_TABLE = "bench_procrastinate_state"

CREATE_STATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {STATE_TABLE} (
    job_id bigint PRIMARY KEY,
    progress double precision,
    artifacts jsonb NOT NULL DEFAULT '[]',
    result jsonb,
    updated_at timestamptz NOT NULL DEFAULT now()
)
"""

_DSN = os.environ.get("QUEUESTORE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
app = App(connector=PsycopgConnector(conninfo=_DSN, min_size=1, max_size=4))


@app.task(name="bench.lifecycle", queue=QUEUE, pass_context=True)
async def lifecycle(context: JobContext, n: int = 0) -> None:
    """The smallest full lifecycle: progress, one artifact, a small result."""
    job_id = context.job.id
    await app.connector.execute_query_async(
        f"INSERT INTO {STATE_TABLE} (job_id, progress) VALUES (%(job_id)s, 0.5)",
        job_id=job_id,
    )
    artifact = {"artifact_id": "out", "name": "out.txt", "parts": [f"row {n}"]}
    await app.connector.execute_query_async(
        f"UPDATE {STATE_TABLE} SET progress = 1.0, artifacts = %(artifacts)s::jsonb,"
        " result = %(result)s::jsonb, updated_at = now() WHERE job_id = %(job_id)s",
        job_id=job_id,
        artifacts=json.dumps([artifact]),
        result=json.dumps({"n": n, "ok": True}),
    )


if os.environ.get("BENCH_PROCRASTINATE_WORKER"):
    # Started as the worker: tell the bench (it waits for this pid's key).
    redis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")).set(
        f"bench:ready:{os.getpid()}", "1", ex=3600
    )
