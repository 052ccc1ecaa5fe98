"""The workers of ``bench/broker_recovery.py``: the ``workers`` app plus one sleeping job.

Each run appends ``start <attempt> <unix time>`` to ``$BENCH_RECORDS/<task id>``;
every publish and delivery of a message appends ``published`` or ``received``
to ``<task id>.messages``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery.signals import before_task_publish, task_received

from queuestore import TaskContext, job
from workers import app, queue

app.conf.task_default_queue = os.environ["BENCH_QUEUE"]
RECORDS = Path(os.environ["BENCH_RECORDS"])


def append(name: str, line: str) -> None:
    """One small atomic append to ``RECORDS/name``."""
    descriptor = os.open(RECORDS / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(descriptor, f"{line}\n".encode())
    finally:
        os.close(descriptor)


@before_task_publish.connect
def _published(headers: dict | None = None, **_: object) -> None:
    if (task_id := (headers or {}).get("id")) is not None:
        append(f"{task_id}.messages", "published")


@task_received.connect
def _received(request: object = None, **_: object) -> None:
    if (task_id := getattr(request, "id", None)) is not None:
        append(f"{task_id}.messages", "received")


@job(app, name="bench.sleep")
def sleep(ctx: TaskContext, seconds: float) -> None:
    """Record the start, then sleep without store writes until ``seconds`` or the release.

    The release is the file ``$BENCH_RECORDS/release``: once the benchmark made it,
    a run ends at once.
    """
    append(ctx.task_id, f"start {ctx.attempt} {time.time()}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (RECORDS / "release").exists():
        time.sleep(0.05)


__all__ = ["app", "queue"]
