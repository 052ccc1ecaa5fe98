"""A prefork revoke's SIGUSR1 around a run's own steps, through ``execute`` in this process.

``TaskQueue.cancel`` ends a prefork run with ``revoke(terminate=True,
signal="SIGUSR1")``, which billiard raises as ``SoftTimeLimitExceeded`` wherever
the job is. ``execute`` holds the signal back while it claims, while it leaves
the heartbeat and while it writes the outcome, and drops it there: the cancel's
own write already stops the run (the claim fails, the heartbeat hears it, the
outcome write is fenced). Once the run knows it is cancelled, a signal is
dropped too, so the job's cleanup is not broken. billiard's handler is
installed here as a prefork child has it, and the signal is sent to this
process at each of those steps.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from billiard.pool import soft_timeout_sighandler
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from queuestore import InMemoryTaskStore, TaskContext, TaskQueue, TaskStatus, job
from queuestore.run.heartbeat import Heartbeat
from queuestore.run.interrupts import interrupts
from queuestore.run.jobs import execute

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals reach only the main thread",
)


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.05)  # the Python-level handler runs at the next bytecode boundary


@pytest.fixture
def prefork_child() -> Iterator[None]:
    """SIGUSR1 handled by billiard, as in a prefork child; execute takes it over."""
    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    interrupts._pid = None  # let execute's install() take over in this process
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)
        interrupts._pid = None


@pytest.fixture
def queue() -> TaskQueue:
    app = Celery("test_worker_signals", broker="memory://", set_as_current=False)
    app.send_task = lambda *args, **kwargs: None  # type: ignore[method-assign]
    return TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
    )


def _signalling(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, with SIGUSR1 arriving while it runs."""

    def call(*args: Any, **kwargs: Any) -> Any:
        _signal_self()
        return method(*args, **kwargs)

    return call


def _completes(queue: TaskQueue, steps: list[str]) -> None:
    def call(ctx: TaskContext) -> str:
        steps.append("ran")
        return "done"

    registered = job(queue.app, name="test.signals")(call)
    task = queue.submit("test.signals")
    done = execute(queue.publisher, registered, task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == "done"
    assert queue.store.get(task.id).status is TaskStatus.COMPLETED


@pytest.mark.usefixtures("prefork_child")
def test_a_signal_during_the_claim_is_held_and_dropped(
    queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue.store, "claim", _signalling(queue.store.claim))
    steps: list[str] = []
    _completes(queue, steps)
    assert steps == ["ran"]


@pytest.mark.usefixtures("prefork_child")
def test_a_signal_while_leaving_the_heartbeat_is_held_and_dropped(
    queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Heartbeat, "discard", _signalling(Heartbeat.discard))
    _completes(queue, [])


@pytest.mark.usefixtures("prefork_child")
def test_a_signal_during_the_outcome_write_is_held_and_dropped(
    queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue.store, "report", _signalling(queue.store.report))
    _completes(queue, [])


@pytest.mark.usefixtures("prefork_child")
def test_a_run_that_knows_it_is_cancelled_finishes_its_cleanup_through_a_signal(
    queue: TaskQueue,
) -> None:
    cleaned: list[str] = []

    def call(ctx: TaskContext) -> str:
        canceller = threading.Thread(target=queue.cancel, args=(ctx.task_id,))
        canceller.start()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        canceller.join(5)
        assert ctx.cancelled
        _signal_self()  # the revoke's signal, after the heartbeat told the run
        cleaned.append("cleanup finished")
        return "ignored"

    registered = job(queue.app, name="test.signals")(call)
    task = queue.submit("test.signals")
    execute(queue.publisher, registered, task.id)
    assert cleaned == ["cleanup finished"]
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED


@pytest.mark.usefixtures("prefork_child")
def test_a_signal_to_a_running_job_interrupts_it_and_fails_the_task(queue: TaskQueue) -> None:
    """The signal is not swallowed everywhere: a job that was not cancelled is interrupted."""
    reached: list[str] = []

    def call(ctx: TaskContext) -> str:
        _signal_self()
        reached.append("after the signal")
        return "never"

    registered = job(queue.app, name="test.signals")(call)
    task = queue.submit("test.signals")
    done = execute(queue.publisher, registered, task.id)
    assert reached == []
    assert done is not None
    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    kind = SoftTimeLimitExceeded  # celery's name for billiard's class
    assert done.error.type == f"{kind.__module__}.{kind.__qualname__}"
