"""Fixtures of the HTTP API tests: one deployment, one worker, API servers as processes.

The deployment (a fresh PostgreSQL database, Redis, a queue of its own) and
its prefork worker are shared by every test of the session; servers run
``python -m queuestore serve`` on a free loopback port, each stopped at the
end of the session (or of the test that started it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from kombu import Connection

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import Deployment, LoggedProcess, free_port, wait_for

HERE = Path(__file__).resolve().parent
REDIS_URL = os.environ.get("QUEUESTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

TOKENS = {"token-alice": "alice", "token-bob": "bob"}
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
        node = f"http-{free_port()}"
        command = [
            sys.executable, "-m", "celery", "-A", "http_app", "worker",
            "--pool=prefork", "--concurrency=2", "--without-heartbeat", "--without-gossip",
            "--without-mingle", f"--hostname={node}@%h", "--loglevel=INFO",
        ]  # fmt: skip
        worker = LoggedProcess.start(
            f"worker {node}",
            command,
            env=self.env(),
            cwd=HERE,
            log=self.deployment.root / f"{node}.log",
        )
        self.deployment.processes.append(worker)
        self.deployment.wait_ready(worker, f"{node}@")
        return worker

    def start_api(self, *flags: str, **env: str) -> Api:
        """``python -m queuestore serve --port PORT --app http_app`` with ``env``, answering."""
        port = free_port()
        command = [
            sys.executable, "-m", "queuestore", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--app", "http_app", *flags,
        ]  # fmt: skip
        defaults = {"QUEUESTORE_HTTP_TOKENS": _json(TOKENS)}
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


def _json(value: object) -> str:
    import json

    return json.dumps(value)


@pytest.fixture(scope="session")
def shared(pytestconfig: pytest.Config) -> ModuleType:
    """``tests/conftest.py``: ``require_service`` and ``fresh_pg_database``."""
    path = Path(__file__).resolve().parents[1] / "conftest.py"
    for plugin in pytestconfig.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if file is not None and Path(file).resolve() == path:
            return plugin  # type: ignore[no-any-return]
    raise RuntimeError(f"{path} is not loaded as a conftest")


def _redis(shared: ModuleType) -> str:
    def check() -> None:
        with Connection(REDIS_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)

    shared.require_service("Redis", check)
    return REDIS_URL


@pytest.fixture(scope="session")
def make_deployment(
    shared: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], HttpDeployment]]:
    """Builds deployments on a fresh PostgreSQL database and Redis, stopped with the session."""
    with ExitStack() as stack:
        built: list[Deployment] = []

        def make() -> HttpDeployment:
            root = tmp_path_factory.mktemp("http")
            url = stack.enter_context(shared.fresh_pg_database("queuestore_http"))
            deployment = Deployment(
                root=root,
                database_url=url.render_as_string(hide_password=False),
                broker_url=_redis(shared),
            )
            deployment.migrate()
            built.append(deployment)
            return HttpDeployment(deployment)

        try:
            yield make
        finally:
            for deployment in built:
                deployment.close()


@pytest.fixture(scope="session")
def pg(make_deployment: Callable[[], HttpDeployment]) -> HttpDeployment:
    """The deployment every module shares, with one prefork worker."""
    made = make_deployment()
    made.start_worker()
    return made


@pytest.fixture(scope="session")
def api(pg: HttpDeployment) -> Api:
    """The API server of the shared deployment: static tokens and a trusted header."""
    return pg.start_api(QUEUESTORE_HTTP_TRUSTED_HEADER=TRUSTED_HEADER)
