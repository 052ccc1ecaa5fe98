"""The reaper: runs whose worker died are retried, or failed after ``max_lost_runs``.

A run renews its lease while it lives; a worker killed (SIGKILL, OOM, a lost
node) stops renewing it. Beat runs the reaper every ``reaper_interval``: each
task whose lease ran out is given another run (published at once the first
time, then with a growing backoff) or, once it lost ``max_lost_runs`` runs,
fails with ``WorkerLost``. Every write is conditioned on the lease found
expired, so a worker that renews it meanwhile keeps its task.
"""

from __future__ import annotations

import logging

from queuestore.broker.publisher import Publisher
from queuestore.core import tracing
from queuestore.core.logs import about
from queuestore.core.models import Task
from queuestore.store.runs import lost_runs

log = logging.getLogger(__name__)


def reap(publisher: Publisher) -> list[Task]:
    """Retry or fail the tasks whose worker died, and publish the retries.

    Under concurrency limits, a retry takes the slot its lost run held; a task
    that failed hands it on.
    """
    reaped = publisher.store.reap(max_lost_runs=publisher.options.max_lost_runs)
    for task in reaped:
        lost = {"queuestore.lost_runs": lost_runs(task), "queuestore.failed": task.is_terminal}
        with tracing.of_task("queuestore.reap", task, attributes=lost):
            if task.is_terminal:
                log.warning("task %s failed: %s", task.id, task.error, extra=about(task))
            else:
                log.warning("task %s lost its worker; retrying", task.id, extra=about(task))
                publisher.try_publish(task, countdown=backoff(lost_runs(task)))
    # After every retry is published: a hand-off would publish a retry again.
    for task in reaped:
        if task.is_terminal:
            publisher.hand_off(task)
    publisher.wake_parents(reaped)
    return reaped


def backoff(lost: int) -> float | None:
    """The countdown of a retry after ``lost`` lost runs: none after the first.

    A run lost once is most likely its node's death: run it again at once, so a
    dead worker's tasks run elsewhere within the lease and one reaper interval.
    Runs that keep dying (a job that kills its worker) back off 2 s, doubling,
    up to a minute.
    """
    return None if lost <= 1 else min(2.0 ** (lost - 1), 60.0)
