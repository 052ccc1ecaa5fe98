"""The A2A tests' app: the Celery worker loads it (``celery -A a2a_app``) and the server runs it.

    python a2a_app.py PORT

Everything else comes from ``QUEUESTORE_*`` as for ``celery -A workers``;
``QUEUESTORE_TEST_QUEUE`` names the queue and ``QUEUESTORE_TEST_RECORDS`` is a
folder where the job leaves one line per event, the proof of what a body did.
The caller is named by the ``X-User`` header (and the REST tenant prefix):
a stand-in for real authentication.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from a2a.auth.user import User
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.types import AgentSkill
from celery import Celery
from starlette.requests import Request

from queuestore import Artifact, Settings, TaskContext, job
from queuestore.a2a import A2AServer, NamedUser, agent_card

settings = Settings()
app = settings.configure(Celery("a2a-tests"))
app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
queue = settings.make_queue(app)
RECORDS = Path(os.environ["QUEUESTORE_TEST_RECORDS"])


def record(ctx: TaskContext, event: str) -> None:
    """Append ``<attempt> <event> <pid>`` to the task's record file."""
    with (RECORDS / ctx.task_id).open("a") as out:
        out.write(f"{ctx.attempt} {event} {os.getpid()}\n")


@job(app, name="agent.main")
def agent(ctx: TaskContext, text: str) -> object:
    """``echo X``: an artifact and X back; ``slow N``: N seconds of progress;
    ``burst N``: N progress reports in quick succession, each written; ``ask``: a question,
    then a greeting; ``fail``: an exception."""
    command, _, argument = text.partition(" ")
    if command == "slow":
        record(ctx, "start")
        seconds = float(argument or 30)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                left = deadline - time.monotonic()
                ctx.progress(min(1.0, 1 - left / seconds), f"{left:.0f}s left")
                ctx.raise_if_cancelled()
                time.sleep(0.1)
        except BaseException as exc:
            record(ctx, f"stopped:{type(exc).__name__}")
            raise
        record(ctx, "end")
        return {"slept": seconds}
    if command == "burst":
        reports = int(argument or 200)
        for done in range(1, reports + 1):
            ctx.progress(done / reports, f"{done} of {reports}")
            ctx.flush()  # each report its own version
            time.sleep(0.005)
        return {"reports": reports}
    if command == "ask":
        name = ctx.request_input("What is your name?")
        return f"Hello, {name}!"
    if command == "fail":
        raise RuntimeError("asked to fail")
    ctx.progress(0.5, "echoing")
    ctx.add_artifact(Artifact(artifact_id="echo", name="echo", parts=[f"echo: {argument}"]))
    return {"echoed": argument}


class HeaderContextBuilder(DefaultServerCallContextBuilder):
    """Test-only authentication: the user is whatever ``X-User`` says."""

    def build_user(self, request: Request) -> User:
        return NamedUser(request.headers.get("x-user", ""))


def build(port: int) -> A2AServer:
    card = agent_card(
        f"http://127.0.0.1:{port}",
        name="queuestore-tests",
        description="the A2A tests' agent",
        skills=[AgentSkill(id="main", name="main", description="echo, slow, ask", tags=["test"])],
    )
    return A2AServer(
        queue,
        job="agent.main",
        card=card,
        context_builder=HeaderContextBuilder(),
        interrupted_task_timeout=5.0,
    )


if __name__ == "__main__":
    import uvicorn

    port = int(sys.argv[1])
    uvicorn.run(build(port).app(), host="127.0.0.1", port=port, log_level="warning")
