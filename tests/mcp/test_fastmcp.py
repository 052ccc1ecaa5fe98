"""FastMCP 4 ``task=True`` tools served by queuestore's extension, run by a Celery worker."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import fastmcp
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from queuestore.mcp.client import CreatedTask, get_task, poll_task
from tests.mcp.mcp_support import HERE, McpDeployment, Server
from tests.mcp.support import modern

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def served(
    make_deployment: Callable[..., McpDeployment],
) -> Iterator[tuple[McpDeployment, Server]]:
    deployment = make_deployment("postgres", QUEUESTORE_MCP_POLL_INTERVAL_MS="200")
    worker = deployment.start_worker(app="fastmcp_app", beat=False)
    server = deployment.start_server(command=[sys.executable, str(HERE / "fastmcp_app.py")])
    yield deployment, server
    server.process.stop()
    worker.stop()


async def test_task_tools_run_on_the_worker(served: tuple[McpDeployment, Server]) -> None:
    deployment, server = served
    async with modern(server.url) as client:
        assert "io.modelcontextprotocol/tasks" in (client.server_capabilities.extensions or {})
        assert (await client.call_tool("add", {"a": 40, "b": 2})).structured_content == {
            "result": 42
        }
        created = await client.session.call_tool("where", {"label": "x"}, allow_claimed=True)
        assert isinstance(created, CreatedTask)
        done = await poll_task(client.session, created.task_id)
        assert done.status == "completed"
        assert done.result is not None
        ran_in = done.result["structuredContent"]["pid"]
        assert ran_in != server.process.pid
        task = deployment.deployment.queue.store.get(created.task_id)
        assert task.name == "fastmcp.call"
        assert (await client.call_tool("inline", {"x": 4})).structured_content == {"result": 8}
        with pytest.raises(MCPError) as unknown:
            await get_task(client.session, "no-such-task")
        assert unknown.value.error.code == types.INVALID_PARAMS

    async with modern(server.url, declare=False) as plain:
        assert (await plain.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        with pytest.raises(MCPError) as required:
            await plain.call_tool("where", {"label": "y"})
        assert required.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_fastmcps_own_client(served: tuple[McpDeployment, Server]) -> None:
    """Without fastmcp-tasks installed, FastMCP's client does not declare the extension."""
    _, server = served
    async with fastmcp.Client(server.url) as client:
        assert (await client.call_tool("add", {"a": 2, "b": 3})).data == 5
