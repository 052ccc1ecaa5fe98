"""Shared fixtures: every store under test, and the services they need.

A test that needs a service (PostgreSQL, Redis, RabbitMQ) calls
:func:`require_service`: when the service is down the test is skipped on a
developer's machine and fails when ``CI`` is set, so CI can never go green by
skipping.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from sqlalchemy import URL, Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from queuestore import InMemoryTaskStore, SqlTaskStore, TaskStore, make_engine
from tests.celery_support import Published

DEFAULT_PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
"""The server the PostgreSQL tests use; override with ``QUEUESTORE_TEST_PG_URL``."""

TABLE = "queuestore_tasks"

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
"""The stores every contract test runs against."""

StoreFactory = Callable[..., TaskStore]

SHARED_DEPLOYMENTS = {"http": {"pg", "api"}, "mcp": {"pg"}, "ops": {"ops"}}
"""Folders whose tests share one deployment (a database, a worker, servers), built once
per folder and worker, and the fixtures that are that deployment."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group tests for pytest-xdist (``--dist loadgroup``): the tests of a folder's
    shared deployment run on one worker, so it starts once; any other test stays with
    its file, so the file's module fixtures are built once."""
    tests = Path(__file__).parent
    for item in items:
        path = Path(item.path).relative_to(tests)
        folder = path.parts[0] if len(path.parts) > 1 else ""
        shared = SHARED_DEPLOYMENTS.get(folder, set()) & set(getattr(item, "fixturenames", ()))
        group = folder if shared else path.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))


def require_service(name: str, check: Callable[[], object]) -> None:
    """Run ``check``; if it raises, skip the test locally and fail it under CI."""
    try:
        check()
    except Exception as exc:
        message = f"{name} is not reachable: {type(exc).__name__}: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


REDIS_URL = os.environ.get("QUEUESTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("QUEUESTORE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _broker_check(url: str) -> Callable[[], None]:
    def check() -> None:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)

    return check


def require_redis() -> str:
    """The test Redis's URL, once it answers (``require_service``'s rule)."""
    require_service("Redis", _broker_check(REDIS_URL))
    return REDIS_URL


def require_rabbitmq() -> str:
    """The test RabbitMQ's URL, once it answers (``require_service``'s rule)."""
    require_service("RabbitMQ", _broker_check(AMQP_URL))
    return AMQP_URL


_THIS = sys.modules[__name__]


@pytest.fixture(scope="session")
def shared() -> ModuleType:
    """This module, for the test folders whose own ``conftest`` cannot import it by name.

    Every folder's ``conftest.py`` is a module named ``conftest``; a folder's
    helpers reach ``require_service``, ``fresh_pg_database`` and the others here.
    """
    return _THIS


@pytest.fixture(scope="session")
def redis_url() -> str:
    return require_redis()


@pytest.fixture(scope="session")
def amqp_url() -> str:
    return require_rabbitmq()


def pg_admin_url() -> URL:
    """The URL of an existing database on the test server, used to create others."""
    url = make_url(os.environ.get("QUEUESTORE_TEST_PG_URL", DEFAULT_PG_ADMIN_URL))
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def terminate_connections(database: str) -> int:
    """Kill every server-side connection to ``database`` (a restart, as clients see it)."""
    import psycopg

    admin_url = pg_admin_url().set(drivername="postgresql")
    with psycopg.connect(admin_url.render_as_string(hide_password=False), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def fresh_pg_database(prefix: str = "queuestore_test") -> Iterator[URL]:
    """A new, empty PostgreSQL database, dropped (with its connections) on exit."""
    admin_url = pg_admin_url()
    # No pool: the admin connection closes after each statement instead of staying
    # idle beside the database for as long as it lives.
    admin = create_engine(
        admin_url,
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": 5},
        poolclass=NullPool,
    )
    try:
        require_service("PostgreSQL", lambda: admin.connect().close())
        name = f"{prefix}_{secrets.token_hex(6)}"
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield admin_url.set(database=name)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A migrated database of its own for this test session, as a URL."""
    with fresh_pg_database() as url:
        rendered = url.render_as_string(hide_password=False)
        store = SqlTaskStore(rendered)
        try:
            store.migrate()
        finally:
            store.close()
        yield rendered


@pytest.fixture(scope="module")
def scratch_postgres_url() -> Iterator[str]:
    """A PostgreSQL database of the test module's own, created empty, for schema tests."""
    with fresh_pg_database("queuestore_scratch") as url:
        yield url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One migrated SQLite file for the session; tests empty the table, not the file."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "queuestore.db"
    engine = make_engine(f"sqlite:///{path}")
    SqlTaskStore(engine).migrate()
    yield engine
    engine.dispose()


OPERATOR_TABLES = (
    "queuestore_rollup_log",
    "queuestore_rollup_counts",
    "queuestore_rollup_series",
    "queuestore_rollup_jobs",
    "queuestore_workers",
    "queuestore_schedules",
    "queuestore_rate_starts",
    "queuestore_rate_waits",
    "queuestore_pauses",
)
"""What the operator's view, the schedules and flow control keep beside the tasks, emptied
with them."""


def _emptied(engine: Engine) -> Engine:
    # PostgreSQL's TRUNCATE of the tasks empties the callbacks and deliveries
    # (a trigger); SQLite's DELETE fires the row trigger that deletes them.
    statement = "TRUNCATE " if engine.dialect.name == "postgresql" else "DELETE FROM "
    with engine.begin() as connection:
        connection.execute(text(statement + TABLE))
        for table in OPERATOR_TABLES:
            connection.execute(text(statement + table))
    return engine


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the store under test: memory, sqlite or postgres."""
    return str(request.param)


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """Builds stores of the backend under test with options, on an empty table.

    SQL stores built in one test share the table, as processes sharing a
    database would; in-memory stores each have their own tasks.
    """
    engine: Engine | None = None
    if backend != "memory":
        engine = _emptied(request.getfixturevalue(f"{backend}_engine"))
    built: list[TaskStore] = []

    def make(**options: Any) -> TaskStore:
        store = InMemoryTaskStore(**options) if engine is None else SqlTaskStore(engine, **options)
        built.append(store)
        return store

    yield make
    for store in built:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> TaskStore:
    """A store of the backend under test with default options, on an empty table."""
    return make_store()


@pytest.fixture
def app() -> Celery:
    """A Celery app of the test's own, on kombu's in-memory broker (see ``published``)."""
    return Celery("test_app", broker="memory://", set_as_current=False)


@pytest.fixture
def published(app: Celery, monkeypatch: pytest.MonkeyPatch) -> Published:
    """Records what ``app`` publishes and revokes, instead of a broker round trip."""
    return Published.on(app, monkeypatch)
