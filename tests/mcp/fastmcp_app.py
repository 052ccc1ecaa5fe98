"""A FastMCP 4 server whose ``task=True`` tools run as queuestore jobs; also the worker's app.

python fastmcp_app.py PORT       # streamable HTTP on 127.0.0.1:PORT
celery -A fastmcp_app worker
"""

from __future__ import annotations

import asyncio
import os
import sys

from celery import Celery
from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig

from queuestore import Settings
from queuestore.mcp.fastmcp import QueuestoreTasks

settings = Settings()
app = settings.configure(Celery("fastmcp-tests"))
app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
queue = settings.make_queue(app)

mcp = FastMCP("fastmcp-tests")
mcp.add_extension(QueuestoreTasks(app))


@mcp.tool(task=True)
async def add(a: int, b: int) -> int:
    """Add two integers; the worker's pid proves where it ran."""
    return a + b


@mcp.tool(task=TaskConfig(mode="required"))
async def where(label: str) -> dict[str, object]:
    """Report the process that ran the body."""
    await asyncio.sleep(0.1)
    return {"label": label, "pid": os.getpid()}


@mcp.tool
async def inline(x: int) -> int:
    """A plain tool, run by FastMCP in the server."""
    return x * 2


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), show_banner=False)
