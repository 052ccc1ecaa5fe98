"""A2A on the embedded default: an SQLite file and Celery's filesystem broker, no server.

The same client, server and job as on PostgreSQL, once: a blocking send,
get, a streamed send, a cancel that stops the job, and list.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from a2a.helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    TaskState,
)

from queuestore import TaskStatus
from tests.a2a.a2a_support import A2ADeployment, Server, a2a_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture(scope="module")
def server(embedded: A2ADeployment) -> Iterator[Server]:
    started = embedded.start_server()
    yield started
    embedded.stop(started)


async def test_the_agent_runs_on_the_embedded_default(
    embedded: A2ADeployment, server: Server
) -> None:
    async with (
        a2a_client(server.url) as client,
        a2a_client(server.url, binding="HTTP+JSON", streaming=True) as streaming,
    ):
        request = SendMessageRequest(message=new_text_message("echo local", role=Role.ROLE_USER))
        (response,) = [response async for response in client.send_message(request)]
        got = await client.get_task(GetTaskRequest(id=response.task.id))
        streamed = [
            event.WhichOneof("payload")
            async for event in streaming.send_message(
                SendMessageRequest(message=new_text_message("echo again", role=Role.ROLE_USER))
            )
        ]

        slow = SendMessageRequest(message=new_text_message("slow 30", role=Role.ROLE_USER))
        slow.configuration.return_immediately = True
        (started,) = [response async for response in client.send_message(slow)]
        embedded.deployment.wait_status(started.task.id, TaskStatus.WORKING)
        cancelled = await client.cancel_task(CancelTaskRequest(id=started.task.id))
        deadline = time.monotonic() + 15
        while not any("stopped:" in e for e in embedded.deployment.events_of(started.task.id)):
            assert time.monotonic() < deadline, embedded.logs()
            time.sleep(0.1)
        listed = await client.list_tasks(ListTasksRequest())

    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "echo: local"
    assert streamed[0] == "task"
    assert streamed[-1] == "status_update"
    assert "artifact_update" in streamed
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert embedded.deployment.queue.store.get(started.task.id).status is TaskStatus.CANCELLED
    assert listed.total_size == 3
