"""Fixtures of the MCP tests: a deployment with a real worker, and MCP servers as processes.

One deployment (PostgreSQL + Redis, a prefork worker with embedded beat) is
shared by the MCP tests; servers are started per module or test, and every
process is stopped when the package's tests end.
Processes come from the integration harness (``tests/integration/harness.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from types import ModuleType

import pytest

from tests.integration.harness import Deployment
from tests.mcp.mcp_support import McpDeployment


@pytest.fixture(scope="package")
def make_deployment(
    shared: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., McpDeployment]]:
    """Builds deployments (``postgres`` + Redis, or ``sqlite`` + filesystem), for the package."""
    with ExitStack() as stack:
        built: list[Deployment] = []

        def make(database: str = "postgres", **env: str) -> McpDeployment:
            root = tmp_path_factory.mktemp("mcp")
            if database == "postgres":
                url = stack.enter_context(shared.fresh_pg_database("queuestore_mcp"))
                database_url = url.render_as_string(hide_password=False)
                broker_url = shared.require_redis()
            else:
                database_url = f"sqlite:///{root / 'queuestore.db'}"
                broker_url = "filesystem://"
            deployment = Deployment(root=root, database_url=database_url, broker_url=broker_url)
            deployment.migrate()
            built.append(deployment)
            return McpDeployment(deployment, **env)

        try:
            yield make
        finally:
            for deployment in built:
                deployment.close()


@pytest.fixture(scope="package")
def pg(make_deployment: Callable[..., McpDeployment]) -> McpDeployment:
    """The PostgreSQL deployment of all modules; one worker, its beat cleaning each second."""
    made = make_deployment(
        "postgres", QUEUESTORE_MCP_PAGE_SIZE="2", QUEUESTORE_MCP_POLL_INTERVAL_MS="200"
    )
    made.start_worker()
    return made


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
