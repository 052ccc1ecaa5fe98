"""The HTTP tests' deployment: a database, a broker, a worker and API servers as processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.harness import Deployment, LoggedProcess, free_port, wait_for

HERE = Path(__file__).resolve().parent

TOKENS = {"token-alice": "alice", "token-bob": "bob", "token-ops": "ops"}
ADMINS = ["ops"]
"""The principals that operate the servers (QUEUESTORE_HTTP_ADMINS)."""
TRUSTED_HEADER = "X-Forwarded-User"


class Api:
    """An API server process on a loopback port."""

    def __init__(self, process: LoggedProcess, port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def logs(self) -> str:
        return self.process.tail(60)


class HttpDeployment:
    """A deployment plus the API servers started on it."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    def env(self, **extra: str) -> dict[str, str]:
        python_path = os.pathsep.join([str(HERE), self.deployment.env()["PYTHONPATH"]])
        # After the deployment's own: a test may point a server at another database.
        return self.deployment.env() | extra | {"PYTHONPATH": python_path}

    def start_worker(self) -> LoggedProcess:
        return self.deployment.start_worker(app="http_app", cwd=HERE, env=self.env())

    def start_api(self, *flags: str, app: str | None = "http_app", **env: str) -> Api:
        """``python -m queuestore serve --port PORT --app http_app`` with ``env``, answering.

        ``app=None`` serves without the workers' app: the server then knows no job.
        """
        port = free_port()
        command = [
            sys.executable, "-m", "queuestore", "serve", "--host", "127.0.0.1",
            "--port", str(port), *(["--app", app] if app else []), *flags,
        ]  # fmt: skip
        defaults = {
            "QUEUESTORE_HTTP_TOKENS": json.dumps(TOKENS),
            "QUEUESTORE_HTTP_ADMINS": json.dumps(ADMINS),
        }
        process = LoggedProcess.start(
            f"api :{port}",
            command,
            env=self.env(**(defaults | env)),
            cwd=HERE,
            log=self.deployment.root / f"api-{port}.log",
        )
        self.deployment.processes.append(process)
        api = Api(process, port)

        def answers() -> bool:
            if not process.alive():
                pytest.fail(f"{process.name} exited{process.tail()}")
            try:
                return httpx.get(f"{api.url}/livez", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout=60, what="the API server", logs=[process])
        return api

    def stop(self, api: Api) -> None:
        api.process.stop()
        self.deployment.processes.remove(api.process)
