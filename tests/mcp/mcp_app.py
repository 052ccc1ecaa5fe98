"""The MCP tests' app: the Celery worker loads it (``celery -A mcp_app``) and the server runs it.

    python mcp_app.py                      # stdio
    python mcp_app.py --http PORT [--stateless] [--auth] [--mcpserver]

Everything else comes from ``QUEUESTORE_*`` as for ``celery -A workers``;
``QUEUESTORE_TEST_QUEUE`` names the queue and ``QUEUESTORE_TEST_RECORDS`` is a
folder where the jobs leave one line per event, the proof of what a body did.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from celery import Celery
from mcp.server import MCPServer, Server
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from queuestore import Settings, TaskContext
from queuestore.mcp import McpTasks

# MCP_TEST_DATABASE_URL / MCP_TEST_BROKER_URL point a server at a database or broker that is down.
overrides = {
    name: os.environ[variable]
    for name, variable in (
        ("database_url", "MCP_TEST_DATABASE_URL"),
        ("broker_url", "MCP_TEST_BROKER_URL"),
    )
    if variable in os.environ
}
settings = Settings(**overrides)
app = settings.configure(Celery("mcp-tests"))
app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
queue = settings.make_queue(app)
tasks = McpTasks(app)
RECORDS = Path(os.environ["QUEUESTORE_TEST_RECORDS"])

TOKENS = {
    "token-alice": AccessToken(token="token-alice", client_id="alice", scopes=[]),
    "token-bob": AccessToken(token="token-bob", client_id="bob", scopes=[]),
    "token-carol": AccessToken(token="token-carol", client_id="app", scopes=[], subject="carol"),
    "token-dave": AccessToken(token="token-dave", client_id="app", scopes=[], subject="dave"),
}
"""Bearer tokens the ``--auth`` server accepts: two clients, and two users of one client."""


def record(ctx: TaskContext, event: str) -> None:
    """Append ``<attempt> <event> <pid>`` to the task's record file."""
    with (RECORDS / ctx.task_id).open("a") as out:
        out.write(f"{ctx.attempt} {event} {os.getpid()}\n")


@tasks.tool(task_support="optional")
def add(ctx: TaskContext, a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tasks.tool(task_support="required")
def sleeper(ctx: TaskContext, seconds: float) -> dict[str, float]:
    """Sleep cooperatively, reporting progress, recording how the body ended."""
    record(ctx, "start")
    ctx.progress(0.0, "sleeping")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.05)
    except BaseException as exc:
        record(ctx, f"stopped:{type(exc).__name__}")
        raise
    record(ctx, "end")
    return {"slept": seconds}


@tasks.tool(task_support="optional")
def ask(ctx: TaskContext, question: str) -> str:
    """Ask the caller a question and echo the answer."""
    answer = ctx.request_input(question)
    return f"answer: {answer}"


@tasks.tool(task_support="optional")
def boom(ctx: TaskContext, message: str) -> None:
    """Fail with ``message``."""
    raise ValueError(message)


@tasks.tool(task_support="forbidden")
def ping(ctx: TaskContext) -> str:
    """Answer from a worker, never as a task."""
    return "pong"


class StaticTokens:
    """A token verifier over :data:`TOKENS`."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return TOKENS.get(token)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--auth", action="store_true")
    parser.add_argument("--mcpserver", action="store_true")
    options = parser.parse_args()
    auth = None
    if options.auth:
        base = f"http://127.0.0.1:{options.http}"
        auth = AuthSettings(issuer_url=base, resource_server_url=f"{base}/mcp")
    verifier = StaticTokens() if options.auth else None
    if options.mcpserver:
        server: Server | MCPServer = MCPServer(
            "mcp-tests",
            extensions=[tasks.extension],
            auth=auth,
            token_verifier=verifier,
            lifespan=tasks.lifespan,
        )
    else:
        server = Server("mcp-tests", lifespan=tasks.lifespan)
    tasks.attach(server)
    if options.http is None:
        import anyio
        from mcp.server.stdio import stdio_server

        assert isinstance(server, Server)

        async def serve_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(serve_stdio)
        return
    import uvicorn

    if isinstance(server, MCPServer):
        http = server.streamable_http_app(stateless_http=options.stateless, host="127.0.0.1")
    else:
        http = server.streamable_http_app(
            stateless_http=options.stateless, host="127.0.0.1", auth=auth, token_verifier=verifier
        )
    uvicorn.run(http, host="127.0.0.1", port=options.http, log_level="warning")


if __name__ == "__main__":
    main()
