"""The watchdog: a run past its deadline is failed on time and stopped, in every pool.

The worker's heartbeat thread (:mod:`queuestore.run.heartbeat`) wakes at each
run's deadline (``run_deadline_at``, the claim's, turned into this process's
monotonic clock so that no clock skew moves it) and:

1. takes note that the run timed out: its next report, step or
   ``raise_if_cancelled`` raises :class:`~queuestore.run.lease.RunTimedOut`;
2. fails the task in the store (``TaskStore.time_out``): the task is ``failed``
   on time whatever the job does, and the run's later writes are refused;
3. raises ``RunTimedOut`` in the job's own thread
   (:meth:`Interrupts.interrupt <queuestore.run.interrupts.Interrupts.interrupt>`),
   which stops a job that never reports, in the solo, threads and prefork pools.

If the job has not returned ``timeout_grace`` later (it swallows the
exception, or is blocked in C), a prefork pool's child kills itself: the pool
replaces it and the reaper frees the run's slot. A thread cannot be killed:
in the solo and threads pools the worker logs the run it gave up on, and its
slot stays busy until the call returns. The reaper fails a run whose worker
is frozen or gone (``TaskStore.enforce_deadlines``).
"""

from __future__ import annotations

import logging
import os
import signal

from queuestore.core.errors import QueueStoreError
from queuestore.core.logs import about
from queuestore.run.interrupts import interrupts
from queuestore.run.lease import Run, RunTimedOut

log = logging.getLogger(__name__)


def next_wake(run: Run) -> float | None:
    """When the watchdog must look at ``run`` next (monotonic), or None."""
    if run.deadline is None or run.killed:
        return None
    if not run.timed_out:
        return run.deadline
    return run.deadline + run.publisher.options.timeout_grace.total_seconds()


def watch(run: Run, now: float) -> None:
    """Time ``run`` out at its deadline, and give up on it past the grace."""
    wake = next_wake(run)
    if wake is None or now < wake:
        return
    if not run.timed_out:
        time_out(run)
    else:
        give_up(run)


def time_out(run: Run) -> None:
    """Stop ``run``, fail its task in the store, and interrupt its job."""
    run.stop(timed_out=True)
    store = run.publisher.store
    try:
        store.time_out(run.task_id, run.worker_id, known=run.task)
    except QueueStoreError as exc:  # ended meanwhile, or the store is down: the reaper's
        log.info("task %s: its run's time-out was not written (%s)", run.task_id, exc)
    else:
        log.warning("task %s: its run passed its timeout", run.task_id, extra=about(run.task))
    if run.publisher.options.timeout_interrupt:
        interrupts.interrupt(run.thread_id, RunTimedOut, run)


def give_up(run: Run) -> None:
    """The job did not stop within the grace: kill a prefork child, else say so."""
    run.killed = True
    if interrupts.prefork:
        log.error(
            "task %s: its job did not stop %s after its timeout; killing pool process %d",
            run.task_id,
            run.publisher.options.timeout_grace,
            os.getpid(),
            extra=about(run.task),
        )
        os.kill(os.getpid(), signal.SIGKILL)
    log.error(
        "task %s: its job did not stop %s after its timeout; its thread keeps its "
        "worker slot until the call returns (use the prefork pool for work that may not stop)",
        run.task_id,
        run.publisher.options.timeout_grace,
        extra=about(run.task),
    )
