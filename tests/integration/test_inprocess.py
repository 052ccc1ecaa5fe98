"""The job's view of a run, through a real Celery worker inside the test process.

Celery's pytest support (``celery_session_app``, ``celery_session_worker``) runs a worker in a
thread on the in-memory broker; the store is an :class:`InMemoryTaskStore`.
Messages, acknowledgements and revokes go through Celery for real, yet each
test takes a fraction of a second: the place for the TaskContext's behaviours.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from queuestore import (
    TERMINAL,
    Artifact,
    InMemoryTaskStore,
    Task,
    TaskContext,
    TaskQueue,
    TaskStatus,
    job,
)

pytestmark = pytest.mark.integration

WAIT = 10.0


@pytest.fixture(scope="session")
def celery_config() -> dict[str, Any]:
    return {
        "broker_url": "memory://",
        "result_backend": "cache+memory://",
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "accept_content": ["json"],
        "broker_transport_options": {"polling_interval": 0.01},
    }


class Probe:
    """What the test jobs tell the test: when they started and how they ended."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended: list[str] = []
        self.runs = 0

    def reset(self) -> None:
        self.started.clear()
        self.ended.clear()
        self.runs = 0


@pytest.fixture(scope="session")
def probe() -> Probe:
    return Probe()


@pytest.fixture(scope="session")
def session_queue(celery_session_app: Celery, probe: Probe) -> Iterator[TaskQueue]:
    """A queue on the in-memory store, with its jobs registered before the worker starts.

    (A worker learns the app's tasks when it starts: ``queue`` below asks for
    Celery's session worker only after this.)
    """
    queue = TaskQueue(
        InMemoryTaskStore(),
        celery_session_app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
        # The in-thread worker runs the solo pool: the job sees a cancel itself.
        terminate_on_cancel=False,
    )

    @job(celery_session_app, name="inproc.report")
    def report(ctx: TaskContext, topic: str) -> dict[str, Any]:
        probe.runs += 1
        ctx.set_message(f"researching {topic}")
        for number in (1, 2, 3):
            chunk = Artifact(artifact_id="report", name=f"{topic}.md", parts=[f"part {number}"])
            ctx.add_artifact(chunk, append=True)
            ctx.progress(number / 4)
        ctx.flush()  # reports are batched; ctx.task shows what was written
        seen = ctx.task
        return {
            "topic": topic,
            "attempt": ctx.attempt,
            "seen": seen.progress,
            "said": seen.status_message,
        }

    @job(celery_session_app, name="inproc.loop")
    def loop(ctx: TaskContext) -> str:
        """Loop until the run hears of a cancel, then return as if the work were done."""
        probe.started.set()
        deadline = time.monotonic() + WAIT
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        probe.ended.append("returned after the cancel" if ctx.cancelled else "never cancelled")
        return "never stored"

    @job(celery_session_app, name="inproc.interview")
    def interview(ctx: TaskContext) -> dict[str, Any]:
        probe.runs += 1
        name = ctx.request_input("Your name?")
        colour = ctx.request_input(f"Favourite colour, {name}?")
        return {"name": name, "colour": colour}

    yield queue
    queue.store.close()


@pytest.fixture
def queue(session_queue: TaskQueue, celery_session_worker: Any, probe: Probe) -> TaskQueue:
    """The queue, served by Celery's in-thread session worker (solo pool, memory broker)."""
    probe.reset()
    return session_queue


def _terminal(queue: TaskQueue, task_id: str) -> Task:
    return queue.result(task_id, timeout=WAIT)


def _waiting(queue: TaskQueue, task_id: str) -> Task:
    _until(
        lambda: (
            queue.store.get(task_id).status is not TaskStatus.SUBMITTED
            and queue.store.get(task_id).worker_id is None
        ),
        "the job to ask for input",
    )
    task = queue.store.get(task_id)
    assert task.status is TaskStatus.INPUT_REQUIRED, task
    return task


def test_the_context_reports_message_progress_and_streamed_artifacts(
    queue: TaskQueue, probe: Probe
) -> None:
    task = queue.submit("inproc.report", {"topic": "tides"})

    done = _terminal(queue, task.id)

    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {
        "topic": "tides",
        "attempt": 1,
        "seen": 0.75,
        "said": "researching tides",
    }
    assert done.status_message is None  # a finished task's message is its end's
    assert done.progress == 1.0
    assert [artifact.parts for artifact in done.artifacts] == [["part 1", "part 2", "part 3"]]
    assert probe.runs == 1


def test_a_cancel_reaches_the_running_job_and_its_return_cannot_complete_the_task(
    queue: TaskQueue, probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    task = queue.submit("inproc.loop")
    assert probe.started.wait(WAIT)

    with caplog.at_level(logging.INFO, logger="queuestore.run.jobs"):
        queue.cancel(task.id, reason="no longer needed")
        _until(lambda: probe.ended == ["returned after the cancel"], "the job to see the cancel")
        _until(lambda: "outcome dropped" in caplog.text, "the run to write its outcome")
    final = queue.store.get(task.id)
    assert final.status is TaskStatus.CANCELLED
    assert final.status_message == "no longer needed"
    assert final.result is None


def test_a_task_waiting_for_input_holds_no_worker_and_resumes_with_each_answer(
    queue: TaskQueue, probe: Probe
) -> None:
    task = queue.submit("inproc.interview")
    first = _waiting(queue, task.id)
    assert first.status_message == "Your name?"

    # The only worker slot is free while the task waits: another task runs meanwhile.
    other = queue.submit("inproc.report", {"topic": "otters"})
    assert _terminal(queue, other.id).status is TaskStatus.COMPLETED

    queue.resume(task.id, "Ada")
    _until(
        lambda: queue.store.get(task.id).status_message == "Favourite colour, Ada?",
        "the second question",
    )
    queue.resume(task.id, "teal")

    done = _terminal(queue, task.id)
    assert done.status is TaskStatus.COMPLETED, done.error
    assert done.result == {"name": "Ada", "colour": "teal"}
    assert done.answers == ["Ada", "teal"]


def test_messages_published_twice_run_the_body_once(queue: TaskQueue, probe: Probe) -> None:
    task = queue.store.create("inproc.report", {"topic": "echo"})
    for _ in range(3):
        queue.publish(task)

    done = _terminal(queue, task.id)

    assert done.status is TaskStatus.COMPLETED
    # Drain the duplicates through the same worker, then count the runs.
    marker = queue.submit("inproc.report", {"topic": "marker"})
    assert _terminal(queue, marker.id).status in TERMINAL
    assert probe.runs == 2
    assert queue.store.get(task.id).version == done.version


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {WAIT}s waiting for {what}")
        time.sleep(0.01)
