"""Whose failure a failed task is, on the MCP wire: the tool's, or the server's.

A job that raised is the tool's error: on 2026-07-28 a ``completed`` task whose
result has ``isError``. A task the server failed (every run's worker lost, no
worker with its job, a result or report the store refused, the job's time limit)
or rejected is a protocol error: ``failed`` with a JSON-RPC ``error`` and no
``result``; on 2025-11-25 ``tasks/result`` answers that error, and so does a
plain call. Unit tests of :mod:`queuestore.mcp.wire` on the in-memory store.
"""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from queuestore import InMemoryTaskStore, Task, TaskError, TaskStatus
from queuestore.mcp import wire

SERVER_FAILURES = [
    ("WorkerLost", "worker w1 stopped renewing its lease; 3 of 3 runs lost"),
    ("UnknownJob", "the worker w1 that received it has no job named 'mcp.gone'"),
    ("InvalidTaskData", "result: must be JSON (NaN is not)"),
    ("celery.exceptions.SoftTimeLimitExceeded", "SoftTimeLimitExceeded()"),
]

TOOL_FAILURES = [
    ("RuntimeError", "it broke"),
    ("ValueError", "bad month"),
    # The job's own code raised queuestore's error: still the tool's.
    ("queuestore.core.errors.InvalidTaskData", "input: too large"),
]


def failed(error_type: str, message: str) -> Task:
    store = InMemoryTaskStore()
    task = store.create("mcp.tool")
    store.update(task.id, status=TaskStatus.WORKING)
    error = TaskError(type=error_type, message=message)
    return store.update(task.id, status=TaskStatus.FAILED, error=error)


@pytest.mark.parametrize(("error_type", "message"), SERVER_FAILURES)
def test_a_task_the_server_failed_is_failed_with_its_error(error_type: str, message: str) -> None:
    task = failed(error_type, message)

    shown = wire.sep_task(task, 1000, detailed=True)
    assert shown["status"] == "failed"
    assert shown["error"] == {
        "code": types.INTERNAL_ERROR,
        "message": message,
        "data": {"type": error_type},
    }
    assert "result" not in shown
    assert wire.sep_task(task, 1000, detailed=False)["status"] == "failed"
    assert wire.legacy_task(task, 1000)["status"] == "failed"
    with pytest.raises(MCPError) as raised:
        wire.tool_result_payload(task)  # 2025-11-25 tasks/result, and a plain call
    assert (raised.value.error.code, raised.value.error.message) == (types.INTERNAL_ERROR, message)


@pytest.mark.parametrize(("error_type", "message"), TOOL_FAILURES)
def test_a_job_that_raised_is_a_completed_tool_error(error_type: str, message: str) -> None:
    task = failed(error_type, message)

    shown = wire.sep_task(task, 1000, detailed=True)
    assert shown["status"] == "completed"
    assert shown["result"] == {"content": [{"type": "text", "text": message}], "isError": True}
    assert "error" not in shown
    assert wire.legacy_task(task, 1000)["status"] == "failed"
    assert wire.tool_result_payload(task)["isError"] is True


def test_a_rejected_task_is_failed_with_its_reason() -> None:
    store = InMemoryTaskStore()
    task = store.create("mcp.tool")
    rejected = store.update(task.id, status=TaskStatus.REJECTED, status_message="not allowed")

    shown = wire.sep_task(rejected, 1000, detailed=True)
    assert shown["status"] == "failed"
    assert shown["error"] == {"code": types.INTERNAL_ERROR, "message": "not allowed"}
    assert "result" not in shown
