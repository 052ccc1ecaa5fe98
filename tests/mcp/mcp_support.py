"""The MCP tests' deployment: a queuestore deployment plus MCP servers as processes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.harness import Deployment, LoggedProcess, free_port, port_open, wait_for

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
