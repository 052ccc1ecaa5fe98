"""Deadlines: beat fails the tasks past one, and frees the slots of runs that would not stop.

With the reaper, every ``reaper_interval`` (``TaskStore.enforce_deadlines``):
a run past its ``run_deadline_at`` whose worker did not time it out itself (a
frozen or dead worker) is failed with ``RunTimedOut``; a task never started by
its ``start_by`` fails with ``DeadlineExpired``; a live task no run holds past
its ``deadline_at`` fails with ``DeadlineExceeded``. A timed-out run is told
to stop (its worker hears it, and with ``terminate_on_cancel`` a prefork job
is interrupted), and one still holding its slot ``timeout_grace`` later is
killed (prefork) and its slot freed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from queuestore.broker.publisher import BROKER_ERRORS, Publisher
from queuestore.core.logs import about
from queuestore.core.models import Task
from queuestore.store.durable import Enforced

log = logging.getLogger(__name__)


def enforce(publisher: Publisher) -> Enforced:
    """Fail the tasks past their deadlines, stop their runs, and hand their slots on."""
    options = publisher.options
    enforced = publisher.store.enforce_deadlines(grace=options.timeout_grace)
    for task in enforced.timed_out + enforced.expired + enforced.exceeded:
        log.warning("task %s failed: %s", task.id, task.error, extra=about(task))
    if options.terminate_on_cancel:
        _revoke(publisher, enforced.timed_out, "SIGUSR1")
        _revoke(publisher, enforced.unresponsive, "SIGKILL")
    for task in enforced.unresponsive:
        assert task.worker_id is not None  # the read's own term
        log.error("task %s: its run did not stop; its slot is freed", task.id, extra=about(task))
        publisher.store.release_held(task.id, task.worker_id)
    ended = enforced.unresponsive + enforced.expired + enforced.exceeded
    for task in ended:
        publisher.hand_off(task)
    publisher.wake_parents(enforced.timed_out + ended)
    return enforced


def _revoke(publisher: Publisher, tasks: Sequence[Task], signal: str) -> None:
    """Interrupt the jobs of ``tasks`` where they run (a prefork pool)."""
    if not tasks:
        return
    try:
        publisher.app.control.revoke([task.id for task in tasks], terminate=True, signal=signal)
    except BROKER_ERRORS as exc:
        log.warning("revoke of %d timed-out runs not sent (%s)", len(tasks), exc)
