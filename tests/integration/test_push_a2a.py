"""A2A push notifications end to end: the SDK's client, a server, a worker, a deliverer.

Real processes throughout: an A2A server (``python integration_app.py PORT``)
whose tasks are ``tests.sleep`` jobs on a prefork Celery worker, a
``queuestore deliver`` process, the webhook receiver, PostgreSQL and Redis.
A push config set with a message, or on a running task, is kept in the store
and the deliverer sends its task's changes: status updates while it runs and
the whole task at the end, with the config's token and a Standard Webhooks
signature. The card advertises push; a refused URL is refused through the client.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types import (
    AgentCard,
    ListTaskPushNotificationConfigsRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import Parse, ParseDict
from standardwebhooks.webhooks import Webhook

from queuestore import TaskStatus
from tests.integration.harness import (
    PUSH,
    SIGNING_SECRET,
    STARTUP_TIMEOUT,
    TASK_TIMEOUT,
    Deployment,
    DeploymentFactory,
    LoggedProcess,
    Receiver,
    free_port,
    port_open,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.redis]

HERE = Path(__file__).resolve().parent
REFUSED_URL = "http://10.1.2.3/hook"
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED


def start_server(deployed: Deployment) -> str:
    """The A2A server of ``integration_app.py`` on the deployment, once it listens; its URL."""
    port = free_port()
    server = LoggedProcess.start(
        f"a2a server :{port}",
        [sys.executable, str(HERE / "integration_app.py"), str(port)],
        env=deployed.env(),
        cwd=deployed.root,
        log=deployed.root / f"a2a-server-{port}.log",
    )
    deployed.processes.append(server)
    wait_for(lambda: port_open(port), timeout=STARTUP_TIMEOUT, what="the A2A server", logs=[server])
    return f"http://127.0.0.1:{port}"


@dataclass
class Sent:
    """What the client did and was told."""

    card: AgentCard
    with_message: str
    """The task whose config came with its message."""
    registered: str
    """The task whose config was created once it ran."""
    created: TaskPushNotificationConfig
    listed: list[TaskPushNotificationConfig]
    refusals: list[InvalidParamsError]


def push_config(
    url: str, token: str, *, task_id: str = "", config_id: str = ""
) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(url=url, token=token, task_id=task_id, id=config_id)


def sleep_message(seconds: float) -> SendMessageRequest:
    request = SendMessageRequest(message=new_text_message(str(seconds), role=Role.ROLE_USER))
    request.configuration.return_immediately = True
    return request


async def send(url: str, hook: str, wait_working: Callable[[str], object]) -> Sent:
    """Start two tasks with push configs, and try two refused ones, through the SDK's client."""
    refusals: list[InvalidParamsError] = []
    async with httpx.AsyncClient(timeout=60) as http:
        client = await ClientFactory(
            ClientConfig(streaming=False, httpx_client=http)
        ).create_from_url(url)
        card = ParseDict(
            (await http.get(f"{url}/.well-known/agent-card.json")).json(),
            AgentCard(),
            ignore_unknown_fields=True,
        )
        try:
            first = sleep_message(1)
            first.configuration.task_push_notification_config.CopyFrom(
                push_config(hook, "token-of-the-message")
            )
            (with_message,) = [response.task.id async for response in client.send_message(first)]

            # Long enough to be still running when its config is created.
            (started,) = [r.task.id async for r in client.send_message(sleep_message(3))]
            await asyncio.to_thread(wait_working, started)
            created = await client.create_task_push_notification_config(
                push_config(hook, "token-of-the-config", task_id=started, config_id="hook")
            )
            try:
                await client.create_task_push_notification_config(
                    push_config(REFUSED_URL, "refused", task_id=started, config_id="refused")
                )
            except InvalidParamsError as exc:
                refusals.append(exc)
            refused_message = sleep_message(1)
            refused_message.configuration.task_push_notification_config.CopyFrom(
                push_config(REFUSED_URL, "refused")
            )
            try:
                [response async for response in client.send_message(refused_message)]
            except InvalidParamsError as exc:
                refusals.append(exc)
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=started)
            )
        finally:
            await client.close()
    return Sent(card, with_message, started, created, list(listed.configs), refusals)


Notification = tuple[dict[str, Any], StreamResponse]
"""A request the receiver logged, and its body as the SDK reads it."""
Received = dict[str, list[Notification]]


def notifications(hook: Receiver) -> Received:
    """The requests received, each once (by ``webhook-id``), by task, in the order received."""
    by_task: Received = {}
    seen: set[str] = set()
    for request in hook.requests():
        if request["headers"]["webhook-id"] in seen:
            continue  # at least once: a duplicate keeps its webhook-id
        seen.add(request["headers"]["webhook-id"])
        response = Parse(request["body"], StreamResponse())
        task_id = response.task.id or response.status_update.task_id
        by_task.setdefault(task_id, []).append((request, response))
    return by_task


def both_ended(hook: Receiver, task_ids: tuple[str, ...]) -> Received | None:
    """The notifications, once each task's completion is among them."""
    got = notifications(hook)
    for task_id in task_ids:
        if not any(response.task.status.state == COMPLETED for _, response in got.get(task_id, [])):
            return None
    return got


def summary(received: list[Notification]) -> list[tuple[str, int]]:
    """Each notification's payload and state."""
    out = []
    for _, response in received:
        kind = str(response.WhichOneof("payload"))
        status = response.task.status if kind == "task" else response.status_update.status
        out.append((kind, int(status.state)))
    return out


def test_a2a_push_configs_get_their_tasks_changes_from_the_deliverer(
    deployment: DeploymentFactory, receiver: Callable[..., Receiver]
) -> None:
    deployed = deployment("redis", "postgres", **PUSH)
    deployed.start_worker()
    deployed.start_deliverer()
    hook = receiver()
    url = start_server(deployed)

    sent = asyncio.run(
        send(url, hook.url, lambda task_id: deployed.wait_status(task_id, TaskStatus.WORKING))
    )
    received: Received = wait_for(
        lambda: both_ended(hook, (sent.with_message, sent.registered)),
        timeout=TASK_TIMEOUT,
        what="both tasks' completion at the receiver",
        logs=deployed.processes,
    )

    assert sent.card.capabilities.push_notifications
    # The config that came with the message reports every change, in order.
    assert summary(received[sent.with_message]) == [("status_update", WORKING), ("task", COMPLETED)]
    # The config created on the running task hears of its state then, and of the end.
    assert summary(received[sent.registered]) == [("status_update", WORKING), ("task", COMPLETED)]
    assert (sent.created.id, sent.created.task_id, sent.created.url) == (
        "hook",
        sent.registered,
        hook.url,
    )
    assert [(c.id, c.token) for c in sent.listed] == [("hook", "token-of-the-config")]

    verifier = Webhook(str(SIGNING_SECRET))
    for task_id, token, slept in (
        (sent.with_message, "token-of-the-message", 1),
        (sent.registered, "token-of-the-config", 3),
    ):
        for request, _ in received[task_id]:
            assert request["headers"]["x-a2a-notification-token"] == token
            verifier.verify(request["body"], request["headers"])  # raises if forged
        final = received[task_id][-1][1].task
        assert final.id == task_id
        assert final.artifacts[0].parts[0].data.struct_value.fields["slept"].number_value == slept
        assert json.loads(received[task_id][-1][0]["body"])["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )

    # A refused URL is refused through the client, the SDK's way, and never called.
    assert len(sent.refusals) == 2
    assert all("push notification URL" in refusal.message for refusal in sent.refusals)
    assert set(received) == {sent.with_message, sent.registered}
