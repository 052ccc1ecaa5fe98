"""Fixtures of the MCP tests: a deployment with a real worker, and MCP servers as processes.

One deployment (PostgreSQL + Redis, a prefork worker with embedded beat) is
shared by the MCP tests; servers are started per module or test, and every
process is stopped when the session ends.
Processes come from the integration harness (``tests/integration/harness.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import Deployment, LoggedProcess, free_port, port_open, wait_for

HERE = Path(__file__).resolve().parent
APP = HERE / "mcp_app.py"


class McpDeployment:
    """A queuestore deployment plus the MCP servers and workers the tests start on it."""

    def __init__(self, deployment: Deployment, **env: str) -> None:
        self.deployment = deployment
        self.extra_env = env

    def env(self, **extra: str) -> dict[str, str]:
        return self.deployment.env(**(self.extra_env | extra))

    def start_worker(self, *, beat: bool = True, app: str = "mcp_app") -> LoggedProcess:
        """A prefork worker on ``app`` (a module of this folder, the working directory)."""
        return self.deployment.start_worker(app=app, beat=beat, cwd=HERE, env=self.env())

    def start_server(
        self, *flags: str, port: int | None = None, command: list[str] | None = None, **env: str
    ) -> Server:
        """``mcp_app.py --http PORT`` with ``flags`` (or ``command`` + PORT), listening."""
        port = port or free_port()
        argv = [sys.executable, str(APP), "--http", str(port), *flags]
        if command is not None:
            argv = [*command, str(port)]
        process = LoggedProcess.start(
            f"mcp server :{port}",
            argv,
            env=self.env(**env),
            cwd=self.deployment.root,
            log=self.deployment.root / f"server-{port}.log",
        )
        self.deployment.processes.append(process)
        wait_for(lambda: port_open(port), timeout=60, what="the MCP server", logs=[process])
        return Server(process, port)

    def stdio(self, *flags: str, **env: str) -> tuple[str, list[str], dict[str, str]]:
        """Command, arguments and environment of a stdio server the client launches."""
        return sys.executable, [str(APP), *flags], self.env(**env)

    def logs(self) -> str:
        return self.deployment.logs()


class Server:
    """An MCP server process on a loopback port."""

    def __init__(self, process: LoggedProcess, port: int) -> None:
        self.process = process
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture(scope="session")
def make_deployment(
    shared: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., McpDeployment]]:
    """Builds deployments (``postgres`` + Redis, or ``sqlite`` + filesystem), for the session."""
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


@pytest.fixture(scope="session")
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
