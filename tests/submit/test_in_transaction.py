"""Submit inside the caller's transaction: the task exists if and only if the caller commits.

The task's row is inserted on the caller's connection and commits or rolls
back with the caller's own writes; its message goes out only after the
commit. On SQLite and PostgreSQL, through an SQLAlchemy ``Connection`` or
``Session``, a psycopg connection, and the async twins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import Celery
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from queuestore import (
    InMemoryTaskStore,
    InvalidTaskData,
    SqlTaskStore,
    TaskConflict,
    TaskNotFound,
    TaskQueue,
    TaskStore,
)
from queuestore.aio import AsyncTaskQueue
from tests.celery_support import Published, eventually

GRACE = timedelta(milliseconds=300)


class RolledBack(Exception):
    pass


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """The SQL stores only: the in-memory store has no transaction to join (see the last test)."""
    return str(request.param)


@pytest.fixture
def queue(app: Celery, published: Published, store: TaskStore) -> TaskQueue:
    return TaskQueue(store, app, publish_grace=GRACE)


@pytest.fixture
def caller(store: TaskStore) -> Iterator[Engine]:
    """The application's own engine on the store's database, with an orders table."""
    assert isinstance(store, SqlTaskStore)
    engine = create_engine(store.engine.url)
    with engine.begin() as connection:
        connection.execute(
            text("CREATE TABLE IF NOT EXISTS it_orders (id VARCHAR(20) PRIMARY KEY)")
        )
        connection.execute(text("DELETE FROM it_orders"))
    yield engine
    engine.dispose()


def orders(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return [row[0] for row in connection.execute(text("SELECT id FROM it_orders"))]


def published_ids(published: Published) -> list[str]:
    return [message["task_id"] for message in published.messages]


def test_a_rolled_back_transaction_leaves_no_task_and_no_message(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    submitted = []

    def ship_then_fail() -> None:
        with caller.begin() as connection:
            connection.execute(text("INSERT INTO it_orders VALUES ('o-1')"))
            submitted.append(queue.submit("orders.ship", {"order": "o-1"}, connection=connection))
            raise RolledBack

    with pytest.raises(RolledBack):
        ship_then_fail()
    (task,) = submitted

    assert eventually(lambda: queue.publisher.after_commit.pending() == 0, timeout=3)
    assert orders(caller) == []
    with pytest.raises(TaskNotFound):
        queue.store.get(task.id)
    assert published.messages == []


def test_a_committed_transaction_has_its_task_published_after_the_commit(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    with caller.begin() as connection:
        connection.execute(text("INSERT INTO it_orders VALUES ('o-1')"))
        task = queue.submit("orders.ship", {"order": "o-1"}, connection=connection)
        assert published.messages == []  # not before the commit

    assert eventually(lambda: published_ids(published) == [task.id])
    assert queue.store.get(task.id) == task
    assert orders(caller) == ["o-1"]


def test_a_session_commits_or_rolls_back_its_tasks_with_its_rows(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    lost = []

    def ship_then_fail() -> None:
        with Session(caller) as session, session.begin():
            session.execute(text("INSERT INTO it_orders VALUES ('lost')"))
            items = [{"name": "orders.ship"}, {"name": "orders.bill"}]
            lost.extend(queue.submit_many(items, connection=session))
            raise RolledBack

    with pytest.raises(RolledBack):
        ship_then_fail()
    with Session(caller) as session, session.begin():
        session.execute(text("INSERT INTO it_orders VALUES ('kept')"))
        kept = queue.submit_many(
            [{"name": "orders.ship"}, {"name": "orders.bill"}], connection=session
        )

    assert eventually(lambda: sorted(published_ids(published)) == sorted(t.id for t in kept))
    for task in lost:
        with pytest.raises(TaskNotFound):
            queue.store.get(task.id)
    assert [queue.store.get(t.id).name for t in kept] == ["orders.ship", "orders.bill"]


def test_a_taken_id_raises_and_the_callers_transaction_still_commits(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    taken = queue.store.create("orders.ship")
    with caller.begin() as connection:
        connection.execute(text("INSERT INTO it_orders VALUES ('o-2')"))
        with pytest.raises(TaskConflict):
            queue.submit_many(
                [{"name": "orders.bill"}, {"name": "orders.ship", "task_id": taken.id}],
                connection=connection,
            )

    assert orders(caller) == ["o-2"]
    assert queue.store.count() == 1  # the first item of the batch went with the conflict


def test_a_unique_key_joins_the_committed_holder(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    holder = queue.submit("orders.ship", unique_key="o-3")
    with caller.begin() as connection:
        joined = queue.submit("orders.ship", unique_key="o-3", connection=connection)

    assert joined.id == holder.id
    assert queue.publisher.after_commit.pending() == 0


def test_a_psycopg_connection_joins_too(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    if caller.dialect.name != "postgresql":
        pytest.skip("psycopg connections are PostgreSQL's")
    import psycopg

    url = caller.url.set(drivername="postgresql").render_as_string(hide_password=False)
    lost = []

    def ship_then_fail(connection: psycopg.Connection[object]) -> None:
        with connection.transaction():
            connection.execute("INSERT INTO it_orders VALUES ('p-1')")
            lost.append(queue.submit("orders.ship", connection=connection))
            raise RolledBack

    with psycopg.connect(url) as connection:
        with pytest.raises(RolledBack):
            ship_then_fail(connection)
        with connection.transaction():
            connection.execute("INSERT INTO it_orders VALUES ('p-2')")
            kept = queue.submit("orders.ship", connection=connection)

    assert eventually(lambda: published_ids(published) == [kept.id])
    with pytest.raises(TaskNotFound):
        queue.store.get(lost[0].id)
    assert orders(caller) == ["p-2"]


def test_an_async_connection_joins_through_the_async_queue(
    queue: TaskQueue, caller: Engine, published: Published
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    driver = "sqlite+aiosqlite" if caller.dialect.name == "sqlite" else "postgresql+psycopg"
    aqueue = AsyncTaskQueue(queue)

    async def scenario() -> str:
        engine = create_async_engine(caller.url.set(drivername=driver))
        try:
            async with engine.begin() as connection:
                await connection.execute(text("INSERT INTO it_orders VALUES ('a-1')"))
                task = await aqueue.submit("orders.ship", connection=connection)
        finally:
            await engine.dispose()
        return task.id

    task_id = asyncio.run(scenario())

    assert eventually(lambda: published_ids(published) == [task_id])
    assert orders(caller) == ["a-1"]


def test_a_connection_the_store_cannot_join_is_refused(
    app: Celery, published: Published, caller: Engine
) -> None:
    memory = TaskQueue(InMemoryTaskStore(), app)
    with caller.begin() as connection, pytest.raises(InvalidTaskData) as refused:
        memory.submit("orders.ship", connection=connection)
    assert refused.value.field == "connection"
    queue = TaskQueue(SqlTaskStore("sqlite://"), app)
    with pytest.raises(InvalidTaskData) as not_one:
        queue.submit("orders.ship", connection=object())
    assert not_one.value.field == "connection"
    with caller.begin() as connection, pytest.raises(InvalidTaskData) as with_callback:
        queue.submit(
            "orders.ship",
            connection=connection,
            callback={"url": "https://93.184.216.34/hook"},  # type: ignore[arg-type]
        )
    assert with_callback.value.field == "callback"
