"""The SQL store: SQLite (the embedded default) and PostgreSQL through psycopg 3.

Every status write is one ``UPDATE ... WHERE id = :id AND status IN (...)
RETURNING ...`` statement: compare-and-set in the database, never
read-modify-write in Python. Timestamps come from PostgreSQL's clock; an
embedded SQLite file has one process's clock at a time.

:class:`SqlTaskStore` says which statement of the catalogue
(:mod:`~queuestore.store.sql.queries`) each primitive runs, with which
parameters; :mod:`~queuestore.store.sql.executor` runs it and
:mod:`~queuestore.store.sql.codec` turns its rows into tasks.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar, cast

from sqlalchemy import ColumnElement, Connection, Engine, NullPool, create_engine
from sqlalchemy.orm import Session
from sqlalchemy.sql import ClauseElement, Executable, Select

from queuestore.core.callbacks import Callback, Delivery, DeliveryState
from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.cursor import CursorKey
from queuestore.core.errors import InvalidTaskData, StoreUnavailable, TaskConflict
from queuestore.core.flow import FlowControl, Pause, PauseKind
from queuestore.core.models import Step, Task, TaskStatus
from queuestore.core.owner import OwnerScope
from queuestore.core.rollup import CurrentCount, SeriesCount
from queuestore.core.schedules import Schedule
from queuestore.core.watch import Listener, StatusChange
from queuestore.core.workers import Worker
from queuestore.store.backend import (
    DeadlineKind,
    ListQuery,
    NewChild,
    NewTask,
    StepOutcome,
    SweepFilter,
    Write,
    publish_order,
)
from queuestore.store.base import TaskStore
from queuestore.store.deliveries import Outgoing, Settlement
from queuestore.store.runs import stops_a_run
from queuestore.store.sql import (
    codec,
    deadlines,
    deliveries,
    operator,
    queries,
    schedules,
    steps,
    tree,
)
from queuestore.store.sql import flow as flow_sql
from queuestore.store.sql.engine import DEFAULT_POOL_SIZE, make_engine
from queuestore.store.sql.executor import Executor, Prepared
from queuestore.store.sql.queries import WriteShape

log = logging.getLogger(__name__)

_TICK = timedelta(microseconds=1)
"""What separates the timestamps of a batch's rows on SQLite, to keep their order."""

_KEY_RACES = 3
"""Inserts a unique task tries while the task holding its key keeps ending in between."""

P = ParamSpec("P")
T = TypeVar("T")


_Statements = Callable[[Executable | Prepared, Any], list[dict[str, Any]]]
"""Runs a statement with its parameters (a list of them: executemany) and returns its rows;
a :class:`Prepared` one on the driver's own cursor."""


def _on(connection: Connection) -> _Statements:
    """Statements run on an SQLAlchemy connection, in its transaction."""

    def run(statement: Executable | Prepared, params: Any) -> list[dict[str, Any]]:
        if isinstance(statement, Prepared):
            return statement.all(connection, params)
        result = connection.execute(statement, params)
        return [dict(row) for row in result.mappings().all()] if result.returns_rows else []

    return run


@contextmanager
def _savepoint(connection: Any) -> Iterator[None]:
    """A savepoint in the caller's transaction: rolled back to if the block raises."""
    if isinstance(connection, Session | Connection):
        with connection.begin_nested():
            yield
    else:  # psycopg: a transaction block inside a transaction is a savepoint
        with connection.transaction():
            yield


def _is_psycopg(connection: object) -> bool:
    """Whether ``connection`` is a psycopg (3) connection, without importing psycopg."""
    return any(
        kind.__module__.startswith("psycopg") and kind.__name__ == "Connection"
        for kind in type(connection).__mro__
    )


class _Refused(Exception):
    """A spawn's parent is not the run's to spawn under: roll the transaction back."""


class SqlTaskStore(TaskStore):
    """Tasks in one SQL table, ``queuestore_tasks``, on SQLite or PostgreSQL.

    Args:
        engine: an SQLAlchemy engine, or a URL to build one with :func:`make_engine`.
        keep_warm: inside :meth:`open_async` on PostgreSQL, keep greenlets and
            connections (with their cursors) between calls, rather than take
            SQLAlchemy's ``greenlet_spawn`` and a pool checkout for each. On by
            default: it holds the A2A store's figures over a2a-sdk's
            ``DatabaseTaskStore`` (``bench/a2a_store.py``); off, the loop's path
            uses only SQLAlchemy's own mechanisms.
        pool_size: for an engine built from a URL, the most connections its pool
            holds (PostgreSQL): the process's threads share them. Each
            subscription (LISTEN) takes a connection of its own beside them.
        prepare: for an engine built from a URL, let psycopg prepare the
            statements it runs often; False behind PgBouncer before 1.21 in
            transaction mode, which cannot keep them.
        listen: wake waiters with LISTEN/NOTIFY (PostgreSQL); False behind a
            pooler in transaction mode, where a LISTEN is lost: waiters poll
            (a task's ``wait`` within half a second, a cancel at the run's
            next heartbeat).
        **options: as for :class:`~queuestore.store.base.TaskStore`.

    Call :meth:`migrate` (or ``queuestore db upgrade``) once to create the schema.
    """

    def __init__(
        self,
        engine: Engine | str,
        *,
        keep_warm: bool = True,
        pool_size: int = DEFAULT_POOL_SIZE,
        prepare: bool = True,
        listen: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.engine = (
            make_engine(engine, pool_size=pool_size, prepare=prepare)
            if isinstance(engine, str)
            else engine
        )
        dialect = self.engine.dialect.name
        if dialect not in ("postgresql", "sqlite"):
            raise ValueError(f"SqlTaskStore supports postgresql and sqlite, not {dialect}")
        self._postgres = dialect == "postgresql"
        self._owns_engine = isinstance(engine, str)
        # Every operation is a single statement, atomic on its own: it runs in
        # autocommit, which saves the BEGIN and COMMIT round trips.
        self._executor = Executor(self.engine, keep_warm=keep_warm)
        self._clock = queries.Clock(database_clock=self._postgres)
        self._listen = listen and self._postgres
        self._polling_told = False

    def __repr__(self) -> str:
        return f"SqlTaskStore({self.engine.url.render_as_string(hide_password=True)!r})"

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema up to ``revision`` with the migrations shipped in the package.

        One process at a time migrates (see
        :func:`~queuestore.store.sql.migrations.migration_lock`); a database
        already at the newest revision costs one query.
        """
        from queuestore.store.sql.migrations import is_current, upgrade

        if revision == "head" and is_current(self.engine):
            return
        with self._transaction() as connection:
            upgrade(connection, revision)

    def after_fork(self) -> None:
        """Forget the parent's pooled connections without closing them under its feet.

        See :meth:`Executor.after_fork <queuestore.store.sql.executor.Executor.after_fork>`.
        """
        self._executor.after_fork()

    def close(self) -> None:
        """Dispose of the engine's pool if the store created the engine."""
        if self._owns_engine:
            self.engine.dispose()

    @asynccontextmanager
    async def open_async(
        self, *, max_connections: int = 4, timeout: float = 5.0
    ) -> AsyncIterator[None]:
        """On PostgreSQL, run the loop's :meth:`run_async` calls on its own connections.

        See :meth:`TaskStore.open_async`. The loop's engine is an async engine
        (psycopg's async driver) on the store engine's URL; on SQLite the calls
        keep their thread.
        """
        async with super().open_async(max_connections=max_connections, timeout=timeout):
            if not self._postgres:
                yield
                return
            async with self._executor.on_loop(max_connections=max_connections, timeout=timeout):
                yield

    async def run_async(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """See :meth:`TaskStore.run_async`."""
        opened = self._executor.opened_here()
        if opened is None:
            return await super().run_async(call, *args, **kwargs)
        return await self._executor.run_on_loop(opened, call, *args, **kwargs)

    # -- plumbing -----------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A connection in one transaction: READ COMMITTED on PostgreSQL, serialised on SQLite."""
        level = "READ COMMITTED" if self._postgres else "SERIALIZABLE"
        transactional = self.engine.execution_options(isolation_level=level)
        with self._executor.guard(), transactional.begin() as connection:
            yield connection

    def _clock_params(self, lease: timedelta | None = None) -> dict[str, Any]:
        """What a statement on the clock needs: ``now`` on SQLite, and the lease's length."""
        return self._clock.params() if lease is None else self._clock.params(lease=lease)

    def _run(
        self,
        key: object,
        build: Callable[[Sequence[ColumnElement[Any]]], ClauseElement],
        params: dict[str, Any],
        *,
        read: bool = False,
        lease: timedelta | None = None,
    ) -> Task | None:
        """Run a prepared single-row statement and return the task it returns.

        ``build(returning)`` makes the statement return the task as ``returning``:
        the row's columns, or on PostgreSQL the row as one JSON object.
        """
        params |= self._clock_params(lease)
        if self._postgres:
            rows = self._executor.rows(self._as_json(key, build), params, read=read)
            return codec.task(rows[0]) if rows else None
        prepared = self._executor.prepare(key, lambda: build(queries.COLUMNS))
        rows = self._executor.rows(prepared, params, read=read)
        return codec.task(rows[0]) if rows else None

    def _as_json(
        self, key: object, build: Callable[[Sequence[ColumnElement[Any]]], ClauseElement]
    ) -> Prepared:
        """The statement ``build`` makes for ``key``, returning its task as one JSON
        object (PostgreSQL), prepared once."""
        return self._executor.prepare(
            ("json", key), lambda: build([queries.TASK_OBJECT]), columns=[queries.TASK_JSON]
        )

    def _rows(self, statement: Select[Any]) -> list[Task]:
        """The tasks a statement built per call (off the hot path) selects, as columns."""
        with self._executor.connection() as connection:
            rows = connection.execute(statement).mappings()
            return codec.tasks([dict(row) for row in rows])

    # -- primitives ---------------------------------------------------------

    def _insert(self, new: NewTask) -> tuple[Task, bool]:
        for _ in range(_KEY_RACES):
            try:
                return self._insert_row(new), True
            except TaskConflict:
                if new.unique_key is None:
                    raise
                holder = self._key_holder(new.owner, new.unique_key)
                if holder is not None and holder.id != new.id:
                    return holder, False
                if self._fetch(new.id, OwnerScope(unscoped=True)) is not None:
                    raise
                # The holder ended between the insert and the read: the key is free.
        raise TaskConflict(f"unique key {new.unique_key!r} kept changing hands", task_id=new.id)

    def _insert_many(self, news: Sequence[NewTask]) -> list[tuple[Task, bool]]:
        with self._transaction() as connection:
            return self._insert_batch(_on(connection), news)

    def _insert_on(self, connection: Any, news: Sequence[NewTask]) -> list[tuple[Task, bool]]:
        """Insert ``news`` on the caller's connection, in the caller's transaction.

        ``connection`` is an SQLAlchemy ``Connection`` or ``Session``, or a
        psycopg ``Connection``, to this store's database. Nothing commits
        here: the rows commit or roll back with the caller's transaction. A
        taken id or a held key raises no database error, so the caller's
        transaction stays usable (the insert skips such rows).

        Raises:
            InvalidTaskData: ``connection`` is none of those, or to another kind
                of database.
            TaskConflict: a ``task_id`` is already taken; nothing is inserted.
        """
        run = self._joined(connection)
        if len(news) == 1:  # one row: a conflict inserted nothing
            return self._insert_batch(run, news)
        with _savepoint(connection):  # a conflict takes back the rows inserted before it
            return self._insert_batch(run, news)

    def _joined(self, connection: Any) -> _Statements:
        """How to run statements on a caller's connection."""
        if isinstance(connection, Session):
            connection = connection.connection()
        if isinstance(connection, Connection):
            if connection.dialect.name != self.engine.dialect.name:
                raise InvalidTaskData(
                    f"is to {connection.dialect.name}, not to this store's "
                    f"{self.engine.dialect.name}",
                    field="connection",
                )
            return _on(connection)
        if self._postgres and _is_psycopg(connection):
            return self._on_psycopg(connection)
        raise InvalidTaskData(
            "must be an SQLAlchemy Connection or Session, or a psycopg Connection, to this "
            "store's database",
            field="connection",
        )

    def _on_psycopg(self, connection: Any) -> _Statements:
        """Statements run on a psycopg connection, compiled for this store's dialect."""

        def run(statement: Executable | Prepared, params: Any) -> list[dict[str, Any]]:
            if isinstance(statement, Prepared):
                prepared = statement
            else:
                columns = list(cast(Any, statement).exported_columns)
                prepared = Prepared(cast(ClauseElement, statement), self.engine.dialect, columns)
            with connection.cursor() as cursor:
                cursor.execute(prepared.sql, prepared.arguments(params))
                rows = cursor.fetchall() if cursor.description else []
            return prepared.decoded(rows)

        return run

    def _insert_batch(self, run: _Statements, news: Sequence[NewTask]) -> list[tuple[Task, bool]]:
        """Insert ``news`` with ``run``, resolving the rows a unique key or a taken id refused."""
        done: dict[str, tuple[Task, bool]] = {}
        waiting = list(news)
        for _ in range(_KEY_RACES):
            inserted = self._insert_rows(run, waiting)
            done |= {new.id: (inserted[new.id], True) for new in waiting if new.id in inserted}
            waiting = self._held_or_taken(run, waiting, inserted, done)
            if not waiting:
                return [done[new.id] for new in news]
        raise TaskConflict("unique keys kept changing hands during the insert")

    def _insert_rows(self, run: _Statements, news: Sequence[NewTask]) -> dict[str, Task]:
        """Insert ``news`` in multi-row statements; the tasks inserted, by id.

        On PostgreSQL the documents are read back only when one of them may not
        come back as sent (:func:`codec.stored_as_sent`): decoding them is a
        third of a bulk insert's time.
        """
        fields = [self._row_params(new) for new in news]
        if self._postgres:  # one statement, the rows as one JSON array
            documents = not all(
                codec.stored_as_sent(new.input) and codec.stored_as_sent(new.metadata)
                for new in news
            )
            # Compiled once, run on the driver's cursor: SQLAlchemy's own execution
            # doubled a bulk insert's time.
            statement = self._executor.prepare(
                ("insert_many", documents),
                lambda: queries.insert_tasks(self._clock, documents=documents),
                [queries.C.id, *(queries.INSERTED if documents else queries.INSERTED[:1])],
            )
            rows = run(statement, {"rows": fields})
        else:
            now = datetime.now(UTC)
            stamped = [row | {"created_at": now + i * _TICK} for i, row in enumerate(fields)]
            rows = run(cast(Executable, queries.insert_tasks(self._clock)), stamped)
        by_id = {new.id: new for new in news}
        return {
            row["id"]: by_id[row["id"]].stamped(
                row["created_at"], input=row.get("input"), metadata=row.get("metadata")
            )
            for row in rows
        }

    def _held_or_taken(
        self,
        run: _Statements,
        news: Sequence[NewTask],
        inserted: Mapping[str, Task],
        done: dict[str, tuple[Task, bool]],
    ) -> list[NewTask]:
        """Of ``news`` not ``inserted``: each key holder goes in ``done``; a taken id
        raises TaskConflict (rolling the batch back); the rest may try again."""
        again = []
        for new in news:
            if new.id in inserted:
                continue
            holder = None
            if new.unique_key is not None:
                rows = run(
                    cast(Executable, queries.key_holder(new.owner is not None)),
                    {"owner": new.owner, "unique_key": new.unique_key},
                )
                holder = next((codec.task(row) for row in rows), None)
            if holder is not None and holder.id != new.id:
                done[new.id] = (holder, False)
            elif holder is not None or self._id_taken(run, new.id):
                raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id)
            else:
                again.append(new)  # its key's holder ended in between
        return again

    @staticmethod
    def _id_taken(run: _Statements, task_id: str) -> bool:
        return bool(run(cast(Executable, queries.fetch_task("any")), {"task_id": task_id}))

    def _key_holder(self, owner: str | None, unique_key: str) -> Task | None:
        params = {"owner": owner, "unique_key": unique_key}
        build = functools.partial(queries.key_holder, owner is not None)
        return self._run(("key_holder", owner is not None), build, params, read=True)

    def _insert_row(self, new: NewTask) -> Task:
        params = self._row_params(new) | self._clock_params()
        prepared = self._executor.prepare(
            "insert", lambda: queries.insert_task(self._clock), queries.INSERTED
        )
        dbapi = self.engine.dialect.loaded_dbapi
        try:
            rows = self._executor.rows(prepared, params, read=False)
        except dbapi.IntegrityError as exc:
            raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id) from exc
        (row,) = rows
        return new.stamped(row["created_at"], input=row["input"], metadata=row["metadata"])

    @staticmethod
    def _row_params(new: NewTask) -> dict[str, Any]:
        """The parameters of a new task's row."""
        return {
            "id": new.id,
            "name": new.name,
            "input": new.input,
            "owner": new.owner,
            "context_id": new.context_id,
            "ttl_ms": _milliseconds(new.ttl),
            "metadata": new.metadata,
            "job": new.job,
            "run_at": new.run_at,
            "unique_key": new.unique_key,
            "priority": new.priority,
            "traceparent": new.traceparent,
            "start_by": new.start_by,
            "deadline_at": new.deadline_at,
            "run_timeout_ms": _milliseconds(new.run_timeout),
        }

    def _fetch(self, task_id: str, scope: OwnerScope) -> Task | None:
        kind = queries.scope_kind(scope)
        params = {"task_id": task_id, "owner": scope.owner}
        build = functools.partial(queries.fetch_task, kind)
        return self._run(("fetch", kind), build, params, read=True)

    def _write(self, task_id: str, write: Write) -> Task | None:
        shape = WriteShape.of(
            write,
            announce=self._postgres and write.status in queries.ANNOUNCED,
            stops=self._postgres and stops_a_run(write),
            watched=self._postgres,
        )
        params = shape.params(task_id, write)
        for name in shape.columns:
            params[f"v_{name}"] = codec.column_value(params[f"v_{name}"])
        lease = None if write.claim is None else write.claim[1]
        if write.base is not None:
            return self._write_known(write, shape, params, lease)
        build = functools.partial(queries.write_task, shape, self._clock)
        return self._run(shape, build, params, lease=lease)

    def _write_known(
        self, write: Write, shape: WriteShape, params: dict[str, Any], lease: timedelta | None
    ) -> Task | None:
        """A write to a row the caller holds: only what the database decides is read back.

        What the write sends is not read back either: the status it sets, a text
        or a number, and a document a read would give back equal
        (:func:`codec.stored_as_sent`). The cost model in the docs has why.
        """
        assert write.base is not None
        sent: dict[str, Any] = {
            name: write.values[name]
            for name in shape.columns
            if name not in codec.DOCUMENTS or codec.stored_as_sent(params[f"v_{name}"])
        }
        if shape.status is not None:
            sent["status"] = shape.status
        key = ("written", shape, tuple(sent))
        prepared = self._executor.cached(key)
        if prepared is None:
            columns = queries.written_columns(shape, sent)
            prepared = self._executor.prepare(
                key, lambda: queries.write_task(shape, self._clock, columns), columns
            )
        params |= self._clock_params(lease)
        rows = self._executor.rows(prepared, params, read=False)
        return codec.task_after_write(write.base, rows[0], sent) if rows else None

    def _record_step(self, task_id: str, worker_id: str, outcome: StepOutcome) -> Step | None:
        # The result comes back only where jsonb would not store it as sent.
        with_result = self._postgres and not codec.stored_as_sent(outcome.result)
        columns = steps.recorded(with_result=with_result)
        insert = self._executor.prepare(
            ("insert_step", with_result),
            lambda: steps.insert_step(self._clock, with_result=with_result),
            columns,
        )
        error = None if outcome.error is None else outcome.error.model_dump(mode="json")
        params = {
            "task_id": task_id,
            "worker": worker_id,
            "name": outcome.name,
            "kind": outcome.kind.value,
            "status": outcome.status.value,
            "result": outcome.result,
            "error": error,
        } | self._clock.params(back=-outcome.elapsed)
        try:
            rows = self._executor.rows(insert, params, read=False)
        except self.engine.dialect.loaded_dbapi.IntegrityError:  # recorded before
            record = self._executor.prepare(
                ("record_step", with_result),
                lambda: steps.record_step(self._clock, with_result=with_result),
                columns,
            )
            rows = self._executor.rows(record, params, read=False)
        if not rows:
            return None
        row = rows[0]
        # Every value is checked already, or the database's (aware UTC timestamps).
        return Step.model_construct(
            name=outcome.name,
            kind=outcome.kind,
            status=outcome.status,
            result=row["result"] if with_result else outcome.result,
            error=outcome.error,
            attempt=row["attempt"],
            tries=row["tries"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
        )

    def _spawn(
        self, parent_id: str, worker_id: str, children: Sequence[NewChild], max_depth: int
    ) -> list[tuple[Task, bool]] | None:
        spawn = cast(Executable, tree.spawn_child(self._clock))
        try:
            with self._transaction() as connection:
                if self._postgres:  # a cancel of the parent waits for its children
                    connection.execute(
                        cast(Executable, tree.lock_parent()), {"parent_id": parent_id}
                    )
                now = datetime.now(UTC)
                inserted: dict[str, Task] = {}
                for index, new in enumerate(children):
                    params = self._child_params(new, parent_id, worker_id, max_depth)
                    params["created_at"] = now + index * _TICK
                    row = connection.execute(spawn, params).mappings().first()
                    if row is not None:
                        inserted[new.spawn_key] = codec.task(dict(row))
                parent = (
                    connection.execute(
                        cast(Executable, tree.parent_row()), {"parent_id": parent_id}
                    )
                    .mappings()
                    .first()
                )
                held = parent is not None and codec.task(dict(parent))
                if not held or held.worker_id != worker_id or held.status is not TaskStatus.WORKING:
                    raise _Refused
                if held.depth >= max_depth:
                    raise _Refused
                return self._spawned(connection, parent_id, children, inserted)
        except _Refused:
            return None

    def _spawned(
        self,
        connection: Connection,
        parent_id: str,
        children: Sequence[NewChild],
        inserted: Mapping[str, Task],
    ) -> list[tuple[Task, bool]]:
        """Each child as inserted, or as the child holding its key; one of another job raises."""
        keys = [new.spawn_key for new in children if new.spawn_key not in inserted]
        held: dict[str, Task] = {}
        if keys:
            rows = connection.execute(
                cast(Executable, tree.children_by_key(self._clock)),
                {"parent_id": parent_id, "keys": keys},
            ).mappings()
            held = {row["spawn_key"]: codec.task(dict(row)) for row in rows}
        spawned = []
        for new in children:
            if new.spawn_key in inserted:
                spawned.append((inserted[new.spawn_key], True))
                continue
            holder = held.get(new.spawn_key)
            if holder is None:  # its id was taken: a fresh random id never is
                raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id)
            if holder.name != new.name:
                raise InvalidTaskData(
                    f"{new.spawn_key!r} is the key of child {holder.id!r} of job "
                    f"{holder.name!r}, not {new.name!r}",
                    field="key",
                    task_id=holder.id,
                )
            spawned.append((holder, False))
        return spawned

    @staticmethod
    def _child_params(
        new: NewChild, parent_id: str, worker_id: str, max_depth: int
    ) -> dict[str, Any]:
        return {
            "parent_id": parent_id,
            "worker": worker_id,
            "max_depth": max_depth,
            "id": new.id,
            "name": new.name,
            "input": new.input,
            "context_id": new.context_id,
            "ttl_ms": _milliseconds(new.ttl),
            "metadata": new.metadata,
            "run_at": new.run_at,
            "priority": new.priority,
            "spawn_key": new.spawn_key,
            "start_by": new.start_by,
            "deadline_at": new.deadline_at,
            "run_timeout_ms": _milliseconds(new.run_timeout),
        }

    def _park(
        self, task_id: str, worker_id: str, message: str | None, waits_on: Sequence[str]
    ) -> Task | None:
        params: dict[str, Any] = {"task_id": task_id, "fence": worker_id, "message": message}
        params["waits_on"] = list(waits_on)
        build = functools.partial(tree.park, self._clock)
        return self._run("park", build, params)

    def _wake(self, task_ids: Sequence[str] | None, limit: int) -> list[Task]:
        given = task_ids is not None
        prepared = self._executor.prepare(
            ("wake", given), lambda: tree.wake(self._clock, given=given)
        )
        params: dict[str, Any] = self._clock_params()
        if task_ids is None:
            params["limit"] = limit
        else:
            params["task_ids"] = list(task_ids)
        woken = codec.tasks(self._executor.rows(prepared, params, read=False))
        return sorted(woken, key=lambda task: task.updated_at)

    def _cancel_descendants(self, task_id: str, reason: str) -> list[Task]:
        prepared = self._executor.prepare(
            "cancel_descendants", lambda: tree.cancel_descendants(self._clock)
        )
        params = {"task_id": task_id, "reason": reason} | self._clock_params()
        return codec.tasks(self._executor.rows(prepared, params, read=False))

    def _orphans(self, limit: int) -> list[Task]:
        return self._rows(tree.orphans(limit))

    def _past_deadlines(
        self, kind: DeadlineKind, now: datetime | None, limit: int, ago: timedelta = timedelta(0)
    ) -> list[Task]:
        before = self._clock.earlier(self._clock.at(now), ago)
        return self._rows(deadlines.past(kind, before, limit))

    def _release_held(self, task_id: str, worker_id: str) -> bool:
        prepared = self._executor.prepare("release_held", deadlines.release_held, [queries.C.id])
        params = {"task_id": task_id, "worker": worker_id}
        return bool(self._executor.rows(prepared, params, read=False))

    def _steps(self, task_id: str, scope: OwnerScope) -> list[Step] | None:
        kind = queries.scope_kind(scope)
        prepared = self._executor.prepare(
            ("steps", kind), lambda: steps.task_steps(kind), steps.STEP_COLUMNS
        )
        rows = self._executor.rows(prepared, {"task_id": task_id, "owner": scope.owner}, read=True)
        if not rows:
            return None
        return [codec.step(row) for row in rows if row["name"] is not None]

    def _page(self, query: ListQuery, after: CursorKey | None, limit: int) -> list[Task]:
        shape, params = queries.page_shape(query, after=after is not None)
        params["limit"] = limit
        if after is not None:
            params |= {"after_created_at": after.created_at, "after_id": after.task_id}
        if self._postgres:
            prepared = self._executor.prepare(
                ("json", shape),
                lambda: queries.page_tasks_json(shape),
                columns=[queries.PAGE_JSON],
            )
            return codec.tasks(self._executor.rows(prepared, params, read=True))
        prepared = self._executor.prepare(shape, lambda: queries.page_tasks(shape))
        return codec.tasks(self._executor.rows(prepared, params, read=True))

    def _count(self, query: ListQuery) -> int:
        shape, params = queries.page_shape(query, after=False)
        prepared = self._executor.prepare(
            ("count", shape), lambda: queries.count_tasks(shape), [queries.COUNT]
        )
        (row,) = self._executor.rows(prepared, params, read=True)
        return int(row["count"])

    def _delete(self, task_id: str, scope: OwnerScope) -> None:
        kind = queries.scope_kind(scope)
        prepared = self._executor.prepare(
            ("delete", kind), lambda: queries.delete_task(kind), [queries.C.id]
        )
        self._executor.rows(prepared, {"task_id": task_id, "owner": scope.owner}, read=False)

    def _delete_expired(self, ttl: timedelta, now: datetime | None, batch_size: int) -> int:
        if self._postgres:
            statement = queries.delete_expired_postgres(explicit_now=now is not None)
            params = {
                "now": now,
                "ttl": ttl,
                "batch": batch_size,
                "terminal": queries.TERMINAL_VALUES,
            }
            with self._executor.connection() as connection:
                return connection.execute(statement, params).rowcount
        clock = self._clock.at(now)
        batch = queries.delete_expired(clock, self._clock.earlier(clock, ttl), batch_size)
        with self._executor.connection() as connection:
            return connection.execute(batch).rowcount

    def _extend_lease(self, task_id: str, worker_id: str, lease: timedelta) -> Task | None:
        params = {"task_id": task_id, "worker": worker_id}
        build = functools.partial(queries.extend_lease, self._clock)
        return self._run("extend_lease", build, params, lease=lease)

    def _expired_leases(self, now: datetime | None, limit: int) -> list[Task]:
        return self._rows(queries.expired_leases(self._clock.at(now), limit))

    def _mark_published(self, marks: Sequence[tuple[str, int | None]]) -> None:
        # Off the hot path (written in batches), so built per call rather than prepared.
        for start in range(0, len(marks), queries.MARK_BATCH):
            statement = queries.mark_published(
                marks[start : start + queries.MARK_BATCH], self._clock.at()
            )
            with self._executor.connection() as connection:
                connection.execute(statement)

    def _watch_tasks(self, task_ids: Collection[str], seconds: float) -> None:
        if not self._postgres or not task_ids:
            return  # SQLite announces nothing: its feed polls
        params = {"task_ids": json.dumps(sorted(task_ids)), "seconds": seconds}
        with self._executor.connection() as connection:
            connection.execute(queries.WATCH_TASKS, params)

    def _claim_within(
        self,
        task_id: str,
        write: Write,
        limits: ConcurrencyLimits | None,
        flow: FlowControl | None = None,
    ) -> Task | None:
        limited = replace(write, limits=limits, flow=flow)
        assert limited.claim is not None
        rated = flow is not None and bool(flow.rates)
        if not self._postgres:
            if not rated:
                # One UPDATE is atomic on SQLite: it takes the write lock before it reads.
                return self._write(task_id, limited)
            assert flow is not None
            return self._claim_rated_sqlite(task_id, limited, flow)
        if not limits and not rated:
            return self._write(task_id, limited)
        shape = WriteShape.of(limited, announce=False, watched=True)
        params = shape.params(task_id, limited) | self._clock_params(limited.claim[1])
        claim = self._as_json(shape, functools.partial(queries.write_task, shape, self._clock))
        statements: list[tuple[Prepared, dict[str, Any]]] = []
        if limits:
            lock = self._executor.prepare("lock_slots", lambda: queries.LOCK_SLOTS, columns=[])
            slots = {
                "task_id": task_id,
                "owners_limited": limits.per_owner is not None,
                "limited_jobs": sorted(limits.per_job),
            }
            statements.append((lock, slots))
        if rated:
            assert flow is not None
            bucket = self._executor.prepare(
                ("lock_bucket", flow), lambda: flow_sql.lock_bucket(flow), columns=[]
            )
            statements.append((bucket, {"task_id": task_id}))
            claim = self._claim_logging_start(shape, flow)
        statements.append((claim, params))
        rows = self._executor.in_transaction(statements)
        return codec.task(rows[0]) if rows else None

    def _claim_logging_start(self, shape: WriteShape, flow: FlowControl) -> Prepared:
        """The claim of ``shape`` that logs its start in the same statement (PostgreSQL)."""

        def build() -> ClauseElement:
            claim = queries.write_task(shape, self._clock, [queries.TASK_OBJECT])
            logged: ClauseElement = flow_sql.claim_logging_start(
                claim, flow, self._clock.after_ms, queries.TASK_JSON
            )
            return logged

        return self._executor.prepare(
            ("json", "logging", shape), build, columns=[queries.TASK_JSON]
        )

    def _claim_rated_sqlite(self, task_id: str, write: Write, flow: FlowControl) -> Task | None:
        """A claim under a rate on SQLite: the claim and its start's log entry, one transaction."""
        assert write.claim is not None
        shape = WriteShape.of(write, announce=False)
        params = shape.params(task_id, write) | self._clock_params(write.claim[1])
        claim = self._executor.prepare(
            shape, lambda: queries.write_task(shape, self._clock, queries.COLUMNS)
        )
        with self._transaction() as connection:
            rows = claim.all(connection, params)
            if rows:
                logged = {"task_id": task_id, "worker": write.claim[0]} | self._clock_params()
                self._log_start(flow).all(connection, logged)
        return codec.task(rows[0]) if rows else None

    def _log_start(self, flow: FlowControl) -> Prepared:
        return self._executor.prepare(
            ("log_start", flow),
            lambda: flow_sql.log_start(flow, self._clock.after_ms),
            columns=[],
        )

    # -- flow control -------------------------------------------------------

    def _pause(
        self, key: str, kind: PauseKind, value: str, until: datetime | None, reason: str | None
    ) -> Pause:
        with self._transaction() as connection:
            given = Pause(kind, value, until, reason, _now())
            return flow_sql.pause(connection, given, _now(), postgres=self._postgres)

    def _resume(self, key: str) -> bool:
        with self._transaction() as connection:
            return flow_sql.resume(connection, key)

    def _pauses(self) -> list[Pause]:
        with self._executor.connection() as connection:
            return flow_sql.pauses(connection, _now())

    def _paused_until(self, keys: Sequence[str]) -> tuple[bool, datetime | None]:
        with self._executor.connection() as connection:
            return flow_sql.paused_until(connection, keys, _now())

    def _rate_starts(self, bucket: str) -> list[tuple[datetime, int]]:
        with self._executor.connection() as connection:
            return flow_sql.rate_starts(connection, bucket, _now())

    def _rate_use(self) -> dict[str, tuple[int, datetime | None]]:
        with self._executor.connection() as connection:
            return flow_sql.rate_use(connection, _now())

    def _reserve_wake(self, bucket: str, free_at: datetime, step: timedelta) -> datetime:
        with self._transaction() as connection:
            return flow_sql.reserve_wake(connection, bucket, free_at, step, postgres=self._postgres)

    def _prune_flow(self) -> int:
        with self._transaction() as connection:
            return flow_sql.prune(connection, _now())

    # -- push ---------------------------------------------------------------

    def _add_callback(
        self, key: str, callback: Callback, scope: OwnerScope, task_may_follow: bool
    ) -> Callback | None:
        with self._transaction() as connection:
            added, _ = deliveries.add_callback(
                connection, key, callback, scope, task_may_follow, postgres=self._postgres
            )
            return added

    def _callbacks(self, task_id: str, scope: OwnerScope) -> list[Callback]:
        with self._executor.connection() as connection:
            return deliveries.callbacks(connection, task_id, scope)

    def _remove_callbacks(self, task_id: str, callback_id: str | None, scope: OwnerScope) -> int:
        with self._transaction() as connection:
            return deliveries.remove_callbacks(connection, task_id, callback_id, scope)

    def _deliveries(self, task_id: str) -> list[Delivery]:
        with self._executor.connection() as connection:
            return deliveries.deliveries(connection, task_id)

    def _revive(self, task_id: str, delivery_id: int) -> Delivery | None:
        with self._transaction() as connection:
            return deliveries.revive(connection, task_id, delivery_id, self._clock.at())

    def _take_deliveries(self, limit: int, lease: timedelta) -> list[Outgoing]:
        now = self._clock.at()
        until = self._clock.earlier(now, -lease)
        with self._transaction() as connection:
            return deliveries.take(connection, limit, now, until, postgres=self._postgres)

    def _settle(self, delivery_id: int, tries: int, settlement: Settlement) -> bool:
        with self._executor.connection() as connection:
            return deliveries.settle(connection, delivery_id, tries, settlement, self._clock.at())

    def _count_deliveries(self) -> dict[DeliveryState, int]:
        with self._executor.connection() as connection:
            return deliveries.count(connection)

    @contextmanager
    def subscribe_deliveries(self) -> Iterator[Listener]:
        """Committed deliveries via LISTEN on PostgreSQL; plain sleeping otherwise."""
        if not self._listen:
            self._tell_polling()
            with super().subscribe_deliveries() as listen:
                yield listen
            return
        with self._listening(deliveries.DELIVERY_CHANNEL) as listen:
            yield listen

    # -- the operator's view ------------------------------------------------

    def _fold_rollup(self) -> int:
        with self._transaction() as connection:
            return operator.fold(connection, postgres=self._postgres)

    def _prune_rollup(self, short_before: datetime, long_before: datetime) -> None:
        with self._transaction() as connection:
            operator.prune(connection, short_before, long_before)

    def _current_counts(self) -> list[CurrentCount]:
        with self._executor.connection() as connection:
            return operator.current_counts(connection)

    def _series_counts(self, step: timedelta, since: datetime, *, timed: bool) -> list[SeriesCount]:
        with self._executor.connection() as connection:
            return operator.series(connection, step, since, timed=timed)

    def _job_counts(self, since: datetime) -> list[SeriesCount]:
        with self._executor.connection() as connection:
            return operator.jobs(connection, since)

    def _oldest_waiting(self, now: datetime) -> Task | None:
        found = self._rows(queries.oldest_waiting(self._clock.at(now)))
        return found[0] if found else None

    def _beat_worker(self, worker: Worker) -> None:
        with self._executor.connection() as connection:
            operator.beat(connection, worker, self._clock.at(), postgres=self._postgres)

    def _workers(self) -> list[tuple[Worker, datetime]]:
        now = self._now()
        with self._executor.connection() as connection:
            return [(worker, now) for worker in operator.workers(connection)]

    def _forget_workers(self, worker_id: str | None, beat_before: datetime | None) -> int:
        with self._executor.connection() as connection:
            return operator.forget(connection, worker_id, beat_before)

    # -- schedules ----------------------------------------------------------

    def _insert_schedule(self, schedule: Schedule) -> bool:
        with self._executor.connection() as connection:
            return schedules.insert_schedule(connection, schedule, postgres=self._postgres)

    def _fetch_schedule(self, schedule_id: str, scope: OwnerScope) -> Schedule | None:
        with self._executor.connection() as connection:
            return schedules.fetch(connection, schedule_id, scope)

    def _schedules(self, scope: OwnerScope, limit: int) -> list[Schedule]:
        with self._executor.connection() as connection:
            return schedules.listed(connection, scope, limit)

    def _due_schedules(self, now: datetime, limit: int) -> list[Schedule]:
        with self._executor.connection() as connection:
            return schedules.due(connection, now, limit)

    def _write_schedule(
        self,
        schedule_id: str,
        version: int,
        values: Mapping[str, Any],
        news: Sequence[NewTask],
    ) -> tuple[Schedule, list[Task]] | None:
        try:
            with self._transaction() as connection:
                written = schedules.write(
                    connection, schedule_id, version, values, self._clock.at()
                )
                if written is None:
                    return None
                inserted = self._insert_batch(_on(connection), news) if news else []
                return written, [task for task, _ in inserted]
        except TaskConflict:  # a task of these ticks exists: another beat made it
            return None

    def _delete_schedule(self, schedule_id: str, scope: OwnerScope) -> None:
        with self._executor.connection() as connection:
            schedules.remove(connection, schedule_id, scope)

    def _running_counts(self) -> dict[tuple[str | None, str], int]:
        with self._executor.connection() as connection:
            rows = connection.execute(queries.RUNNING_COUNTS)
            return {(owner, name): count for owner, name, count in rows}

    def _unpublished(
        self,
        older_than: timedelta,
        republish_after: timedelta | None,
        ahead: timedelta,
        limit: int,
        among: SweepFilter | None = None,
    ) -> list[Task]:
        clock = self._clock.at()
        updated_before = self._clock.earlier(clock, older_than)
        republish = None if republish_after is None else self._clock.earlier(clock, republish_after)
        starts_before = self._clock.earlier(clock, -ahead)
        due = self._rows(queries.unpublished(updated_before, republish, limit, among=among))
        due += self._rows(
            queries.scheduled(self._clock, starts_before, updated_before, ahead, limit, among=among)
        )
        return sorted(due, key=publish_order)[:limit]

    def _count_by_status(self) -> dict[TaskStatus, int]:
        with self._executor.connection() as connection:
            rows = connection.execute(queries.COUNT_BY_STATUS)
            return {TaskStatus(status): count for status, count in rows}

    def _count_unpublished(self, older_than: timedelta) -> int:
        before = self._clock.earlier(self._clock.at(), older_than)
        with self._executor.connection() as connection:
            count: int = connection.execute(queries.count_unpublished(before)).scalar_one()
        return count

    def _now(self) -> datetime:
        if not self._postgres:
            return datetime.now(UTC)
        with self._executor.connection() as connection:
            now: datetime = connection.execute(queries.CLOCK).scalar_one()
        return now

    def _changed_since(
        self,
        since: datetime,
        after: tuple[datetime, str] | None,
        limit: int,
        seen: Mapping[str, int],
    ) -> list[Task]:
        params: dict[str, Any] = {"since": since, "limit": limit, "seen": json.dumps(seen)}
        if after is not None:
            params |= {"after_updated_at": after[0], "after_id": after[1]}
        prepared = self._executor.prepare(
            ("changed", after is not None),
            lambda: queries.changed_since(self.engine.dialect.name, after=after is not None),
        )
        return codec.tasks(self._executor.rows(prepared, params, read=True))

    @contextmanager
    def subscribe(self) -> Iterator[Listener]:
        """Status changes via LISTEN on PostgreSQL; plain sleeping otherwise."""
        if not self._listen:
            self._tell_polling()
            with super().subscribe() as listen:
                yield listen
            return
        with self._listening(queries.NOTIFY_CHANNEL) as listen:
            yield listen

    @contextmanager
    def subscribe_stops(self) -> Iterator[Listener]:
        """Runs ended by a caller via LISTEN on PostgreSQL; plain sleeping otherwise."""
        if not self._listen:
            self._tell_polling()
            with super().subscribe_stops() as listen:
                yield listen
            return
        with self._listening(queries.STOP_CHANNEL) as listen:
            yield listen

    def _tell_polling(self) -> None:
        """Say once, on PostgreSQL without LISTEN, that waiters poll."""
        if self._postgres and not self._polling_told:
            self._polling_told = True
            log.info(
                "LISTEN/NOTIFY is off (database_listen=false, as behind PgBouncer in "
                "transaction mode): waits poll the database, and a running job sees a "
                "cancel at its next heartbeat"
            )

    @contextmanager
    def _listening(self, channel: str) -> Iterator[Listener]:
        """The status changes announced on ``channel``, on a connection of its own.

        It is not one of the pool's, so that a listener holds none of the
        connections the process's statements share: the budget of a process is
        its pool, and one connection a subscription.
        """
        with self._executor.guard(), self._listener_engine.connect() as connection:
            connection.exec_driver_sql(f"LISTEN {channel}")
            driver = connection.connection.driver_connection
            dbapi = self.engine.dialect.loaded_dbapi
            assert driver is not None

            def listen(seconds: float) -> list[StatusChange]:
                try:
                    changes = [
                        codec.status_change(note.payload)
                        for note in driver.notifies(timeout=seconds, stop_after=1)
                    ]
                    # Drain what else arrived, without waiting.
                    changes.extend(
                        codec.status_change(note.payload) for note in driver.notifies(timeout=0)
                    )
                except dbapi.Error as exc:
                    raise StoreUnavailable(f"lost the notification connection: {exc}") from exc
                return changes

            try:
                yield listen
            finally:
                connection.exec_driver_sql(f"UNLISTEN {channel}")

    @functools.cached_property
    def _listener_engine(self) -> Engine:
        """Connections for LISTEN, one a subscription, opened and closed with it (no pool)."""
        return create_engine(self.engine.url, poolclass=NullPool, isolation_level="AUTOCOMMIT")


def _milliseconds(duration: timedelta | None) -> int | None:
    """A duration as a column of milliseconds holds it."""
    return None if duration is None else round(duration.total_seconds() * 1000)


def _now() -> datetime:
    """The process's clock, for flow control's statements off the claim's path."""
    return datetime.now(UTC)
