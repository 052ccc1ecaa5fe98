"""The Celery layer's rules, run in-process on the in-memory store.

These call the worker's ``execute`` directly (no broker round trip) so each
rule of a run -- claim, outcome, fencing, input, cancel -- is checked on its
own; tests/integration runs the same flow through real worker processes.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError

from queuestore import (
    Artifact,
    InMemoryTaskStore,
    InvalidTaskData,
    InvalidTransition,
    StoreUnavailable,
    Task,
    TaskContext,
    TaskQueue,
    TaskStatus,
    job,
)
from queuestore.queue import _REVOKE_FILTER, DISPATCHER_TASK, JANITOR_TASK, REAPER_TASK
from queuestore.worker import Job, execute, new_worker_id

T = TypeVar("T")


class Published:
    """Records what the queue publishes and revokes instead of talking to a broker."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.revoked: list[tuple[str, dict[str, Any]]] = []
        self.broker_down = False

    def send_task(self, name: str, **options: Any) -> None:
        if self.broker_down:
            raise OperationalError("connection refused")
        self.messages.append({"name": name, **options})

    def revoke(self, task_id: str, **options: Any) -> None:
        self.revoked.append((task_id, options))


@pytest.fixture
def app() -> Celery:
    return Celery("test_worker", broker="memory://", set_as_current=False)


@pytest.fixture
def published(app: Celery, monkeypatch: pytest.MonkeyPatch) -> Published:
    record = Published()
    monkeypatch.setattr(app, "send_task", record.send_task)
    monkeypatch.setattr(app.control, "revoke", record.revoke)
    return record


@pytest.fixture
def queue(app: Celery, published: Published) -> Iterator[TaskQueue]:
    return TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
    )


def register(app: Celery, function: Any, name: str = "test.job") -> Job:
    return job(app, name=name)(function)


def eventually(condition: Callable[[], T], timeout: float = 5.0) -> T:
    """Poll ``condition`` until it returns something truthy, or return its last value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def test_a_run_completes_with_result_progress_and_streamed_artifacts(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    def build(ctx: TaskContext, month: str) -> dict[str, Any]:
        for chunk in ("a,b\n", "1,2\n"):
            ctx.add_artifact(Artifact(artifact_id="csv", parts=[chunk]), append=True)
        ctx.progress(0.5, "half way")
        return {"month": month, "rows": 1}

    registered = register(app, build)
    task = queue.submit("test.job", {"month": "2026-11"}, owner="alice")
    assert published.messages == [
        {
            "name": "test.job",
            "args": (task.id,),
            "task_id": task.id,
            "countdown": None,
            "retry": True,
            "retry_policy": {
                "max_retries": 2,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 0.5,
            },
        }
    ]

    done = execute(queue, registered, task.id)

    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"month": "2026-11", "rows": 1}
    assert done.progress == 1.0
    assert done.artifacts[0].parts == ["a,b\n", "1,2\n"]
    assert done.attempt == 1
    assert done.worker_id is None


def test_an_exception_fails_the_task_with_its_type_and_message(
    app: Celery, queue: TaskQueue
) -> None:
    class UpstreamDown(Exception):
        pass

    def call(ctx: TaskContext) -> None:
        raise UpstreamDown("503 from upstream")

    task = queue.submit("test.job")
    failed = execute(queue, register(app, call), task.id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type.endswith("UpstreamDown")
    assert failed.error.type.startswith(__name__)
    assert failed.error.message == "503 from upstream"


def test_a_builtin_exception_is_named_without_its_module(app: Celery, queue: TaskQueue) -> None:
    def call(ctx: TaskContext) -> None:
        raise ValueError("bad month")

    failed = execute(queue, register(app, call), queue.submit("test.job").id)
    assert failed is not None
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("ValueError", "bad month")


def test_a_result_that_is_not_json_fails_the_task(app: Celery, queue: TaskQueue) -> None:
    def call(ctx: TaskContext) -> object:
        return {"when": datetime.now(UTC)}

    failed = execute(queue, register(app, call), queue.submit("test.job").id)
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "InvalidTaskData"


def test_a_second_message_for_the_same_run_is_dropped_and_the_body_runs_once(
    app: Celery, queue: TaskQueue
) -> None:
    runs: list[str] = []

    def call(ctx: TaskContext) -> int:
        runs.append(ctx.worker_id)
        return len(runs)

    registered = register(app, call)
    task = queue.submit("test.job")
    assert execute(queue, registered, task.id) is not None
    assert execute(queue, registered, task.id) is None
    assert len(runs) == 1
    assert queue.store.get(task.id).result == 1


def test_request_input_parks_the_task_and_resume_replays_with_the_answers(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    asked: list[str] = []

    def deploy(ctx: TaskContext, service: str) -> dict[str, Any]:
        first = ctx.request_input(f"Deploy {service}?")
        asked.append("first")
        second = ctx.request_input("Which region?")
        asked.append("second")
        return {"go": first, "region": second}

    registered = register(app, deploy)
    task = queue.submit("test.job", {"service": "api"})

    parked = execute(queue, registered, task.id)
    assert parked is not None
    assert parked.status is TaskStatus.INPUT_REQUIRED
    assert parked.status_message == "Deploy api?"
    assert parked.worker_id is None

    resumed = queue.resume(task.id, "yes")
    assert resumed.status is TaskStatus.WORKING
    assert resumed.worker_id is None
    assert published.messages[-1]["task_id"] == task.id

    parked = execute(queue, registered, task.id)
    assert parked is not None
    assert parked.status_message == "Which region?"

    queue.resume(task.id, "eu-west")
    done = execute(queue, registered, task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"go": "yes", "region": "eu-west"}
    assert done.answers == ["yes", "eu-west"]
    assert asked == ["first", "first", "second"]


def test_resume_of_a_task_not_waiting_for_input_is_refused(app: Celery, queue: TaskQueue) -> None:
    task = queue.submit("test.job")
    with pytest.raises(InvalidTransition):
        queue.resume(task.id, "yes")


def test_a_write_after_cancel_stops_the_job_and_the_task_stays_cancelled(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    reached: list[str] = []

    def call(ctx: TaskContext) -> str:
        queue.cancel(ctx.task_id, reason="user asked")
        try:
            ctx.progress(0.5)
            ctx.flush()
        finally:
            reached.append("finally")
        reached.append("after the write")
        return "never stored"

    task = queue.submit("test.job")
    left = execute(queue, register(app, call), task.id)

    assert reached == ["finally"]
    assert left is not None
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.status_message == "user asked"
    assert stored.result is None
    assert published.revoked == [(task.id, {"terminate": True, "signal": "SIGUSR1"})]


def test_a_job_that_ignores_the_cancel_cannot_complete_the_task(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext) -> str:
        queue.store.cancel(ctx.task_id)
        return "finished anyway"

    task = queue.submit("test.job")
    execute(queue, register(app, call), task.id)
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.CANCELLED
    assert stored.result is None


def test_a_task_cancelled_before_it_starts_never_runs_its_body(
    app: Celery, queue: TaskQueue
) -> None:
    runs: list[int] = []
    registered = register(app, lambda ctx: runs.append(1))
    task = queue.submit("test.job")
    queue.cancel(task.id)
    assert execute(queue, registered, task.id) is None
    assert runs == []


def test_the_heartbeat_tells_a_running_job_about_a_cancel(app: Celery, queue: TaskQueue) -> None:
    started = threading.Event()

    def call(ctx: TaskContext) -> str:
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.01)
        return "the cancel never arrived"

    task = queue.submit("test.job")
    runner = threading.Thread(target=execute, args=(queue, register(app, call), task.id))
    runner.start()
    assert started.wait(5)
    queue.cancel(task.id)
    runner.join(15)
    assert not runner.is_alive()
    assert queue.store.get(task.id).status is TaskStatus.CANCELLED


def test_the_heartbeat_keeps_the_lease_of_a_long_job_alive(app: Celery, queue: TaskQueue) -> None:
    seen: list[datetime | None] = []

    def call(ctx: TaskContext) -> None:
        seen.append(queue.store.get(ctx.task_id).lease_expires_at)
        seen.append(eventually(lambda: renewed(queue.store.get(ctx.task_id).lease_expires_at)))

    def renewed(lease: datetime | None) -> datetime | None:
        return lease if lease is not None and seen[0] is not None and lease > seen[0] else None

    task = queue.submit("test.job")
    done = execute(queue, register(app, call), task.id)
    assert done is not None
    assert done.status is TaskStatus.COMPLETED, done.error
    first, later = seen
    assert first is not None
    assert later is not None
    assert later > first


def test_a_reaped_run_loses_its_lease_and_the_retry_is_published(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    outcome: list[str] = []
    reaped: list[str] = []

    def call(ctx: TaskContext) -> None:
        later = datetime.now(UTC) + timedelta(minutes=5)
        reaped.extend(t.id for t in queue.store.reap(later, max_attempts=3))
        try:
            ctx.progress(0.9)
            ctx.flush()
        except BaseException as signal:
            outcome.append(type(signal).__name__)
            raise

    task = queue.submit("test.job")
    registered = register(app, call)
    execute(queue, registered, task.id)
    assert reaped == [task.id]
    assert outcome == ["JobCancelled"]
    stored = queue.store.get(task.id)
    assert stored.status is TaskStatus.WORKING
    assert stored.worker_id is None
    assert queue.store.claim(task.id, "another-worker", timedelta(seconds=5)) is not None


@pytest.mark.parametrize("ending", ["returns", "raises", "asks"])
def test_a_run_whose_task_was_reaped_and_reclaimed_cannot_write_its_outcome(
    app: Celery, queue: TaskQueue, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run frozen past its lease (a GC pause) wakes up to find the task is another run's."""
    second: list[Task] = []

    def call(ctx: TaskContext) -> str:
        ctx.progress(0.9, "stale run")
        ctx.add_artifact(Artifact(artifact_id="log", parts=["stale"]), append=True)
        later = datetime.now(UTC) + timedelta(minutes=5)
        queue.store.reap(later, max_attempts=3)
        taken = queue.store.claim(ctx.task_id, "second-run", timedelta(minutes=1))
        assert taken is not None
        second.append(
            queue.store.report(
                ctx.task_id,
                "second-run",
                known=taken,
                artifacts=[(Artifact(artifact_id="log", parts=["second"]), False)],
                progress=0.2,
                status_message="second run",
            )
        )
        if ending == "raises":
            raise RuntimeError("stale failure")
        if ending == "asks":
            ctx.request_input("stale question?")
        return "stale result"

    task = queue.submit("test.job")
    with caplog.at_level(logging.INFO, logger="queuestore.worker"):
        left = execute(queue, register(app, call), task.id)

    assert left is None
    assert "outcome dropped" in caplog.text
    (held,) = second
    assert held.attempt == 2
    assert queue.store.get(task.id) == held
    done = queue.store.report(task.id, "second-run", known=held, status="completed", result="ok")
    assert (done.status, done.result, done.progress) == (TaskStatus.COMPLETED, "ok", 0.2)
    assert [(a.artifact_id, a.parts) for a in done.artifacts] == [("log", ["second"])]


def test_the_reaper_republishes_a_first_lost_run_at_once(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    task = queue.submit("test.job")
    queue.store.claim(task.id, "dead-worker", timedelta(milliseconds=1))
    reaped = eventually(queue.reap)  # the store's clock passes the lease within moments
    assert [t.id for t in reaped] == [task.id]
    assert published.messages[-1]["task_id"] == task.id
    assert published.messages[-1]["countdown"] is None


def test_submit_refuses_input_the_job_cannot_take_and_writes_nothing(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    register(app, lambda ctx, month: month)
    with pytest.raises(InvalidTaskData) as refused:
        queue.submit("test.job", {"mnth": "2026-11"})
    assert refused.value.field == "input"
    assert queue.store.list().tasks == []
    assert published.messages == []


def test_submit_with_the_broker_down_keeps_the_task_and_the_sweep_publishes_it(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    published.broker_down = True
    task = queue.submit("test.job", {"n": 1})
    assert queue.store.get(task.id).status is TaskStatus.SUBMITTED
    assert published.messages == []

    queue.dispatch_grace = timedelta(0)
    assert queue.sweep() == 0
    published.broker_down = False
    assert queue.sweep() == 1
    assert [m["task_id"] for m in published.messages] == [task.id]
    assert queue.sweep() == 0


def test_result_waits_for_the_terminal_task_or_times_out(app: Celery, queue: TaskQueue) -> None:
    task = queue.submit("test.job")
    with pytest.raises(TimeoutError):
        queue.result(task.id, timeout=0.05)
    queue.cancel(task.id)
    assert queue.result(task.id, timeout=1).status is TaskStatus.CANCELLED


def test_install_beat_schedule_adds_three_expiring_entries(app: Celery, queue: TaskQueue) -> None:
    queue.install_beat_schedule(
        janitor_ttl=timedelta(hours=2),
        janitor_interval=timedelta(seconds=30),
        reaper_interval=timedelta(seconds=5),
        dispatch_interval=timedelta(seconds=7),
    )
    schedule = app.conf.beat_schedule
    assert set(schedule) == {JANITOR_TASK, REAPER_TASK, DISPATCHER_TASK}
    assert schedule[JANITOR_TASK]["kwargs"] == {"ttl_seconds": 7200.0, "batch_size": 1000}
    assert schedule[JANITOR_TASK]["options"] == {"expires": 30.0}
    assert schedule[REAPER_TASK]["options"] == {"expires": 5.0}
    assert schedule[DISPATCHER_TASK]["options"] == {"expires": 7.0}
    assert {JANITOR_TASK, REAPER_TASK, DISPATCHER_TASK} <= set(app.tasks)


def test_the_janitor_task_removes_only_expired_terminal_tasks(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = queue.store
    clock = [datetime.now(UTC) - timedelta(hours=2)]
    monkeypatch.setattr(store, "_now", lambda: clock[0])
    # Two hours old and past their own ttl: only their status keeps them.
    live = [store.create("test.job", ttl=timedelta(0)) for _ in range(3)]
    store.claim(live[1].id, "w1", timedelta(days=1))
    store.claim(live[2].id, "w1", timedelta(days=1))
    store.update(live[2].id, status="input_required", worker_id="w1")
    clock[0] += timedelta(hours=2)
    old = store.create("test.job", ttl=timedelta(0))
    store.cancel(old.id)
    kept = store.create("test.job")
    store.cancel(kept.id)

    removed = app.tasks[JANITOR_TASK](ttl_seconds=3600)

    assert removed == 1
    assert {t.id for t in store.list().tasks} == {kept.id, *(t.id for t in live)}


def test_a_queue_is_found_by_its_app_and_a_missing_one_is_explained(queue: TaskQueue) -> None:
    assert TaskQueue.of(queue.app) is queue
    with pytest.raises(RuntimeError, match="no TaskQueue"):
        TaskQueue.of(Celery("other", set_as_current=False))


def test_answered_questions_do_not_use_up_the_retries_for_lost_workers(
    app: Celery, queue: TaskQueue
) -> None:
    def ask_twice(ctx: TaskContext) -> list[Any]:
        return [ctx.request_input("first?"), ctx.request_input("second?")]

    registered = register(app, ask_twice)
    task = queue.submit("test.job")
    execute(queue, registered, task.id)
    queue.resume(task.id, 1)
    execute(queue, registered, task.id)
    queue.resume(task.id, 2)
    assert queue.store.claim(task.id, "doomed", timedelta(milliseconds=1)) is not None
    later = datetime.now(UTC) + timedelta(minutes=1)

    reaped = queue.store.reap(later, max_attempts=3)

    assert [t.status for t in reaped] == [TaskStatus.WORKING]
    assert reaped[0].attempt == 3


# -- batched reports --------------------------------------------------------


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
    done = execute(queue, register(app, call), task.id)

    assert done is not None
    assert len(reports.calls) == 1
    assert reports.calls[0]["status"] is TaskStatus.COMPLETED
    assert done.status is TaskStatus.COMPLETED
    assert [(a.artifact_id, a.parts) for a in done.artifacts] == [
        ("log", ["a", "b"]),
        ("summary", ["final"]),
    ]
    assert done.progress == 1.0
    assert done.status_message == "almost"
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

    queue.report_interval = timedelta(milliseconds=50)
    task = queue.submit("test.job")
    execute(queue, register(app, call), task.id)
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

    queue.report_interval = timedelta(0)
    task = queue.submit("test.job")
    execute(queue, register(app, call), task.id)
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
    execute(queue, register(app, call), task.id)
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
    done = execute(queue, register(app, call), task.id)
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
    done = execute(queue, register(app, call), task.id)
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

    queue.report_interval = timedelta(milliseconds=20)
    task = queue.submit("test.job")
    done = execute(queue, register(app, call), task.id)
    assert seen == [True, ["out"]]
    assert done is not None
    assert [a.artifact_id for a in done.artifacts] == ["out", "out2"]
    assert [call.get("status") for call in reports.calls] == [None, TaskStatus.COMPLETED]


def test_report_interval_must_be_shorter_than_the_lease(app: Celery) -> None:
    with pytest.raises(ValueError, match="report_interval"):
        TaskQueue(InMemoryTaskStore(), app, report_interval=timedelta(seconds=30))
    with pytest.raises(ValueError, match="report_interval"):
        TaskQueue(InMemoryTaskStore(), app, report_interval=timedelta(seconds=-1))


# -- dispatch marks ---------------------------------------------------------


def test_submit_marks_the_task_dispatched_in_the_background(app: Celery, queue: TaskQueue) -> None:
    queue.dispatch_marks.interval = 3600  # only a full batch or a flush writes
    queue.dispatch_marks.batch_size = 3
    queue.dispatch_marks.delay = 0
    first = [queue.submit("test.job") for _ in range(2)]
    assert {t.id for t in queue.store.undispatched(timedelta(0))} == {t.id for t in first}

    queue.submit("test.job")  # the third fills a batch: the thread writes it at once
    deadline = time.monotonic() + 5
    while queue.store.undispatched(timedelta(0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.store.undispatched(timedelta(0)) == []


def test_a_mark_waits_its_delay_and_a_task_claimed_meanwhile_gets_none(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert queue.dispatch_marks.delay == queue.dispatch_grace.total_seconds() / 2
    queue.dispatch_marks.delay = 0.5
    queue.dispatch_marks.interval = 0.01
    written: list[list[tuple[str, int]]] = []
    real = queue.store.mark_dispatched_many
    monkeypatch.setattr(
        queue.store, "mark_dispatched_many", lambda marks: (written.append(marks), real(marks))
    )
    claimed_soon, left_waiting = queue.submit("test.job"), queue.submit("test.job")
    assert queue.store.claim(claimed_soon.id, "w1", timedelta(seconds=30)) is not None
    time.sleep(0.2)
    assert written == []  # not due yet
    assert [t.id for t in queue.store.undispatched(timedelta(0))] == [left_waiting.id]

    deadline = time.monotonic() + 5
    while queue.store.undispatched(timedelta(0)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.store.undispatched(timedelta(0)) == []
    # Both marks at the version they were published at: the store skips the claimed one.
    assert sorted(mark for batch in written for mark in batch) == sorted(
        [(claimed_soon.id, claimed_soon.version), (left_waiting.id, left_waiting.version)]
    )


def test_a_mark_written_after_the_task_moved_on_does_not_hide_it_from_the_sweep(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    queue.dispatch_marks.interval = 3600
    task = queue.submit("test.job")
    claimed = queue.store.claim(task.id, "w1", timedelta(seconds=1))
    assert claimed is not None
    assert claimed.lease_expires_at is not None
    queue.store.reap(claimed.lease_expires_at + timedelta(seconds=1))  # released: needs a message

    queue.dispatch_marks.flush()  # the late mark of the first message

    queue.dispatch_grace = timedelta(0)
    assert queue.sweep() == 1
    assert [m["task_id"] for m in published.messages] == [task.id, task.id]


def test_dispatch_marks_wait_out_a_store_outage(
    app: Celery, queue: TaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.dispatch_marks.interval = 3600
    task = queue.submit("test.job")
    real = queue.store.mark_dispatched_many
    monkeypatch.setattr(
        queue.store,
        "mark_dispatched_many",
        lambda marks: (_ for _ in ()).throw(StoreUnavailable("restarting")),
    )
    queue.dispatch_marks.flush()
    monkeypatch.setattr(queue.store, "mark_dispatched_many", real)
    assert [t.id for t in queue.store.undispatched(timedelta(0))] == [task.id]

    queue.dispatch_marks.flush()
    assert queue.store.undispatched(timedelta(0)) == []


def test_celerys_revoke_bookkeeping_warning_is_dropped_only_for_a_disabled_backend(
    queue: TaskQueue, caplog: pytest.LogCaptureFixture
) -> None:
    control = logging.getLogger("celery.worker.control")
    message = "Failed to mark task %s as revoked in backend: %s"
    with caplog.at_level(logging.WARNING, logger="celery.worker.control"):
        control.warning(message, "t1", NotImplementedError("No result backend is configured."))
        control.warning(message, "t2", ConnectionError("backend down"))
        control.warning("Terminating %s (%s)", "t3", 10)

    assert [record.args[0] for record in caplog.records] == ["t2", "t3"]  # type: ignore[index]
    # A record whose args are a mapping is passed on untouched, not misread.
    mapping = logging.LogRecord("celery.worker.control", logging.WARNING, "", 0, message, (), None)
    mapping.args = {"task": "t4", "error": NotImplementedError()}
    assert _REVOKE_FILTER.filter(mapping)


# -- the Celery task a job registers ------------------------------------------


def test_a_job_registers_a_late_acked_celery_task_of_this_app_only(app: Celery) -> None:
    def noop(ctx: TaskContext) -> None:
        return None

    registered = register(app, noop, name="test.registered")

    task = registered.celery_task
    assert "test.registered" in app.tasks
    assert (task.name, task.acks_late, task.ignore_result) == ("test.registered", True, True)
    other = Celery("other", broker="memory://", set_as_current=False)
    assert "test.registered" not in other.tasks


def test_the_celery_task_runs_the_job_on_the_stored_task(app: Celery, queue: TaskQueue) -> None:
    def double(ctx: TaskContext, n: int) -> dict[str, int]:
        return {"twice": n * 2}

    registered = register(app, double)
    task = queue.submit("test.job", {"n": 21})

    registered.celery_task.apply(args=(task.id,), throw=True)

    done = queue.store.get(task.id)
    assert (done.status, done.result) == (TaskStatus.COMPLETED, {"twice": 42})


@pytest.mark.parametrize(("retries", "countdown"), [(0, 1.0), (1, 2.0), (2, 2.5), (10, 2.5)])
def test_a_store_outage_at_the_claim_retries_the_message_with_a_backoff_below_ack_after(
    app: Celery,
    queue: TaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    retries: int,
    countdown: float,
) -> None:
    def never(ctx: TaskContext) -> str:
        return "never run"

    registered = register(app, never)
    task = queue.submit("test.job")
    outage = StoreUnavailable("database restarting")

    def claim(*args: Any) -> None:
        raise outage

    asked: list[dict[str, Any]] = []

    def retry(**options: Any) -> Exception:
        asked.append(options)
        return RuntimeError("retry requested")

    monkeypatch.setattr(queue.store, "claim", claim)
    monkeypatch.setattr(registered.celery_task, "retry", retry)

    with pytest.raises(RuntimeError, match="retry requested"):
        registered.celery_task.apply(args=(task.id,), retries=retries, throw=True)
    assert asked == [{"exc": outage, "countdown": countdown, "max_retries": None}]


def test_a_worker_id_names_the_host_and_process_of_the_run() -> None:
    assert re.fullmatch(
        rf"{re.escape(socket.gethostname())}:{os.getpid()}:[0-9a-f]{{8}}", new_worker_id()
    )


def test_a_soft_time_limit_fails_the_task_unless_it_was_taken_from_the_run(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext, take: str) -> None:
        if take == "cancel":
            queue.store.cancel(ctx.task_id)
        if take == "delete":
            queue.store.delete(ctx.task_id)
        raise SoftTimeLimitExceeded()

    registered = register(app, call)
    ran_out = queue.submit("test.job", {"take": "nothing"})
    cancelled = queue.submit("test.job", {"take": "cancel"})
    deleted = queue.submit("test.job", {"take": "delete"})

    failed = execute(queue, registered, ran_out.id)
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "billiard.exceptions.SoftTimeLimitExceeded"
    left = execute(queue, registered, cancelled.id)
    assert left is not None
    assert left.status is TaskStatus.WORKING  # as the run last saw it: nothing written
    assert queue.store.get(cancelled.id).status is TaskStatus.CANCELLED
    assert execute(queue, registered, deleted.id) is not None


def test_a_failure_message_is_stored_without_nul_and_at_most_10000_characters(
    app: Celery, queue: TaskQueue
) -> None:
    texts = {"nul": "a\x00b", "long": "x" * 10_001}

    def call(ctx: TaskContext, text: str) -> None:
        raise ValueError(texts[text])

    registered = register(app, call)
    messages = []
    for text in texts:
        done = execute(queue, registered, queue.submit("test.job", {"text": text}).id)
        assert done is not None
        assert done.error is not None
        messages.append(done.error.message)
    assert messages == ["a\ufffdb", "x" * 10_000]


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
    done = execute(queue, register(app, call), task.id)

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
