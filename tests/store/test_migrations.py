"""The migrations build exactly the schema the code maps, and can be undone and redone."""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, insert, inspect, text

from queuestore import Settings, SqlTaskStore, make_engine
from queuestore.core.rollup import bucket_of
from queuestore.store.sql.migrations import (
    MIGRATIONS,
    VERSION_TABLE,
    config,
    downgrade,
    head,
    is_current,
    upgrade,
)
from queuestore.store.sql.queries import TABLE
from queuestore.store.sql.schema import Base

HEAD = head()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on an empty database: a new SQLite file, or a PostgreSQL schema.

    Creating a PostgreSQL database is slow, so the tests share one and empty
    its schema before each test.
    """
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    else:
        engine = make_engine(request.getfixturevalue("scratch_postgres_url"))
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
    yield engine
    engine.dispose()


def drift(engine: Engine) -> list[object]:
    """What autogenerate would change to make the database match the models."""
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE, "compare_type": True}
        )
        return list(compare_metadata(context, Base.metadata))


def revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE}
        ).get_current_revision()


def test_there_is_one_head() -> None:
    assert len(ScriptDirectory.from_config(config()).get_heads()) == 1


def test_each_migration_s_revision_is_its_file_s_number_one_after_the_other() -> None:
    """What lets :func:`head` read the newest revision from the file names alone."""
    scripts = ScriptDirectory.from_config(config())
    files = sorted(p.name for p in (MIGRATIONS / "versions").glob("[0-9]*.py"))
    numbers = [name[:4] for name in files]
    assert numbers == [f"{n:04d}" for n in range(1, len(files) + 1)]
    for number in numbers:
        script = scripts.get_revision(number)
        assert script is not None
        assert Path(script.path).name.startswith(number)
    assert head() == scripts.get_current_head() == numbers[-1]


def test_is_current_only_at_the_newest_revision(empty_engine: Engine) -> None:
    assert not is_current(empty_engine)
    with empty_engine.begin() as connection:
        upgrade(connection, "0010")
    assert not is_current(empty_engine)
    SqlTaskStore(empty_engine).migrate()
    assert is_current(empty_engine)


def _migrate_rounds(urls: list[str], barrier: Barrier, failures: Any) -> None:
    """One of several processes: for each URL, wait for the others, then open a store on it."""
    for url in urls:
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:  # the test gave up
            return
        try:
            home = Path(url.removeprefix("sqlite:///")).parent
            Settings(home=home, database_url=url, auto_migrate=True).make_store().close()
        except Exception:
            failures.put(f"{url}: {traceback.format_exc()}")
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            return


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_processes_migrating_one_fresh_database_at_once_all_get_the_schema(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A worker, beat and a command may start together on a new database: one
    migrates, the others wait for it and find the schema made."""
    processes, rounds = 3, 12
    if backend == "sqlite":
        urls = [f"sqlite:///{tmp_path / str(n) / 'queuestore.db'}" for n in range(rounds)]
    else:
        url = request.getfixturevalue("scratch_postgres_url")
        urls = [url] * rounds
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes + 1)
    failures = context.Queue()
    started = [
        context.Process(target=_migrate_rounds, args=(urls, barrier, failures))
        for _ in range(processes)
    ]
    for process in started:
        process.start()
    try:
        for url in urls:
            if backend == "postgres":
                _empty_schema(url)
            barrier.wait(timeout=120)  # all at once
            barrier.wait(timeout=120)  # all done
            failure = _first(failures)
            assert failure is None, failure
            engine = make_engine(url)
            assert is_current(engine)
            engine.dispose()
    finally:
        barrier.abort()
        for process in started:
            process.join(timeout=30)
            if process.exitcode is None:
                process.kill()
                process.join()
    assert [process.exitcode for process in started] == [0] * processes


def _first(failures: Any) -> str | None:
    try:
        return str(failures.get(timeout=0.1))
    except Empty:
        return None


def _empty_schema(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def test_a_migrated_database_matches_the_models(empty_engine: Engine) -> None:
    SqlTaskStore(empty_engine).migrate()

    assert drift(empty_engine) == []
    assert revision(empty_engine) == HEAD


def test_migrate_is_idempotent(empty_engine: Engine) -> None:
    store = SqlTaskStore(empty_engine)
    store.migrate()
    task = store.create("x.y")

    store.migrate()

    assert store.get(task.id) == task


def old_row(**columns: object) -> dict[str, object]:
    """A submitted task written a minute ago, as a revision before the newest stored it:
    only the columns every revision has, and ``columns``."""
    now = datetime.now(UTC) - timedelta(minutes=1)
    row: dict[str, object] = {
        "id": "t-old",
        "name": "x.y",
        "input": {},
        "status": "submitted",
        "artifacts": [],
        "metadata": {},
        "answers": [],
        "created_at": now,
        "updated_at": now,
        "attempt": 0,
        "version": 1,
    }
    return row | columns


def test_downgrade_to_base_and_upgrade_again(empty_engine: Engine) -> None:
    store = SqlTaskStore(empty_engine)
    store.migrate()

    with empty_engine.begin() as connection:
        downgrade(connection, "base")
    assert "queuestore_tasks" not in inspect(empty_engine).get_table_names()
    assert revision(empty_engine) is None

    store.migrate()
    assert drift(empty_engine) == []
    assert revision(empty_engine) == HEAD
    assert store.create("x.y").status == "submitted"


def test_rows_written_before_the_job_column_stay_jobs_the_sweep_publishes(
    empty_engine: Engine,
) -> None:
    # 0002 adds ``job``: a row from before it was swept as a job, and still is.
    with empty_engine.begin() as connection:
        upgrade(connection, "0001")
        connection.execute(insert(TABLE).values(old_row()))
    store = SqlTaskStore(empty_engine)

    store.migrate()
    record = store.create("x.y", job=False)

    assert [task.id for task in store.unpublished(timedelta(0))] == ["t-old"]
    with empty_engine.begin() as connection:
        downgrade(connection, "0001")
    assert "job" not in {column["name"] for column in inspect(empty_engine).get_columns(TABLE.name)}
    store.migrate()
    assert drift(empty_engine) == []
    # Undone and redone, every row is a job again: what 0001 had no way to tell.
    assert {task.id for task in store.unpublished(timedelta(0))} == {"t-old", record.id}


def test_rows_from_before_run_at_start_at_once_and_a_downgrade_forgets_start_times(
    empty_engine: Engine,
) -> None:
    # 0004 adds ``run_at`` and splits the sweep's index of unpublished jobs.
    with empty_engine.begin() as connection:
        upgrade(connection, "0003")
        connection.execute(insert(TABLE).values(old_row(job=True)))
    store = SqlTaskStore(empty_engine)

    store.migrate()
    later = store.create("x.y", run_at=datetime.now(UTC) + timedelta(days=1))

    assert store.get("t-old").run_at is None
    assert [task.id for task in store.unpublished(timedelta(0))] == ["t-old"]
    with empty_engine.begin() as connection:
        downgrade(connection, "0003")
    columns = {column["name"] for column in inspect(empty_engine).get_columns(TABLE.name)}
    assert "run_at" not in columns
    with empty_engine.begin() as connection:
        upgrade(connection, "head")
    assert drift(empty_engine) == []
    # Undone, a start time is gone: the job is due at once, as 0003 would run it.
    assert {task.id for task in store.unpublished(timedelta(0))} == {"t-old", later.id}


def test_rows_from_before_the_tree_are_roots_that_wait_for_nothing(empty_engine: Engine) -> None:
    # 0013 adds steps, the tree, waits and deadlines, and the pending rule's waits_on term.
    with empty_engine.begin() as connection:
        upgrade(connection, "0011")
        connection.execute(insert(TABLE).values(old_row(job=True)))
    store = SqlTaskStore(empty_engine)

    store.migrate()

    old = store.get("t-old")
    assert (old.parent_id, old.depth, old.waits_on, old.start_by, old.run_timeout) == (
        None,
        0,
        None,
        None,
        None,
    )
    assert [task.id for task in store.unpublished(timedelta(0))] == ["t-old"]
    assert "queuestore_steps" in inspect(empty_engine).get_table_names()
    with empty_engine.begin() as connection:
        downgrade(connection, "0011")
    assert "queuestore_steps" not in inspect(empty_engine).get_table_names()
    with empty_engine.begin() as connection:
        upgrade(connection, "head")
    assert drift(empty_engine) == []
    assert [task.id for task in store.unpublished(timedelta(0))] == ["t-old"]


def test_an_empty_database_differs_from_the_models(empty_engine: Engine) -> None:
    # The drift check must be able to fail: with no migration, the table is missing.
    assert any(change[0] == "add_table" for change in drift(empty_engine))  # type: ignore[index]


def test_the_rollup_counts_the_rows_there_were_before_it(empty_engine: Engine) -> None:
    # 0012 adds the rollup: the tasks already there are counted once, as if written since.
    finished = datetime.now(UTC) - timedelta(minutes=2)
    with empty_engine.begin() as connection:
        upgrade(connection, "0011")
        connection.execute(insert(TABLE).values(old_row(owner="alice")))
        ended = old_row(
            id="t-done",
            status="completed",
            owner="bob",
            started_at=finished - timedelta(seconds=3),
            finished_at=finished,
            updated_at=finished,
        )
        connection.execute(insert(TABLE).values(ended))
    store = SqlTaskStore(empty_engine)

    store.migrate()
    rollup = store.rollup()

    assert {(c.status, c.owner, c.value) for c in rollup.counts} == {
        ("submitted", "alice", 1),
        ("completed", "bob", 1),
    }
    assert rollup.total("submitted") == 2
    assert rollup.histogram("run") == {bucket_of(3000): 1}
    assert rollup.job_total("x.y", "completed") == 1
    with empty_engine.begin() as connection:
        downgrade(connection, "0011")
    assert "queuestore_rollup_counts" not in inspect(empty_engine).get_table_names()
    store.migrate()
    assert drift(empty_engine) == []
