"""Fixture tools of the MCP conformance suite's tasks scenarios (SEP-2663), as queuestore jobs.

    celery -A conformance_app worker           # this folder as working directory
    python conformance_app.py PORT             # streamable HTTP on 127.0.0.1:PORT
    node <conformance>/dist/index.js server --url http://127.0.0.1:PORT/mcp --scenario tasks-…

Names and arguments are the ones ``@modelcontextprotocol/conformance`` 0.2.0-alpha.12
sends (see docs/reference/mcp.md, "Conformance"). Configured by ``QUEUESTORE_*`` as any worker.
"""

from __future__ import annotations

import os
import sys
import time

from celery import Celery
from mcp.server import Server

from queuestore import Settings, TaskContext
from queuestore.mcp import McpTasks

settings = Settings()
app = settings.configure(Celery("conformance"))
app.conf.task_default_queue = os.environ.get("QUEUESTORE_TEST_QUEUE", "conformance")
queue = settings.make_queue(app)
tasks = McpTasks(app)


@tasks.tool(task_support="forbidden")
def greet(ctx: TaskContext, name: str) -> str:
    """Greet, synchronously."""
    return f"Hello, {name}!"


@tasks.tool(task_support="optional")
def slow_compute(ctx: TaskContext, seconds: float, label: str = "") -> str:
    """Sleep cooperatively (a cancel stops it), then report."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    return f"{label or 'slow_compute'} done after {seconds}s"


@tasks.tool(task_support="required")
def failing_job(ctx: TaskContext) -> str:
    """Fail after a second: a tool error (completed, isError)."""
    time.sleep(1)
    raise RuntimeError("failing_job failed on purpose")


@tasks.tool(task_support="required")
def protocol_error_job(ctx: TaskContext) -> float:
    """Return what JSON cannot carry: the server fails the task (InvalidTaskData), a
    protocol error (failed, with a JSON-RPC error)."""
    return float("nan")


@tasks.tool(task_support="optional")
def confirm_delete(ctx: TaskContext, filename: str) -> str:
    """Ask for confirmation, then report."""
    answer = ctx.request_input(f"Delete {filename}?")
    confirmed = answer.get("confirm") if isinstance(answer, dict) else answer
    return f"{filename} deleted" if confirmed else f"{filename} kept"


if __name__ == "__main__":
    import uvicorn

    server: Server = Server("queuestore-conformance", version="1")
    tasks.attach(server)
    uvicorn.run(
        server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning"
    )
