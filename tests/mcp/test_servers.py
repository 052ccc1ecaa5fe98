"""Durability across MCP server processes: restarts, replicas, and the embedded default."""

from __future__ import annotations

import time

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from queuestore.mcp.client import CreatedTask, poll_task
from tests.mcp.mcp_support import McpDeployment
from tests.mcp.support import legacy, modern

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.mark.postgres
async def test_a_restarted_server_still_serves_the_running_task(pg: McpDeployment) -> None:
    first = pg.start_server("--auth")
    async with legacy(first.url, token="token-alice") as tasks:
        created = await tasks.create("sleeper", {"seconds": 8})
    first.process.stop()
    assert not pg.deployment.queue.store.get(created.task_id).is_terminal
    second = pg.start_server("--auth", port=first.port)
    async with legacy(second.url, token="token-alice") as tasks:
        result = await tasks.result(created.task_id)
        assert result.structured_content == {"slept": 8.0}
    assert pg.deployment.events_of(created.task_id) == ["1 start", "1 end"]


@pytest.mark.postgres
async def test_two_servers_share_one_store(pg: McpDeployment) -> None:
    one, other = pg.start_server("--auth"), pg.start_server("--auth")
    async with (
        legacy(one.url, token="token-alice") as here,
        legacy(other.url, token="token-alice") as there,
        modern(other.url, token="token-alice") as there_modern,
    ):
        created = await here.create("add", {"a": 20, "b": 1})
        assert (await there.result(created.task_id)).structured_content == {"result": 21}
        assert (await there.get(created.task_id)).status == "completed"

        long = await here.create("sleeper", {"seconds": 60})
        cancelled = await there.cancel(long.task_id)
        assert cancelled.status == "cancelled"
        assert (await here.get(long.task_id)).status == "cancelled"
        with pytest.raises(MCPError) as again:
            await here.cancel(long.task_id)
        assert again.value.error.code == types.INVALID_PARAMS

        claimed = await there_modern.session.call_tool("add", {"a": 2, "b": 2}, allow_claimed=True)
        assert isinstance(claimed, CreatedTask)
        assert (await here.result(claimed.task_id)).structured_content == {"result": 4}


async def test_embedded_sqlite_and_filesystem_broker(make_deployment: object) -> None:
    embedded = make_deployment("sqlite")  # type: ignore[operator]
    embedded.start_worker()
    async with legacy(embedded.stdio()) as tasks:
        created = await tasks.create("add", {"a": 40, "b": 2}, ttl_ms=60_000)
        assert (await tasks.result(created.task_id)).structured_content == {"result": 42}
        long = await tasks.create("sleeper", {"seconds": 60})
        deadline = time.monotonic() + 30
        while (await tasks.get(long.task_id)).status != "working":
            assert time.monotonic() < deadline, embedded.logs()
            await anyio.sleep(0.1)
        assert (await tasks.cancel(long.task_id)).status == "cancelled"
    server = embedded.start_server()
    async with modern(server.url) as client:
        claimed = await client.session.call_tool("add", {"a": 1, "b": 1}, allow_claimed=True)
        assert isinstance(claimed, CreatedTask)
        done = await poll_task(client.session, claimed.task_id)
        assert done.status == "completed"
