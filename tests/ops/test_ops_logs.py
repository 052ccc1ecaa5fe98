"""Structured logs: every line a worker writes about a task carries the task id and job."""

from __future__ import annotations

import json
import logging
import re

from queuestore import TaskStatus
from queuestore.core.logs import JsonFormatter, TaskFields, TextFormatter, about, task_context
from tests.ops.ops_support import Ops

TASK_ID = re.compile(r"[A-Za-z0-9_-]{22}")


def records(ops: Ops) -> list[dict[str, object]]:
    return [json.loads(line) for line in ops.worker.text().splitlines() if line.startswith("{")]


def test_worker_lines_about_a_task_carry_its_id_and_job(ops: Ops) -> None:
    queue = ops.deployment.queue
    steps = queue.submit("ops.steps", {"count": 2, "pause": 0.0})
    boom = queue.submit("ops.boom", {"message": "no luck"})
    ops.deployment.wait_status(steps.id, TaskStatus.COMPLETED)
    ops.deployment.wait_status(boom.id, TaskStatus.FAILED)

    lines = records(ops)
    assert lines, ops.worker.tail()
    assert "[tasks]" not in ops.worker.text()  # no banner in JSON mode: the logs are the output
    assert all(
        {"time", "level", "logger", "message", "task_id", "job"} <= line.keys() for line in lines
    )
    for task, job in ((steps, "ops.steps"), (boom, "ops.boom")):
        about_it = [line for line in lines if task.id in str(line["message"])]
        assert about_it, f"no line mentions {task.id}"
        assert all((line["task_id"], line["job"]) == (task.id, job) for line in about_it)
        stamped = [line for line in lines if line["task_id"] == task.id]
        assert all(line["job"] == job for line in stamped)

    # The job's own lines, from its module's logger, carry the run's task.
    own = [line for line in lines if line["logger"] == "ops_app" and line["task_id"] == steps.id]
    assert [line["message"] for line in own] == ["step 1 of 2", "step 2 of 2"]
    failure = next(
        line for line in lines if line["message"] == f"job ops.boom failed for task {boom.id}"
    )
    assert "RuntimeError: no luck" in str(failure["exception"])
    # A line about no task says so.
    ready = next(line for line in lines if str(line["message"]).endswith("ready."))
    assert ready["task_id"] is None


def test_text_lines_name_the_task_once() -> None:
    record = logging.LogRecord("jobs", logging.INFO, __file__, 1, "halfway", None, None)
    inner = logging.Formatter("%(levelname)s %(message)s")
    with task_context("T" * 22, "reports.build"):
        TaskFields().filter(record)
    assert TextFormatter(inner).format(record) == f"INFO halfway [task {'T' * 22} reports.build]"

    about_task = logging.LogRecord(
        "jobs", logging.INFO, __file__, 1, "task %s done", ("X" * 22,), None
    )
    about_task.__dict__.update(about(type("T", (), {"id": "X" * 22, "name": "a.job"})()))
    TaskFields().filter(about_task)
    assert TextFormatter(inner).format(about_task) == f"INFO task {'X' * 22} done"  # named already

    unrelated = logging.LogRecord("jobs", logging.INFO, __file__, 1, "idle", None, None)
    TaskFields().filter(unrelated)
    assert TextFormatter(inner).format(unrelated) == "INFO idle"
    assert json.loads(JsonFormatter().format(unrelated))["task_id"] is None
