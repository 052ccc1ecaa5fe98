"""The app of ``bench/mcp_tasks.py``: an MCP server with one plain tool and two task tools.

    python mcp_app.py PORT            # the server (streamable HTTP on 127.0.0.1:PORT)
    celery -A mcp_app worker          # the worker (this folder as working directory)

Configured by ``QUEUESTORE_*``; ``QUEUESTORE_BENCH_QUEUE`` names the Celery queue.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import mcp_types as types
from celery import Celery
from mcp.server import Server, ServerRequestContext

from queuestore import Settings, TaskContext
from queuestore.mcp import McpTasks

settings = Settings()
app = settings.configure(Celery("mcp-bench"))
app.conf.task_default_queue = os.environ.get("QUEUESTORE_BENCH_QUEUE", "celery")
queue = settings.make_queue(app, beat=False)
tasks = McpTasks(app)


@tasks.tool(task_support="optional")
def noop(ctx: TaskContext) -> None:
    """Do nothing, on a worker."""


@tasks.tool(task_support="optional")
def nap(ctx: TaskContext, seconds: float) -> float:
    """Sleep, then return the wall-clock time the body ended."""
    time.sleep(seconds)
    return time.time()


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name="plain_noop", input_schema={"type": "object", "properties": {}})]
    )


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


def main() -> None:
    import uvicorn

    server: Server = Server("mcp-bench", on_list_tools=list_tools, on_call_tool=call_tool)
    tasks.attach(server)
    port = int(sys.argv[1])
    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
