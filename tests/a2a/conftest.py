"""Fixtures of the A2A tests: a deployment per module (fresh PostgreSQL, or the embedded default).

Each module that asks for ``pg`` gets a fresh PostgreSQL database, a Redis queue
of its own and one prefork worker on ``a2a_app``; ``embedded`` is an SQLite file
and the filesystem broker. Every process is stopped when its module ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.a2a.a2a_support import A2ADeployment
from tests.integration.harness import Deployment


@pytest.fixture(scope="module")
def pg(shared: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[A2ADeployment]:
    """A fresh PostgreSQL database, a Redis queue and one worker, for one module."""
    root = tmp_path_factory.mktemp("a2a")
    with shared.fresh_pg_database("queuestore_a2a") as url:
        deployment = Deployment(
            root=root,
            database_url=url.render_as_string(hide_password=False),
            broker_url=shared.require_redis(),
        )
        try:
            deployment.migrate()
            made = A2ADeployment(deployment)
            made.start_worker()
            yield made
        finally:
            deployment.close()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[A2ADeployment]:
    """The embedded default: an SQLite file and the filesystem broker, one worker."""
    root = tmp_path_factory.mktemp("a2a-embedded")
    deployment = Deployment(
        root=root,
        database_url=f"sqlite:///{root / 'queuestore.db'}",
        broker_url="filesystem://",
    )
    try:
        deployment.migrate()
        made = A2ADeployment(deployment)
        made.start_worker()
        yield made
    finally:
        deployment.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
