"""Celery apps for ``bench/celery_lifecycle.py``, loaded by its workers with ``-A``.

    celery -A lifecycle_app:app worker ...       queuestore: full task lifecycle
    celery -A lifecycle_app:bare_app worker ...  bare Celery, no result backend
    celery -A lifecycle_app:db_app worker ...    Celery + its SQLAlchemy result backend
    celery -A lifecycle_app:floor_app worker ... the floor: bare Celery + queuestore's
                                                 claim and complete as raw statements

All three share the broker and the durable-job settings of
``Settings.celery_config()`` (late acks, prefetch 1, JSON), each on its own
queue, so they differ only in what a task does to be recorded. Configuration
comes from ``QUEUESTORE_*`` like ``workers/__init__.py``, plus:

- ``BENCH_REDIS_URL``: where the trivial task counts its runs and the
  cooperative job records when it saw a cancel.
- ``BENCH_RUN``: a token that keeps this run's queues apart from any other's.
- ``BENCH_RESULT_BACKEND``: the ``db+postgresql+psycopg://`` URL for ``db_app``.
- ``BENCH_FLOOR_URL``: the ``postgresql://`` URL ``floor_app``'s raw statements use.
- ``BENCH_COUNT_WAKEUPS``: count in Redis (``WAKEUPS_KEY``) each time the
  heartbeat thread's listener returns with changes: a wakeup by a change.
- ``BENCH_PROFILE``: a file; the worker's main thread runs under cProfile,
  timed by that thread's CPU clock (waits on the network cost nothing), and
  dumps its statistics there at shutdown.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import redis
from benchkit import RAW_CLAIM, RAW_COMPLETE
from celery import Celery
from celery.signals import worker_ready, worker_shutdown
from psycopg.types.json import Jsonb

from queuestore import Artifact, JobCancelled, Settings, TaskContext, job

RUN = os.environ.get("BENCH_RUN", "local")
QS_QUEUE = f"bench_{RUN}_queuestore"
BARE_QUEUE = f"bench_{RUN}_bare"
DB_QUEUE = f"bench_{RUN}_db"
FLOOR_QUEUE = f"bench_{RUN}_floor"

READY_KEY = "bench:ready:{pid}"
COUNTER_KEY = "bench:count"
STARTED_KEY = "bench:started:{task_id}"
STOPPED_KEY = "bench:stopped:{task_id}"
WAKEUPS_KEY = "bench:wakeups"

settings = Settings()
_redis = redis.Redis.from_url(os.environ.get("BENCH_REDIS_URL", settings.broker_url))


def _celery(name: str, queue_name: str, **overrides: Any) -> Celery:
    celery_app = Celery(name)
    celery_app.conf.update(settings.celery_config())
    celery_app.conf.update(task_default_queue=queue_name, **overrides)
    return celery_app


# -- queuestore: built like workers/__init__.py (beat schedule aside) -------

app = _celery("bench_queuestore", QS_QUEUE)
store = settings.make_store()
queue = settings.make_queue(app, store, beat=False)

if os.environ.get("BENCH_COUNT_WAKEUPS"):
    _subscribe_stops = store.subscribe_stops

    @contextlib.contextmanager
    def _counted_stops() -> Iterator[Any]:
        with _subscribe_stops() as listen:

            def counted(seconds: float) -> Any:
                changes = listen(seconds)
                if changes:
                    _redis.incr(WAKEUPS_KEY)
                return changes

            yield counted

    store.subscribe_stops = _counted_stops  # type: ignore[method-assign]


@job(app, name="bench.lifecycle")
def lifecycle(ctx: TaskContext, n: int = 0) -> dict[str, object]:
    """The smallest full lifecycle: progress, one artifact, a small result."""
    ctx.progress(0.5)
    ctx.add_artifact(Artifact(artifact_id="out", name="out.txt", parts=[f"row {n}"]))
    return {"n": n, "ok": True}


@job(app, name="bench.cooperative")
def cooperative(ctx: TaskContext, limit: float = 30.0) -> dict[str, object]:
    """Loop until cancelled (or ``limit`` seconds), recording when the stop was seen."""
    _redis.set(STARTED_KEY.format(task_id=ctx.task_id), repr(time.time()), ex=600)
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.01)
    except (JobCancelled, Exception) as exc:
        # JobCancelled on the solo pool; SoftTimeLimitExceeded (SIGUSR1) on prefork.
        _redis.set(
            STOPPED_KEY.format(task_id=ctx.task_id),
            f"{time.time()!r} {type(exc).__name__}",
            ex=600,
        )
        raise
    return {"cancelled": False}


# -- the two Celery baselines: same broker and settings, a trivial task ----


def _noop() -> None:
    _redis.incr(COUNTER_KEY)


bare_app = _celery("bench_bare", BARE_QUEUE, task_ignore_result=True)
# shared=False: both apps name their task bench.noop; a shared task would be
# added to every app, and which one won (results stored or not) varied by run.
bare_app.task(name="bench.noop", ignore_result=True, acks_late=True, shared=False)(_noop)

db_app = _celery(
    "bench_db",
    DB_QUEUE,
    task_ignore_result=False,
    result_backend=os.environ.get("BENCH_RESULT_BACKEND", "db+sqlite:///bench-results.db"),
)
db_app.task(name="bench.noop", ignore_result=False, acks_late=True, shared=False)(_noop)


# -- the floor: what any durable lifecycle on queuestore's table costs at least ----
#
# Bare Celery's task, plus the claim and the completion (result and artifact)
# as raw prepared statements on one connection per process, each returning the
# row; the producer inserts the row with a raw statement before it publishes.
# No heartbeat, no reports, no validation, no outage handling: a lower bound.

floor_app = _celery("bench_floor", FLOOR_QUEUE, task_ignore_result=True)
_floor_connections: dict[int, psycopg.Connection[Any]] = {}


def _floor_connection() -> psycopg.Connection[Any]:
    connection = _floor_connections.get(os.getpid())
    if connection is None or connection.closed:
        connection = psycopg.connect(os.environ["BENCH_FLOOR_URL"], autocommit=True)
        _floor_connections[os.getpid()] = connection
    return connection


def _floor(task_id: str) -> None:
    db, worker = _floor_connection(), secrets.token_hex(8)
    if db.execute(RAW_CLAIM, (worker, task_id), prepare=True).fetchone() is None:
        return
    artifact = {"artifact_id": "out", "name": "out.txt", "parts": [f"row {task_id}"]}
    db.execute(
        RAW_COMPLETE,
        (Jsonb({"n": 0, "ok": True}), Jsonb([artifact]), task_id, worker),
        prepare=True,
    ).fetchone()


floor_app.task(name="bench.floor", ignore_result=True, acks_late=True, shared=False)(_floor)


# -- worker plumbing --------------------------------------------------------

_profiler: list[cProfile.Profile] = []


@worker_ready.connect
def _announce_ready(**_: Any) -> None:
    if os.environ.get("BENCH_PROFILE"):
        _profiler.append(cProfile.Profile(time.thread_time))
        _profiler[0].enable()
    _redis.set(READY_KEY.format(pid=os.getpid()), "1", ex=3600)


@worker_shutdown.connect
def _dump_profile(**_: Any) -> None:
    if _profiler:
        _profiler[0].disable()
        _profiler[0].dump_stats(os.environ["BENCH_PROFILE"])
