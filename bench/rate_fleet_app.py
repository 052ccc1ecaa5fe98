"""The Celery app of ``bench/rate_fleet.py``'s workers: the ready ``workers`` app, one job.

    celery -A rate_fleet_app worker ...

Configuration comes from ``QUEUESTORE_*`` as for ``workers``; ``BENCH_QUEUE``
names the queue, so that the run's messages are its own.
"""

from __future__ import annotations

import os

from queuestore import TaskContext, job
from workers import app, queue

app.conf.task_default_queue = os.environ["BENCH_QUEUE"]


@job(app, name="bench.call")
def call(ctx: TaskContext) -> None:
    """A call to a rate-limited provider that answers at once."""


__all__ = ["app", "queue"]
