"""A ready A2A agent whose work runs on a Celery worker, on the embedded default.

One command starts both the worker and the server (SQLite and the filesystem
broker under ``.queuestore/``, nothing else to install or start)::

    uv run python -m workers.a2a_agent              # http://127.0.0.1:8000
    uv run python -m workers.a2a_agent --port 9000 --no-worker   # workers run elsewhere:
    uv run celery -A workers.a2a_agent worker --loglevel=INFO

Point any A2A client at the URL (the card is at ``/.well-known/agent-card.json``;
JSON-RPC at ``/``, HTTP+JSON beside it). Send ``research <topic>`` for a report
streamed section by section, ``deploy <service>`` for a question answered by a
second message (``yes``), anything else for an echo. The caller is named by an
``X-User`` header -- a stand-in for real authentication; see ``docs/howto/a2a-agent.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

from a2a.auth.user import User
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.types import AgentSkill
from starlette.requests import Request

from queuestore import Artifact, TaskContext, job
from queuestore.a2a import A2AServer, NamedUser, agent_card
from workers import app, queue


@job(app, name="examples.a2a_agent")
def agent(ctx: TaskContext, text: str) -> object:
    """The agent: ``research <topic>``, ``deploy <service>``, or an echo."""
    command, _, argument = text.strip().partition(" ")
    if command == "research":
        topic = argument or "queues"
        for number in range(1, 4):
            ctx.raise_if_cancelled()
            time.sleep(1)
            chunk = f"Section {number} on {topic}.\n"
            ctx.add_artifact(
                Artifact(artifact_id="report", name=f"{topic}.md", parts=[chunk]), append=True
            )
            ctx.progress(number / 3, f"wrote section {number} of 3")
        return {"topic": topic, "sections": 3}
    if command == "deploy":
        service = argument or "web"
        ctx.progress(0.3, f"built {service}")
        answer = ctx.request_input(f"Deploy {service} to production? (yes/no)")
        return {"service": service, "deployed": str(answer).strip().lower() in {"yes", "y"}}
    return f"echo: {text}"


class HeaderContextBuilder(DefaultServerCallContextBuilder):
    """Names the caller from ``X-User``: for a local example only, never for production."""

    def build_user(self, request: Request) -> User:
        return NamedUser(request.headers.get("x-user", ""))


def build(host: str, port: int) -> A2AServer:
    """The example's server: the card, the handler and the routes."""
    card = agent_card(
        f"http://{host}:{port}",
        name="queuestore example agent",
        description="Research, deploy or echo; the work runs on a Celery worker.",
        skills=[
            AgentSkill(
                id="agent",
                name="agent",
                description="research <topic> | deploy <service> | anything to echo",
                tags=["example"],
            )
        ],
    )
    return A2AServer(
        queue, job="examples.a2a_agent", card=card, context_builder=HeaderContextBuilder()
    )


@contextlib.contextmanager
def worker() -> Iterator[None]:
    """A Celery worker on this module, stopped when the server stops."""
    command = [sys.executable, "-m", "celery", "-A", "workers.a2a_agent", "worker"]
    process = subprocess.Popen([*command, "--loglevel=WARNING", "--concurrency=2"])
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-worker", action="store_true", help="do not start a worker")
    arguments = parser.parse_args()
    import uvicorn

    server = build(arguments.host, arguments.port)
    with contextlib.ExitStack() as stack:
        if not arguments.no_worker:
            stack.enter_context(worker())
        uvicorn.run(server.app(), host=arguments.host, port=arguments.port, log_level="info")


if __name__ == "__main__":
    main()
