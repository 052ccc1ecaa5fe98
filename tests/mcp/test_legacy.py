"""2025-11-25 tasks with the real mcp client against real server and worker processes.

The store is PostgreSQL, the broker Redis; the servers are ``mcp_app.py``
processes over stdio and streamable HTTP on loopback ports.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from queuestore import TaskStatus
from queuestore.mcp import RELATED_TASK
from queuestore.mcp.client import LegacyTasks
from tests.mcp.mcp_support import McpDeployment, Server, free_port
from tests.mcp.support import legacy

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def http(pg: McpDeployment) -> Iterator[Server]:
    """A stateful streamable-HTTP server with bearer-token auth."""
    server = pg.start_server("--auth")
    yield server
    server.process.stop()


async def wait_status(tasks: LegacyTasks, task_id: str, status: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (await tasks.get(task_id)).status != status:
        assert time.monotonic() < deadline, f"task {task_id} never became {status}"
        await anyio.sleep(0.1)


async def expired(tasks: LegacyTasks, task_id: str, *, within: float) -> bool:
    """Whether ``tasks/get`` answers -32602 for the task before ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            await tasks.get(task_id)
        except MCPError as error:
            return error.error.code == types.INVALID_PARAMS
        await anyio.sleep(0.2)
    return False


async def test_stdio_create_poll_and_result(pg: McpDeployment) -> None:
    async with legacy(pg.stdio()) as tasks:
        listed = await tasks.session.list_tools()
        support = {
            tool.name: tool.execution.task_support for tool in listed.tools if tool.execution
        }
        assert support == {
            "add": "optional",
            "sleeper": "required",
            "ask": "optional",
            "boom": "optional",
            "ping": "forbidden",
        }
        schema = next(tool for tool in listed.tools if tool.name == "add").input_schema
        assert schema["required"] == ["a", "b"]
        assert "ctx" not in schema["properties"]

        created = await tasks.create("add", {"a": 20, "b": 22}, ttl_ms=60_000)
        assert created.status == "working"
        assert created.ttl == 60_000
        assert created.poll_interval == 200
        longest = await tasks.create("add", {"a": 0, "b": 0}, ttl_ms=10**12)
        assert longest.ttl == 86_400_000  # QUEUESTORE_MCP_MAX_TTL_MS
        await wait_status(tasks, created.task_id, "completed")
        result = await tasks.result(created.task_id)
        assert result.structured_content == {"result": 42}
        assert result.content[0].text == "42"  # type: ignore[union-attr]
        assert not result.is_error
        assert result.meta == {RELATED_TASK: {"taskId": created.task_id}}


async def test_capability_and_plain_calls(http: Server) -> None:
    async with legacy(http.url, token="token-alice") as tasks:
        info = tasks.session.initialize_result
        assert info is not None
        assert info.capabilities.tasks is not None
        assert info.capabilities.tasks.requests is not None
        plain = await tasks.session.call_tool("add", {"a": 1, "b": 2})
        assert plain.structured_content == {"result": 3}
        assert (await tasks.session.call_tool("ping", {})).structured_content == {"result": "pong"}
        with pytest.raises(MCPError) as required:
            await tasks.session.call_tool("sleeper", {"seconds": 1})
        assert required.value.error.code == types.METHOD_NOT_FOUND
        with pytest.raises(MCPError) as forbidden:
            await tasks.create("ping", {})
        assert forbidden.value.error.code == types.METHOD_NOT_FOUND


async def test_result_blocks_until_the_worker_finishes(http: Server, pg: McpDeployment) -> None:
    statuses: list[types.TaskStatusNotificationParams] = []
    async with legacy(http.url, token="token-alice", statuses=statuses) as tasks:
        created = await tasks.create("sleeper", {"seconds": 1.5})
        started = time.monotonic()
        result = await tasks.result(created.task_id)
        waited = time.monotonic() - started
        assert result.structured_content == {"slept": 1.5}
        assert waited >= 1.0
        assert pg.deployment.events_of(created.task_id) == ["1 start", "1 end"]
        await anyio.sleep(0.5)
    seen = [(status.task_id, status.status) for status in statuses]
    # Both changes were written by the worker process, not this server.
    assert (created.task_id, "working") in seen
    assert seen[-1] == (created.task_id, "completed")


async def test_list_pages_with_the_stores_cursors(http: Server) -> None:
    async with legacy(http.url, token="token-bob") as tasks:
        made = {(await tasks.create("add", {"a": n, "b": n})).task_id for n in range(5)}
        listed: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await tasks.list(cursor)
            pages += 1
            assert len(page.tasks) <= 2
            listed += [task.task_id for task in page.tasks]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert made <= set(listed)
        assert len(listed) == len(set(listed))
        assert pages >= 3
        with pytest.raises(MCPError) as bad:
            await tasks.list("not-a-cursor")
        assert bad.value.error.code == types.INVALID_PARAMS


async def test_cancel_stops_a_working_job(http: Server, pg: McpDeployment) -> None:
    statuses: list[types.TaskStatusNotificationParams] = []
    async with legacy(http.url, token="token-alice", statuses=statuses) as tasks:
        created = await tasks.create("sleeper", {"seconds": 60})
        await wait_status(tasks, created.task_id, "working")
        deadline = time.monotonic() + 30
        while not pg.deployment.events_of(created.task_id):
            assert time.monotonic() < deadline, pg.logs()
            await anyio.sleep(0.05)
        cancelled = await tasks.cancel(created.task_id)
        assert cancelled.status == "cancelled"
        deadline = time.monotonic() + 10
        while len(pg.deployment.events_of(created.task_id)) < 2:
            assert time.monotonic() < deadline, f"the job did not stop{pg.logs()}"
            await anyio.sleep(0.05)
        assert pg.deployment.events_of(created.task_id)[1].startswith("1 stopped:")
        await anyio.sleep(1.0)
        assert (await tasks.get(created.task_id)).status == "cancelled"
        assert pg.deployment.queue.store.get(created.task_id).status is TaskStatus.CANCELLED
        with pytest.raises(MCPError) as again:
            await tasks.cancel(created.task_id)
        assert again.value.error.code == types.INVALID_PARAMS
        result = await tasks.result(created.task_id)
        assert result.is_error
    assert (created.task_id, "cancelled") in [(s.task_id, s.status) for s in statuses]


async def test_input_required_is_asked_and_answered(http: Server) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def answer(ctx: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async with legacy(http.url, token="token-alice", elicitation=answer) as tasks:
        created = await tasks.create("ask", {"question": "Favourite colour?"})
        await wait_status(tasks, created.task_id, "input_required")
        assert (await tasks.get(created.task_id)).status_message == "Favourite colour?"
        result = await tasks.result(created.task_id)
        assert result.structured_content == {"result": "answer: blue"}
        assert len(asked) == 1
        assert asked[0].message == "Favourite colour?"
        assert asked[0].meta is not None
        assert asked[0].meta[RELATED_TASK] == {"taskId": created.task_id}  # type: ignore[literal-required]


async def test_owners_are_isolated(http: Server) -> None:
    async with (
        legacy(http.url, token="token-carol") as carol,
        legacy(http.url, token="token-dave") as dave,
    ):
        mine = await carol.create("add", {"a": 1, "b": 1})
        for call in (dave.get, dave.result, dave.cancel):
            with pytest.raises(MCPError) as foreign:
                await call(mine.task_id)
            assert foreign.value.error.code == types.INVALID_PARAMS
            assert "not found" in foreign.value.error.message
        assert mine.task_id not in {task.task_id for task in (await dave.list()).tasks}
        assert (await carol.result(mine.task_id)).structured_content == {"result": 2}


async def test_unauthenticated_http_is_refused(http: Server) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - the transport fails with 401
        async with legacy(http.url, token="forged"):
            pass


async def test_errors(http: Server) -> None:
    async with legacy(http.url, token="token-alice") as tasks:
        for call in (tasks.get, tasks.result, tasks.cancel):
            with pytest.raises(MCPError) as unknown:
                await call("no-such-task")
            assert unknown.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as malformed:
            await tasks.dispatcher.send_raw_request("tasks/get", {"id": 3})
        assert malformed.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as bad_task:
            await tasks.dispatcher.send_raw_request(
                "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}, "task": {"ttl": "x"}}
            )
        assert bad_task.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError) as bad_arguments:
            await tasks.create("add", {"a": "x"})
        assert bad_arguments.value.error.code == types.INVALID_PARAMS
        assert "'add'" in bad_arguments.value.error.message
        with pytest.raises(MCPError) as unknown_tool:
            await tasks.create("no_such_tool", {})
        assert unknown_tool.value.error.code == types.METHOD_NOT_FOUND

        failed = await tasks.create("boom", {"message": "it broke"})
        result = await tasks.result(failed.task_id)
        assert result.is_error
        assert [block.text for block in result.content] == ["it broke"]  # type: ignore[union-attr]
        assert (await tasks.get(failed.task_id)).status == "failed"

        short = await tasks.create("add", {"a": 1, "b": 2}, ttl_ms=1)
        assert short.ttl == 1
        # The worker's beat runs the janitor every second.
        assert await expired(tasks, short.task_id, within=30), "the expired task is still served"


async def test_store_outage_is_an_internal_error_without_details(pg: McpDeployment) -> None:
    dead = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gone"
    async with legacy(pg.stdio(MCP_TEST_DATABASE_URL=dead)) as tasks:
        for attempt in (tasks.get("some-task"), tasks.create("add", {"a": 1, "b": 2})):
            with pytest.raises(MCPError) as fault:
                await attempt
            assert fault.value.error.code == types.INTERNAL_ERROR
            assert fault.value.error.message == "task store unavailable"


async def test_a_task_created_while_the_broker_is_down_still_runs(pg: McpDeployment) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with legacy(pg.stdio(MCP_TEST_BROKER_URL=dead)) as cut_off:
        created = await cut_off.create("add", {"a": 5, "b": 6})
        assert created.status == "working"
    # The worker's beat publishes what the server could not (the sweep).
    async with legacy(pg.stdio()) as tasks:
        assert (await tasks.result(created.task_id)).structured_content == {"result": 11}


async def test_a_requested_ttl_outside_the_schema_is_refused(http: Server) -> None:
    """``task.ttl`` is an integer of milliseconds: a positive one is granted, others refused."""
    async with legacy(http.url, token="token-bob") as tasks:
        before = await tasks.list()
        for ttl in (0, -1, 1.5, 0.4, True, "5", [1]):
            with pytest.raises(MCPError) as refused:
                await tasks.dispatcher.send_raw_request(
                    "tools/call",
                    {"name": "add", "arguments": {"a": 1, "b": 2}, "task": {"ttl": ttl}},
                )
            assert refused.value.error.code == types.INVALID_PARAMS, ttl
            assert "ttl" in refused.value.error.message, refused.value.error.message
        after = await tasks.list()
        assert after.tasks[:1] == before.tasks[:1]  # nothing was created
        whole = await tasks.dispatcher.send_raw_request(
            "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}, "task": {"ttl": 2500.0}}
        )
        assert types.CreateTaskResult.model_validate(whole, by_name=False).task.ttl == 2500
        unset = await tasks.dispatcher.send_raw_request(
            "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}, "task": {"ttl": None}}
        )
        assert types.CreateTaskResult.model_validate(unset, by_name=False).task.ttl == 3_600_000
        huge = await tasks.create("add", {"a": 1, "b": 2}, ttl_ms=10**30)
        assert huge.ttl == 86_400_000  # cut to QUEUESTORE_MCP_MAX_TTL_MS
