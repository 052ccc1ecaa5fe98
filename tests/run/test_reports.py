"""A run's reports are batched: written with the outcome, by the heartbeat, or at ``flush``.

Progress, artifacts and messages wait in the run; a bad report fails at the call, one the
store refuses (too big) fails the task.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from queuestore import (
    Artifact,
    InMemoryTaskStore,
    InvalidTaskData,
    StoreUnavailable,
    TaskContext,
    TaskQueue,
    TaskStatus,
)
from queuestore.run.jobs import execute
from tests.celery_support import Published, eventually, reconfigure, register


class CountedReports:
    """Wraps ``store.report`` to count the writes a run makes, and fail some on purpose."""

    def __init__(self, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        self.unavailable = 0
        real = queue.store.report

        def report(task_id: str, worker_id: str, **kwargs: Any) -> Any:
            if self.unavailable:
                self.unavailable -= 1
                raise StoreUnavailable("database restarting")
            self.calls.append(kwargs)
            return real(task_id, worker_id, **kwargs)

        monkeypatch.setattr(queue.store, "report", report)


@pytest.fixture
def reports(queue: TaskQueue, monkeypatch: pytest.MonkeyPatch) -> CountedReports:
    return CountedReports(queue, monkeypatch)


def test_a_short_job_writes_its_reports_with_its_outcome_in_one_write(
    app: Celery, queue: TaskQueue, reports: CountedReports
) -> None:
    def call(ctx: TaskContext) -> str:
        ctx.progress(0.25, "reading")
        ctx.add_artifact(Artifact(artifact_id="log", parts=["a"]), append=True)
        ctx.add_artifact(Artifact(artifact_id="log", parts=["b"]), append=True)
        ctx.add_artifact(Artifact(artifact_id="summary", parts=["draft"]))
        ctx.add_artifact(Artifact(artifact_id="summary", parts=["final"]))
        ctx.set_message("almost")
        return "done"

    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)

    assert done is not None
    assert len(reports.calls) == 1
    assert reports.calls[0]["status"] is TaskStatus.COMPLETED
    assert done.status is TaskStatus.COMPLETED
    assert [(a.artifact_id, a.parts) for a in done.artifacts] == [
        ("log", ["a", "b"]),
        ("summary", ["final"]),
    ]
    assert done.progress == 1.0
    assert done.status_message is None  # a finished task's message is its end's
    assert done.version == task.version + 2  # the claim, then one write


def test_the_heartbeat_writes_reports_while_the_job_runs(
    app: Celery, queue: TaskQueue, reports: CountedReports
) -> None:
    seen: list[float | None] = []

    def call(ctx: TaskContext) -> None:
        ctx.progress(0.4)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            stored = queue.store.get(ctx.task_id)
            if stored.progress == 0.4:
                seen.append(stored.progress)
                break
            time.sleep(0.01)

    reconfigure(queue, report_interval=timedelta(milliseconds=50))
    task = queue.submit("test.job")
    execute(queue.publisher, register(app, call), task.id)
    assert seen == [0.4]
    assert reports.calls[0]["progress"] == 0.4
    assert "status" not in reports.calls[0]


def test_with_a_zero_interval_each_report_is_written_before_the_call_returns(
    app: Celery, queue: TaskQueue, reports: CountedReports
) -> None:
    seen: list[Any] = []

    def call(ctx: TaskContext) -> None:
        ctx.progress(0.3)
        seen.append(queue.store.get(ctx.task_id).progress)
        ctx.add_artifact(Artifact(artifact_id="out", parts=["x"]))
        seen.append(len(queue.store.get(ctx.task_id).artifacts))

    reconfigure(queue, report_interval=timedelta(0))
    task = queue.submit("test.job")
    execute(queue.publisher, register(app, call), task.id)
    assert seen == [0.3, 1]
    assert len(reports.calls) == 3


def test_flush_writes_now_and_raises_once_the_task_was_cancelled(
    app: Celery, queue: TaskQueue
) -> None:
    seen: list[Any] = []

    def call(ctx: TaskContext) -> None:
        ctx.add_artifact(Artifact(artifact_id="out", parts=["x"]))
        ctx.flush()
        seen.append(len(queue.store.get(ctx.task_id).artifacts))
        queue.cancel(ctx.task_id)
        ctx.progress(0.5)  # kept: the run does not know yet
        seen.append("reported")
        ctx.flush()
        seen.append("never")

    task = queue.submit("test.job")
    execute(queue.publisher, register(app, call), task.id)
    assert seen == [1, "reported"]
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.progress is None


def test_a_bad_report_raises_at_the_call_and_is_not_kept(app: Celery, queue: TaskQueue) -> None:
    caught: list[str | None] = []

    def call(ctx: TaskContext) -> str:
        for bad in (lambda: ctx.progress(1.5), lambda: ctx.add_artifact({"parts": "no"})):
            try:
                bad()
            except InvalidTaskData as exc:
                caught.append(exc.field)
        ctx.progress(0.5)
        return "ok"

    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.artifacts == []
    assert caught == ["progress", "artifact"]


def test_appended_parts_that_outgrow_the_limit_fail_the_task_with_invalid_task_data(
    app: Celery, published: Published
) -> None:
    queue = TaskQueue(InMemoryTaskStore(max_payload_bytes=2000), app)

    def call(ctx: TaskContext) -> str:
        for _ in range(3):
            ctx.add_artifact(Artifact(artifact_id="big", parts=["x" * 900]), append=True)
        return "never stored"

    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)
    assert done is not None
    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    assert done.error.type == "InvalidTaskData"
    assert done.result is None
    assert done.artifacts == []


def test_reports_survive_a_store_outage_during_a_heartbeat_write(
    app: Celery, queue: TaskQueue, reports: CountedReports
) -> None:
    seen: list[Any] = []

    def call(ctx: TaskContext) -> str:
        reports.unavailable = 1
        ctx.add_artifact(Artifact(artifact_id="out", parts=["kept"]))
        # The heartbeat's write fails once, then the next one carries the artifact.
        seen.append(eventually(lambda: reports.unavailable == 0))
        seen.append(
            eventually(lambda: [a.artifact_id for a in queue.store.get(ctx.task_id).artifacts])
        )
        ctx.add_artifact(Artifact(artifact_id="out2", parts=["also"]))
        return "ok"

    reconfigure(queue, report_interval=timedelta(milliseconds=20))
    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)
    assert seen == [True, ["out"]]
    assert done is not None
    assert [a.artifact_id for a in done.artifacts] == ["out", "out2"]
    assert [call.get("status") for call in reports.calls] == [None, TaskStatus.COMPLETED]


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_a_batch_the_heartbeat_could_not_write_fails_a_job_that_then_returns(
    app: Celery, published: Published, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    queue = TaskQueue(
        InMemoryTaskStore(max_payload_bytes=2000),
        app,
        heartbeat_interval=timedelta(seconds=0.05),
        report_interval=timedelta(milliseconds=20),
    )
    reports = CountedReports(queue, monkeypatch)

    def call(ctx: TaskContext) -> str:
        for _ in range(3):
            ctx.add_artifact(Artifact(artifact_id="big", parts=["x" * 900]), append=True)
        assert eventually(lambda: reports.calls)  # the heartbeat tried, and was refused
        if ending == "raises":
            raise RuntimeError("the job's own failure")
        return "never stored"

    task = queue.submit("test.job")
    done = execute(queue.publisher, register(app, call), task.id)

    assert done is not None
    assert done.status is TaskStatus.FAILED
    assert done.error is not None
    if ending == "raises":
        assert (done.error.type, done.error.message) == ("RuntimeError", "the job's own failure")
    else:
        assert done.error.type == "InvalidTaskData"
        assert "artifact" in done.error.message
    assert done.result is None
    assert done.artifacts == []


def test_report_interval_must_be_shorter_than_the_lease(app: Celery) -> None:
    with pytest.raises(ValueError, match="report_interval"):
        TaskQueue(InMemoryTaskStore(), app, report_interval=timedelta(seconds=30))
    with pytest.raises(ValueError, match="report_interval"):
        TaskQueue(InMemoryTaskStore(), app, report_interval=timedelta(seconds=-1))
