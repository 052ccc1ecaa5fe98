"""The apps of ``bench/fan_in.py``, loaded by its workers with ``-A``.

    celery -A fan_in_app:qs_app worker ...     queuestore: a parent spawns, waits, sums
    celery -A fan_in_app:chord_app worker ...  Celery: chord(group(square), total)

Both on the same Redis broker (``QUEUESTORE_BROKER_URL``) and PostgreSQL
database (``QUEUESTORE_DATABASE_URL``; Celery's result backend is
``BENCH_RESULT_BACKEND`` on it), each on its own queue (``BENCH_RUN``), with
late acknowledgement and a prefetch of one. A worker marks itself ready in
Redis (``bench:ready:<pid>``).
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready

from queuestore import Settings, TaskContext, job

RUN = os.environ.get("BENCH_RUN", "local")
QS_QUEUE = f"fan_in_{RUN}_queuestore"
CHORD_QUEUE = f"fan_in_{RUN}_chord"

settings = Settings()
_redis = redis.Redis.from_url(settings.broker_url)

qs_app = settings.configure(Celery("fan_in_qs"))
qs_app.conf.task_default_queue = QS_QUEUE
queue = settings.make_queue(qs_app, beat=True)


@job(qs_app, name="fan_in.square")
def square(ctx: TaskContext, x: int) -> int:
    return x * x


@job(qs_app, name="fan_in.fan_out")
def fan_out(ctx: TaskContext, n: int) -> int:
    children = ctx.spawn_many(
        {"job": "fan_in.square", "input": {"x": i}, "key": str(i)} for i in range(n)
    )
    return sum(ctx.wait_results(children))


chord_app = Celery(
    "fan_in_chord",
    broker=settings.broker_url,
    backend=os.environ.get("BENCH_RESULT_BACKEND"),
)
chord_app.conf.update(
    task_default_queue=CHORD_QUEUE,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
)


@chord_app.task(name="chord.square")
def chord_square(x: int) -> int:
    return x * x


@chord_app.task(name="chord.total")
def chord_total(results: list[int]) -> int:
    return sum(results)


@worker_ready.connect
def _ready(**_: Any) -> None:
    _redis.set(f"bench:ready:{os.getpid()}", 1, ex=3600)
