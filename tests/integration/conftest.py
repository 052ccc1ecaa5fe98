"""Fixtures of the integration tests: services, fresh databases and deployments.

The shared services (PostgreSQL, Redis, RabbitMQ) are checked with
``require_service`` from ``tests/conftest.py``: down means skipped on a
developer's machine and failed under ``CI``. Each deployment gets its own
PostgreSQL database (or SQLite file) and its own queue name, so tests never see
each other's tasks or messages on a shared broker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.harness import (
    Deployment,
    DeploymentFactory,
    PostgresCluster,
    RabbitMQNode,
    Receiver,
    RedisServer,
    build_deployment,
)


@pytest.fixture(scope="package")
def pg_database(shared: ModuleType) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases, dropped when the package's tests end."""
    with ExitStack() as stack:

        def make() -> str:
            url = stack.enter_context(shared.fresh_pg_database("queuestore_it"))
            return str(url.render_as_string(hide_password=False))

        yield make


@pytest.fixture
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DeploymentFactory]:
    """Builds deployments for one test; stops their processes and queues afterwards."""
    built: list[Deployment] = []

    def make(broker: str, database: str, **overrides: str) -> Deployment:
        root = tmp_path / f"deployment-{len(built)}"
        made = build_deployment(request, root, broker, database, **overrides)
        built.append(made)
        return made

    yield make
    for made in built:
        made.close()


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Callable[..., Receiver]]:
    """Starts webhook receivers (``status=``, ``delay=``); stops them after the test."""
    started: list[Receiver] = []

    def start(status: int = 204, delay: float = 0.0) -> Receiver:
        log = tmp_path / f"receiver-{len(started)}.jsonl"
        made = Receiver(log, status=status, delay=delay).start()
        started.append(made)
        return made

    yield start
    for made in started:
        made.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may stop and start."""
    server = RedisServer(tmp_path / "redis")
    server.workdir.mkdir()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster of this module's own, which its tests may restart.

    Its folder is outside pytest's private temporary folder when we run as root,
    since the cluster then runs as the ``postgres`` user, who must reach it.
    """
    workdir = Path(tempfile.mkdtemp(prefix="queuestore-it-pg-"))
    os.chmod(workdir, 0o755)
    cluster = PostgresCluster(workdir / "cluster")
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def own_rabbitmq(tmp_path: Path) -> Iterator[RabbitMQNode]:
    """A RabbitMQ node of this test's own whose ``consumer_timeout`` is 10 seconds."""
    node = RabbitMQNode(tmp_path / "rabbitmq", consumer_timeout=timedelta(seconds=10))
    node.workdir.mkdir()
    try:
        node.start()
        yield node
    finally:
        node.stop()
