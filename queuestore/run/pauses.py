"""A run that met a provider's limit: pause its key fleet-wide, and wait for it.

``ctx.pause(key, until=...)`` and a job raising :class:`~queuestore.RetryAfter`
both come here: the pause is written to the store first (no task of the key
starts anywhere from then on), then the run ends to wait until the pause
ends, as a durable sleep does (``TaskStore.suspend``): no worker slot, no
broker message, no error kept; the job runs again from its start after it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from queuestore.core.flow import PauseKind
from queuestore.run.lease import Run
from queuestore.run.suspend import Suspended

log = logging.getLogger(__name__)


def pause_and_wait(run: Run, key: str | None, until: datetime) -> Suspended:
    """Pause ``key`` until ``until`` and return the wait that ends the run.

    Without ``key``, the task's own key (as its job's rate limit takes it), or
    else its job name, is paused.
    """
    kind, value = PauseKind.KEY, key
    if value is None:
        value = run.publisher.options.flow.key_of(run.task)
    if value is None:
        kind, value = PauseKind.JOB, run.task.name
    reason = f"task {run.task_id} was told to retry after {until.isoformat()}"
    run.publisher.store.pause(kind, value, until=until, reason=reason)
    log.info("task %s paused %s %r until %s", run.task_id, kind.value, value, until.isoformat())
    return Suspended(until, f"paused: {kind.value} {value} until {until.isoformat()}")
