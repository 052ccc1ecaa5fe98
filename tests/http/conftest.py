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

import pytest
from kombu import Connection

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import Deployment
from http_deployment import TRUSTED_HEADER, Api, HttpDeployment

REDIS_URL = os.environ.get("QUEUESTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


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
                # kombu drops only queues its own connection declared: the servers
                # published here, so the queue (with what no worker took) goes by name.
                with Connection(REDIS_URL) as connection:
                    connection.default_channel.client.delete(deployment.queue_name)


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
