"""An MCP server whose tools run as queuestore jobs, on the embedded default.

One command, nothing else to install or start (SQLite and the filesystem
broker live under ``.queuestore/``; ``--worker`` runs a Celery worker beside
the server, its log in ``.queuestore/mcp-example-worker.log``)::

    python -m queuestore.mcp.example --http 8000 --worker   # no --http: stdio

or the worker in a terminal of its own, as in production::

    celery -A queuestore.mcp.example worker --loglevel=INFO
    python -m queuestore.mcp.example --http 8000

Then point any MCP client at ``http://127.0.0.1:8000/mcp`` (see ``docs/howto/mcp-task-tools.md``).
The same module is the worker's app and the server's: both register the jobs.
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import ExitStack

import anyio
from celery import Celery
from mcp.server import Server

from queuestore import Settings, TaskContext
from queuestore.mcp.server_tasks import McpTasks
from queuestore.run.subprocesses import celery_process

settings = Settings()
app = settings.configure(Celery("queuestore-mcp-example"))
queue = settings.make_queue(app)
tasks = McpTasks(app)


@tasks.tool(task_support="optional")
def slow_add(ctx: TaskContext, a: int, b: int, seconds: float = 1.0) -> int:
    """Add two numbers, slowly."""
    ctx.progress(0.0, "adding")
    time.sleep(seconds)
    return a + b


@tasks.tool(task_support="required")
def countdown(ctx: TaskContext, seconds: int = 30) -> dict[str, int]:
    """Count down, reporting progress each second; cancel it to stop it."""
    for left in range(seconds, 0, -1):
        ctx.progress(1 - left / seconds, f"{left}s left")
        time.sleep(1)
        ctx.raise_if_cancelled()
    return {"counted": seconds}


@tasks.tool(task_support="optional")
def greet(ctx: TaskContext) -> str:
    """Ask the user's name, then greet them."""
    name = ctx.request_input("What is your name?")
    return f"Hello, {name}!"


@tasks.tool(task_support="forbidden")
def ping(ctx: TaskContext) -> str:
    """Answer pong from a worker, never as a task."""
    return "pong"


def build_server() -> Server:
    """The low-level server with the task tools and methods of both protocol eras."""
    server: Server = Server("queuestore-example", version="1", lifespan=tasks.lifespan)
    tasks.attach(server)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on this port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--worker", action="store_true", help="run a Celery worker beside the server"
    )
    arguments = parser.parse_args()
    with ExitStack() as stack:
        if arguments.worker:
            home = settings.home.resolve()
            home.mkdir(parents=True, exist_ok=True)
            stack.enter_context(
                celery_process(
                    "queuestore.mcp.example",
                    "worker",
                    "--pool=prefork",
                    "--concurrency=2",
                    "--loglevel=INFO",
                    env=os.environ | {"QUEUESTORE_HOME": str(home)},
                    cwd=home,
                    log=home / "mcp-example-worker.log",
                )
            )
        _serve(build_server(), arguments.http, arguments.host)


def _serve(server: Server, port: int | None, host: str) -> None:
    if port is None:
        from mcp.server.stdio import stdio_server

        async def serve_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(serve_stdio)
        return
    import uvicorn

    uvicorn.run(server.streamable_http_app(host=host), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
