"""Fixtures of the HTTP API tests: one deployment, one worker, API servers as processes.

The deployment (a fresh PostgreSQL database, Redis, a queue of its own) and
its prefork worker are shared by every test of the package; servers run
``python -m queuestore serve`` on a free loopback port, each stopped at the
end of the package (or of the test that started it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from types import ModuleType

import httpx
import pytest
from kombu import Connection

from tests.http.http_deployment import TRUSTED_HEADER, Api, HttpDeployment
from tests.integration.harness import Deployment


@pytest.fixture(scope="package")
def make_deployment(
    shared: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], HttpDeployment]]:
    """Builds deployments on a fresh PostgreSQL database and Redis, stopped with the package."""
    with ExitStack() as stack:
        built: list[Deployment] = []

        def make() -> HttpDeployment:
            root = tmp_path_factory.mktemp("http")
            url = stack.enter_context(shared.fresh_pg_database("queuestore_http"))
            deployment = Deployment(
                root=root,
                database_url=url.render_as_string(hide_password=False),
                broker_url=shared.require_redis(),
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
                with Connection(shared.REDIS_URL) as connection:
                    connection.default_channel.client.delete(deployment.queue_name)


@pytest.fixture(scope="package")
def pg(make_deployment: Callable[[], HttpDeployment]) -> HttpDeployment:
    """The deployment every module shares, with one prefork worker."""
    made = make_deployment()
    made.start_worker()
    return made


@pytest.fixture(scope="package")
def api(pg: HttpDeployment) -> Api:
    """The API server of the shared deployment: static tokens and a trusted header."""
    return pg.start_api(QUEUESTORE_HTTP_TRUSTED_HEADER=TRUSTED_HEADER)


@pytest.fixture
def alice(api: Api) -> Iterator[httpx.Client]:
    """A client whose principal is alice."""
    with api.client("token-alice") as client:
        yield client


@pytest.fixture
def bob(api: Api) -> Iterator[httpx.Client]:
    """A client whose principal is bob."""
    with api.client("token-bob") as client:
        yield client
