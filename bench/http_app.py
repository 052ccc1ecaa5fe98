"""The app of ``bench/http_api.py``: the API serves it (``--app http_app``), a worker runs it.

Configured by ``QUEUESTORE_*``. ``QUEUESTORE_BENCH_QUEUE`` is the default queue,
where the created no-op tasks wait (no worker reads it); ``bench.ticks`` goes to
``QUEUESTORE_BENCH_WORK_QUEUE``, which the worker reads.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from queuestore import Settings, TaskContext, job

settings = Settings()
app = settings.configure(Celery("http-bench"))
app.conf.task_default_queue = os.environ.get("QUEUESTORE_BENCH_QUEUE", "celery")
app.conf.task_routes = {
    "bench.ticks": {"queue": os.environ.get("QUEUESTORE_BENCH_WORK_QUEUE", "celery")}
}
queue = settings.make_queue(app, beat=False)


@job(app, name="bench.noop")
def noop(ctx: TaskContext) -> None:
    """Nothing; never run in the bench (its queue has no worker)."""


@job(app, name="bench.ticks")
def ticks(ctx: TaskContext, count: int, pause: float) -> int:
    """Write progress ``count`` times, ``pause`` seconds apart."""
    for step in range(1, count + 1):
        time.sleep(pause)
        ctx.progress(step / count)
    return count
