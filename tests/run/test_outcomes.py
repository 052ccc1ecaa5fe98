"""The outcome a run writes: its result, its failure, or nothing for a duplicate message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from queuestore import Artifact, TaskContext, TaskQueue, TaskStatus
from queuestore.run.jobs import execute
from tests.celery_support import Published, register


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

    done = execute(queue.publisher, registered, task.id)

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
    failed = execute(queue.publisher, register(app, call), task.id)

    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type.endswith("UpstreamDown")
    assert failed.error.type.startswith(__name__)
    assert failed.error.message == "503 from upstream"


def test_a_finished_run_leaves_the_message_of_its_end_not_its_last_report(
    app: Celery, queue: TaskQueue
) -> None:
    def call(ctx: TaskContext, fail: bool) -> None:
        ctx.progress(0.5, "half way")
        ctx.flush()
        ctx.progress(0.9, "1s left")  # still unwritten when the job ends
        if fail:
            raise ConnectionError("refused\nby 127.0.0.1")

    registered = register(app, call)
    done = execute(queue.publisher, registered, queue.submit("test.job", {"fail": False}).id)
    failed = execute(queue.publisher, registered, queue.submit("test.job", {"fail": True}).id)

    assert done is not None
    assert (done.status, done.status_message) == (TaskStatus.COMPLETED, None)
    assert failed is not None
    assert failed.status_message == "ConnectionError: refused"
    assert failed.error is not None
    assert failed.error.attempt == failed.attempt == 1


def test_a_builtin_exception_is_named_without_its_module(app: Celery, queue: TaskQueue) -> None:
    def call(ctx: TaskContext) -> None:
        raise ValueError("bad month")

    failed = execute(queue.publisher, register(app, call), queue.submit("test.job").id)
    assert failed is not None
    assert failed.error is not None
    assert (failed.error.type, failed.error.message) == ("ValueError", "bad month")


def test_a_result_that_is_not_json_fails_the_task(app: Celery, queue: TaskQueue) -> None:
    def call(ctx: TaskContext) -> object:
        return {"when": datetime.now(UTC)}

    failed = execute(queue.publisher, register(app, call), queue.submit("test.job").id)
    assert failed is not None
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "InvalidTaskData"


def test_a_failure_message_is_stored_without_nul_and_at_most_10000_characters(
    app: Celery, queue: TaskQueue
) -> None:
    texts = {"nul": "a\x00b", "long": "x" * 10_001}

    def call(ctx: TaskContext, text: str) -> None:
        raise ValueError(texts[text])

    registered = register(app, call)
    messages = []
    for text in texts:
        done = execute(queue.publisher, registered, queue.submit("test.job", {"text": text}).id)
        assert done is not None
        assert done.error is not None
        messages.append(done.error.message)
    assert messages == ["a\ufffdb", "x" * 10_000]


def test_a_second_message_for_the_same_run_is_dropped_and_the_body_runs_once(
    app: Celery, queue: TaskQueue
) -> None:
    runs: list[str] = []

    def call(ctx: TaskContext) -> int:
        runs.append(ctx.worker_id)
        return len(runs)

    registered = register(app, call)
    task = queue.submit("test.job")
    assert execute(queue.publisher, registered, task.id) is not None
    assert execute(queue.publisher, registered, task.id) is None
    assert len(runs) == 1
    assert queue.store.get(task.id).result == 1


def test_result_waits_for_the_terminal_task_or_times_out(app: Celery, queue: TaskQueue) -> None:
    task = queue.submit("test.job")
    with pytest.raises(TimeoutError):
        queue.result(task.id, timeout=0.05)
    queue.cancel(task.id)
    assert queue.result(task.id, timeout=1).status is TaskStatus.CANCELLED
