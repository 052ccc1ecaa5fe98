"""What the A2A tests share: deployments with a real worker, servers, the SDK client.

Each module that asks for ``pg`` gets a fresh PostgreSQL database, a Redis queue
of its own and one prefork worker on ``a2a_app``; servers are ``python
a2a_app.py PORT`` processes on free loopback ports. Every process is stopped
when its module ends. Processes come from the integration harness.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.server.context import ServerCallContext
from a2a.types import Role, Task, TaskState, TaskStatus

from queuestore.a2a import NamedUser
from tests.integration.harness import Deployment, LoggedProcess, free_port, port_open, wait_for

HERE = Path(__file__).resolve().parent
APP = HERE / "a2a_app.py"


class Server:
    """An A2A server process on a loopback port."""

    def __init__(self, process: LoggedProcess, port: int) -> None:
        self.process = process
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class A2ADeployment:
    """A queuestore deployment plus the A2A servers and the worker the tests start on it."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    def start_worker(self) -> LoggedProcess:
        return self.deployment.start_worker(app="a2a_app", cwd=HERE)

    def start_server(self, port: int | None = None) -> Server:
        """``a2a_app.py PORT``, answering its agent card."""
        port = port or free_port()
        process = LoggedProcess.start(
            f"a2a server :{port}",
            [sys.executable, str(APP), str(port)],
            env=self.deployment.env(),
            cwd=HERE,
            log=self.deployment.root / f"server-{port}-{len(self.deployment.processes)}.log",
        )
        self.deployment.processes.append(process)
        wait_for(lambda: port_open(port), timeout=60, what="the A2A server", logs=[process])
        return Server(process, port)

    def stop(self, server: Server) -> None:
        server.process.stop()
        self.deployment.processes.remove(server.process)

    def logs(self) -> str:
        return self.deployment.logs()


@asynccontextmanager
async def a2a_client(
    url: str, *, user: str = "alice", binding: str = "JSONRPC", streaming: bool = False
) -> AsyncIterator[Client]:
    """The a2a-sdk client from ``ClientFactory``, as ``user``, on one protocol binding."""
    headers = {"X-User": user} if user else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
        )
        client = await ClientFactory(config).create_from_url(url)
        try:
            yield client
        finally:
            await client.close()


def call_context(user: str = "alice", tenant: str = "") -> ServerCallContext:
    """The context a request of ``user`` reaches the handler and the store with."""
    return ServerCallContext(user=NamedUser(user), tenant=tenant)


T = TypeVar("T")

ALICE = call_context("alice")
BOB = call_context("bob")
SUBMITTED = TaskState.TASK_STATE_SUBMITTED
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED


def a2a_task(
    task_id: str,
    state: int = SUBMITTED,
    *,
    context_id: str = "ctx",
    text: str = "hi",
    message: str | None = None,
) -> Task:
    """An SDK task with one user message ``text``, and the agent's ``message`` as its status."""
    task = Task(
        id=task_id,
        context_id=context_id,
        status=TaskStatus(state=state),
        history=[new_text_message(text, role=Role.ROLE_USER)],
    )
    if message is not None:
        task.status.message.CopyFrom(new_text_message(message, role=Role.ROLE_AGENT))
    return task


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run an async store call to its end from a plain test."""
    return asyncio.run(coroutine)
