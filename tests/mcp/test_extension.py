"""The tasks extension (SEP-2663, 2026-07-28) with the SDK's client extension API.

Real server processes (low-level ``Server`` and ``MCPServer``, stateful and
stateless HTTP), a real worker, PostgreSQL; the same tasks seen from both eras.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from queuestore.mcp.client import (
    CreatedTask,
    TaskState,
    cancel_task,
    get_task,
    poll_task,
    update_task,
)
from queuestore.mcp.wire import TaskIdParams
from tests.mcp.mcp_support import McpDeployment, Server
from tests.mcp.support import legacy, modern

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def http(pg: McpDeployment) -> Iterator[Server]:
    server = pg.start_server("--auth")
    yield server
    server.process.stop()


@pytest.fixture(scope="module")
def mcpserver(pg: McpDeployment) -> Iterator[Server]:
    server = pg.start_server("--auth", "--mcpserver")
    yield server
    server.process.stop()


async def wait_status(client: object, task_id: str, status: str, timeout: float = 30) -> TaskState:
    deadline = time.monotonic() + timeout
    while True:
        state = await get_task(client.session, task_id)  # type: ignore[attr-defined]
        if state.status == status:
            return state
        assert time.monotonic() < deadline, f"task {task_id} is {state.status}, never {status}"
        await anyio.sleep(0.1)


@pytest.fixture(params=["lowlevel", "mcpserver"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each test of the flow runs on the low-level Server and on MCPServer."""
    return request.getfixturevalue("http" if request.param == "lowlevel" else "mcpserver")


async def test_create_and_poll(server: Server) -> None:
    async with modern(server.url, token="token-alice") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.extensions == {"io.modelcontextprotocol/tasks": {}}
        transparent = await client.call_tool("add", {"a": 2, "b": 40})
        assert transparent.structured_content == {"result": 42}

        created = await client.session.call_tool("add", {"a": 1, "b": 2}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
        assert created.status == "working"
        assert created.ttl_ms == 3_600_000
        assert created.poll_interval_ms == 200
        done = await poll_task(client.session, created.task_id)
        assert done.status == "completed"
        assert done.result is not None
        assert done.result["structuredContent"] == {"result": 3}

        failing = await client.session.call_tool("boom", {"message": "bad"}, allow_claimed=True)
        failed = await poll_task(client.session, failing.task_id)  # type: ignore[union-attr]
        # A tool error is a completed call whose result is isError (SEP-2663).
        assert failed.status == "completed"
        assert failed.result == {"content": [{"type": "text", "text": "bad"}], "isError": True}


async def test_input_requests_are_answered_by_update(server: Server) -> None:
    async with modern(server.url, token="token-alice") as client:
        asking = await client.session.call_tool("ask", {"question": "Name?"}, allow_claimed=True)
        assert isinstance(asking, CreatedTask)
        state = await wait_status(client, asking.task_id, "input_required")
        assert state.input_requests is not None
        [(key, request)] = state.input_requests.items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Name?"
        await update_task(client.session, asking.task_id, {"unknown-key": {"action": "accept"}})
        assert (await get_task(client.session, asking.task_id)).status == "input_required"
        answer = {key: {"action": "accept", "content": {"answer": "Ada"}}}
        await update_task(client.session, asking.task_id, answer)
        answered = await poll_task(client.session, asking.task_id)
        assert answered.result is not None
        assert answered.result["structuredContent"] == {"result": "answer: Ada"}


async def test_cancel_stops_the_job(server: Server, pg: McpDeployment) -> None:
    async with modern(server.url, token="token-alice") as client:
        sleeping = await client.session.call_tool("sleeper", {"seconds": 60}, allow_claimed=True)
        assert isinstance(sleeping, CreatedTask)
        await wait_status(client, sleeping.task_id, "working")
        deadline = time.monotonic() + 30
        while not pg.deployment.events_of(sleeping.task_id):
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
        await cancel_task(client.session, sleeping.task_id)
        assert (await get_task(client.session, sleeping.task_id)).status == "cancelled"
        await cancel_task(client.session, sleeping.task_id)  # acknowledged again
        deadline = time.monotonic() + 10
        while len(pg.deployment.events_of(sleeping.task_id)) < 2:
            assert time.monotonic() < deadline, pg.logs()
            await anyio.sleep(0.05)


async def test_protocol_errors(server: Server) -> None:
    async with modern(server.url, token="token-alice") as client:
        for call in (get_task, cancel_task):
            with pytest.raises(MCPError) as unknown:
                await call(client.session, "no-such-task")
            assert unknown.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as removed:
            await client.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert removed.value.error.code == types.METHOD_NOT_FOUND


async def test_clients_without_the_extension(http: Server) -> None:
    async with modern(http.url, token="token-alice", declare=False) as client:
        plain = await client.call_tool("add", {"a": 5, "b": 5})
        assert plain.structured_content == {"result": 10}
        with pytest.raises(MCPError) as required:
            await client.call_tool("sleeper", {"seconds": 1})
        assert required.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert required.value.error.data == {
            "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        }
        with pytest.raises(MCPError) as undeclared:
            await get_task(client.session, "any")
        assert undeclared.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_one_task_in_both_eras(http: Server) -> None:
    async with (
        legacy(http.url, token="token-alice") as old,
        modern(http.url, token="token-alice") as new,
        modern(http.url, token="token-bob") as stranger,
    ):
        from_legacy = await old.create("add", {"a": 3, "b": 4})
        seen = await poll_task(new.session, from_legacy.task_id)
        assert seen.result is not None
        assert seen.result["structuredContent"] == {"result": 7}

        from_modern = await new.session.call_tool("add", {"a": 1, "b": 1}, allow_claimed=True)
        assert isinstance(from_modern, CreatedTask)
        result = await old.result(from_modern.task_id)
        assert result.structured_content == {"result": 2}
        assert from_modern.task_id in {task.task_id for task in (await old.list()).tasks}

        with pytest.raises(MCPError) as foreign:
            await get_task(stranger.session, from_modern.task_id)
        assert foreign.value.error.code == types.INVALID_PARAMS


async def test_stateless_http(pg: McpDeployment) -> None:
    server = pg.start_server("--stateless")
    async with legacy(server.url) as tasks:
        created = await tasks.create("add", {"a": 9, "b": 9})
        assert (await tasks.result(created.task_id)).structured_content == {"result": 18}
        assert (await tasks.get(created.task_id)).status == "completed"
    async with modern(server.url) as client:
        assert (await client.call_tool("add", {"a": 1, "b": 0})).structured_content == {"result": 1}


async def test_a_legacy_waiter_sees_an_answer_given_in_the_other_era(http: Server) -> None:
    """A 2025-11-25 client without elicitation waits; a 2026-07-28 client answers."""
    async with (
        legacy(http.url, token="token-alice") as old,
        modern(http.url, token="token-alice") as new,
    ):
        created = await old.create("ask", {"question": "Size?"})
        results: list[types.CallToolResult] = []

        async def wait_for_result() -> None:
            results.append(await old.result(created.task_id))

        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_result)
            state = await wait_status(new, created.task_id, "input_required")
            assert state.input_requests is not None
            [key] = state.input_requests
            await update_task(
                new.session,
                created.task_id,
                {key: {"action": "accept", "content": {"answer": "L"}}},
            )
        assert results[0].structured_content == {"result": "answer: L"}


class DecoyParams(TaskIdParams):
    decoy: str


class MisroutedGet(types.Request[DecoyParams, Literal["tasks/get"]]):
    """A ``tasks/get`` whose ``Mcp-Name`` header names another task than its params."""

    method: Literal["tasks/get"] = "tasks/get"
    params: DecoyParams
    name_param = "decoy"


async def test_a_routing_header_naming_another_task_is_refused(http: Server) -> None:
    async with modern(http.url, token="token-alice") as client:
        created = await client.session.call_tool("add", {"a": 1, "b": 1}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
        request = MisroutedGet(params=DecoyParams(task_id=created.task_id, decoy="another"))
        with pytest.raises(MCPError) as misrouted:
            await client.session.send_request(request, TaskState)
        assert misrouted.value.error.code == types.HEADER_MISMATCH
        assert (await get_task(client.session, created.task_id)).task_id == created.task_id
