"""The SQL store: SQLite (the embedded default) and PostgreSQL through psycopg 3.

Every status write is one ``UPDATE ... WHERE id = :id AND status IN (...)
RETURNING ...`` statement: compare-and-set in the database, never
read-modify-write in Python. Timestamps come from PostgreSQL's clock; an
embedded SQLite file has one process's clock at a time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Interval,
    Row,
    and_,
    create_engine,
    delete,
    event,
    func,
    literal,
    make_url,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql import ClauseElement
from sqlalchemy.util import await_only

from queuestore.cursor import CursorKey
from queuestore.errors import StoreUnavailable, TaskConflict
from queuestore.models import TERMINAL, Artifact, Task, TaskError, TaskStatus
from queuestore.owner import OwnerScope
from queuestore.store import statements
from queuestore.store.base import TaskStore
from queuestore.store.loop import LoopConnections, loop_connections
from queuestore.store.loop import run as run_on_loop
from queuestore.store.protocol import stops_a_run
from queuestore.store.rules import (
    ListQuery,
    NewTask,
    Write,
)
from queuestore.store.schema import UTCDateTime
from queuestore.store.statements import Clock, PageShape, Prepared, WriteShape
from queuestore.watch import Listener, StatusChange

if TYPE_CHECKING:
    from sqlalchemy import URL
    from sqlalchemy.engine.interfaces import DBAPIModule
    from sqlalchemy.ext.asyncio import AsyncEngine

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)

_MARK_BATCH = 500
"""Dispatch marks per statement, which keeps its parameters few."""

_T = statements.TABLE
_C = statements.C
_COLUMNS = statements.COLUMNS
NOTIFY_CHANNEL = statements.NOTIFY_CHANNEL
STOP_CHANNEL = statements.STOP_CHANNEL
_PAGE = TypeAdapter(list[Task])
_TERMINAL_VALUES = sorted(status.value for status in TERMINAL)
_ANNOUNCED = TERMINAL | {TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED}
"""Statuses announced on :data:`NOTIFY_CHANNEL`: the ones ``wait`` and cancels need.

A NOTIFY makes its commit dearer, so the frequent changes (a claim) stay quiet.
"""


def make_engine(url: str, **options: Any) -> Engine:
    """An engine tuned for the store: WAL and a busy timeout on SQLite, psycopg 3 on PostgreSQL.

    ``postgresql://`` URLs use psycopg 3. The folder of an SQLite file is created.
    Connections are in autocommit: every store operation is one statement,
    atomic on its own, so BEGIN and COMMIT would only add round trips.
    Documents go to psycopg encoded by pydantic-core (``json_serializer``),
    several times faster than ``json.dumps`` and already what validation
    measures them with. No pre-ping: it would cost a round trip per operation.
    A connection that died with the server is invalidated on first use
    (raising ``StoreUnavailable``) and the pool reconnects on the next call.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        options.setdefault("connect_args", {}).setdefault("timeout", 30)
        options.setdefault("isolation_level", "AUTOCOMMIT")
        engine = create_engine(parsed, **options)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    options.setdefault("isolation_level", "AUTOCOMMIT")
    if parsed.get_driver_name() == "psycopg":
        options.setdefault("json_serializer", to_json)
    return create_engine(parsed, **options)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class SqlTaskStore(TaskStore):
    """Tasks in one SQL table, ``queuestore_tasks``, on SQLite or PostgreSQL.

    Args:
        engine: an SQLAlchemy engine, or a URL to build one with :func:`make_engine`.
        **options: as for :class:`~queuestore.store.base.TaskStore`.

    Call :meth:`migrate` (or ``queuestore db upgrade``) once to create the schema.
    """

    def __init__(self, engine: Engine | str, **options: Any) -> None:
        super().__init__(**options)
        self.engine = make_engine(engine) if isinstance(engine, str) else engine
        dialect = self.engine.dialect.name
        if dialect not in ("postgresql", "sqlite"):
            raise ValueError(f"SqlTaskStore supports postgresql and sqlite, not {dialect}")
        self._postgres = dialect == "postgresql"
        self._owns_engine = isinstance(engine, str)
        # Every operation is a single statement, atomic on its own: running it in
        # autocommit saves the BEGIN and COMMIT round trips. An engine built by
        # make_engine is in autocommit already; switching per checkout costs a
        # round trip on PostgreSQL, so only other engines are switched.
        if _autocommit(self.engine):
            self._statements = self.engine
        else:
            self._statements = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._clock_sql = Clock(database_clock=self._postgres)
        self._prepared: dict[object, Prepared] = {}
        self._pid = os.getpid()
        self._loops: dict[asyncio.AbstractEventLoop, LoopConnections] = {}

    def __repr__(self) -> str:
        return f"SqlTaskStore({self.engine.url.render_as_string(hide_password=True)!r})"

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema up to ``revision`` with the migrations shipped in the package."""
        from queuestore.migrations import upgrade

        level = "READ COMMITTED" if self._postgres else "SERIALIZABLE"
        transactional = self.engine.execution_options(isolation_level=level)
        with self._guard(), transactional.begin() as connection:
            upgrade(connection, revision)

    def after_fork(self) -> None:
        """Forget the parent's pooled connections without closing them under its feet.

        Only in a process forked since: Celery also sends ``worker_process_init``
        from pools that do not fork (solo, threads), where the connections are
        this process's own and dropping them unclosed would leak them.
        """
        if os.getpid() == self._pid:
            return
        self._pid = os.getpid()
        self.engine.dispose(close=False)
        self._loops = {}  # the parent's event loops and their connections

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
            loop = asyncio.get_running_loop()
            opened = self._loops.get(loop)
            if opened is None:
                opened = self._loops[loop] = LoopConnections(
                    _loop_engine(self.engine.url, max_connections=max_connections, timeout=timeout)
                )
            opened.users += 1
            try:
                yield
            finally:
                opened.users -= 1
                if not opened.users:
                    del self._loops[loop]
                    await opened.dispose()

    async def run_async(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """See :meth:`TaskStore.run_async`."""
        opened = self._loops.get(asyncio.get_running_loop()) if self._loops else None
        if opened is None:
            return await super().run_async(call, *args, **kwargs)
        return await run_on_loop(self, opened, call, *args, **kwargs)

    # -- plumbing -----------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """The database's connection failures as ``StoreUnavailable``.

        SQLAlchemy wraps the driver's errors on a ``Connection``; a pool's own
        checkout (``raw_connection``) raises them as they are.
        """
        try:
            yield
        except _driver_errors(self.engine) as exc:
            raise StoreUnavailable(f"database unavailable: {exc}") from exc
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
            raise StoreUnavailable(f"database unavailable: {exc.orig or exc}") from exc
        except sa_exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise StoreUnavailable(f"database connection lost: {exc.orig}") from exc
            raise

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A connection on which each statement commits by itself."""
        engine = self._statements
        on_loop = loop_connections(self)
        if on_loop is not None:
            on_loop.release_idle()  # the pool may have none left but the kept ones
            engine = on_loop.sync_engine
        with self._guard(), engine.connect() as connection:
            yield connection

    def _clock(self, now: datetime | None = None) -> ColumnElement[datetime]:
        """Now, from the database's clock where it has one."""
        if now is None and self._postgres:
            return func.now().cast(UTCDateTime)
        return literal(now or datetime.now(UTC), UTCDateTime)

    def _earlier(self, clock: ColumnElement[datetime], delta: timedelta) -> ColumnElement[datetime]:
        if self._postgres:
            return (clock - literal(delta, Interval())).cast(UTCDateTime)
        return literal(_value_of(clock) - delta, UTCDateTime)

    def _clock_params(self, lease: timedelta | None = None) -> dict[str, Any]:
        """What a statement on the clock needs: ``now`` on SQLite, and the lease's length."""
        return self._clock_sql.params() if lease is None else self._clock_sql.params(lease=lease)

    def _prepare(
        self,
        key: object,
        build: Callable[[], ClauseElement],
        columns: Sequence[ColumnElement[Any]] = _COLUMNS,
    ) -> Prepared:
        """The statement for ``key``, compiled on first use for this store's dialect."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = Prepared(build(), self.engine.dialect, columns)
        return prepared

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
            prepared = self._prepare(
                ("json", key),
                lambda: build([statements.TASK_OBJECT]),
                columns=[statements.TASK_JSON],
            )
            rows = self._execute(prepared, params, read=read)
            return Task.model_validate_json(rows[0]["task"]) if rows else None
        rows = self._execute(self._prepare(key, lambda: build(_COLUMNS)), params, read=read)
        return _task_from(rows[0]) if rows else None

    def _execute(
        self, prepared: Prepared, params: dict[str, Any], *, read: bool
    ) -> list[dict[str, Any]]:
        """Run a prepared statement on a pooled connection of the driver's.

        When the server restarted, every pooled connection is dead: the pool is
        emptied, and a read is tried once more on a fresh connection (a write is
        not: it may have reached the server before the connection dropped).

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        on_loop = loop_connections(self)
        tries = 2 if read else 1
        for attempt in range(1, tries + 1):
            try:
                if on_loop is None:
                    return self._execute_once(prepared, params)
                return self._execute_on_loop(on_loop, prepared, params)
            except _ConnectionLost as lost:
                if attempt == tries:
                    cause = lost.__cause__
                    raise StoreUnavailable(f"database unavailable: {cause}") from cause
        raise AssertionError("unreachable")

    def _execute_once(self, prepared: Prepared, params: dict[str, Any]) -> list[dict[str, Any]]:
        """One try of :meth:`_execute` on a connection of the store's engine."""
        with self._transaction() as connection:
            try:
                return prepared.all(connection, params)
            except _driver_errors(connection.engine) as exc:
                driver = connection.connection.dbapi_connection
                lost = connection.dialect.is_disconnect(exc, driver, None)
                connection.invalidate(exc)
                _raise_unavailable(connection.engine, exc, lost=lost)

    def _execute_on_loop(
        self, connections: LoopConnections, prepared: Prepared, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One try of :meth:`_execute` on the loop's connections, straight on psycopg's.

        The loop's engine is in autocommit from its connect and holds nothing
        but these connections, so a connection is lent with no ``Connection``
        around it (no execution options to apply) and kept with no reset: each
        statement commits by itself, and psycopg cancels a statement whose
        coroutine is cancelled.
        """
        lent = connections.kept()
        if lent is None:
            with self._guard():  # a checkout may find the database gone
                lent = connections.lend()
        try:
            rows = await_only(prepared.all_async(lent.cursor, params))
        except _driver_errors(connections.sync_engine) as exc:
            lost = connections.sync_engine.dialect.is_disconnect(
                exc, lent.pooled.driver_connection, None
            )
            lent.pooled.invalidate(exc)
            if lost:
                connections.drop_idle(invalidate=True)  # as dead as this one
            _raise_unavailable(connections.sync_engine, exc, lost=lost)
        except BaseException:
            connections.give_back(lent)
            raise
        connections.give_back(lent)
        return rows

    # -- primitives ---------------------------------------------------------

    def _insert(self, new: NewTask) -> Task:
        params = {
            "id": new.id,
            "name": new.name,
            "input": new.input,
            "owner": new.owner,
            "context_id": new.context_id,
            "ttl_ms": None if new.ttl is None else round(new.ttl.total_seconds() * 1000),
            "metadata": new.metadata,
            "job": new.job,
        }
        params |= self._clock_params()
        prepared = self._prepare(
            "insert", lambda: statements.insert_task(self._clock_sql), statements.INSERTED
        )
        dbapi = self.engine.dialect.loaded_dbapi
        try:
            rows = self._execute(prepared, params, read=False)
        except dbapi.IntegrityError as exc:
            raise TaskConflict(f"task id {new.id!r} is taken", task_id=new.id) from exc
        (row,) = rows
        kept = replace(new, input=row["input"], metadata=row["metadata"])
        return kept.stamped(row["created_at"])

    def _fetch(self, task_id: str, scope: OwnerScope) -> Task | None:
        kind = statements.scope_kind(scope)
        params = {"task_id": task_id, "owner": scope.owner}
        build = functools.partial(statements.fetch_task, kind)
        return self._run(("fetch", kind), build, params, read=True)

    def _write(self, task_id: str, write: Write) -> Task | None:
        shape = WriteShape.of(
            write,
            announce=self._postgres and write.status in _ANNOUNCED,
            stops=self._postgres and stops_a_run(write),
            watched=self._postgres,
        )
        params = shape.params(task_id, write)
        for name in shape.columns:
            params[f"v_{name}"] = _column_value(params[f"v_{name}"])
        lease = None if write.claim is None else write.claim[1]
        if write.base is not None:
            return self._write_known(write, shape, params, lease)
        build = functools.partial(statements.write_task, shape, self._clock_sql)
        return self._run(shape, build, params, lease=lease)

    def _write_known(
        self, write: Write, shape: WriteShape, params: dict[str, Any], lease: timedelta | None
    ) -> Task | None:
        """A write to a row the caller holds: only what the database decides is read back.

        Building the whole row as JSON cost the server about 20 µs a write
        (``EXPLAIN ANALYZE``), and parsing it the client about 10 µs more. What
        the write sends is not read back either: the status it sets, a text or a
        number, and a document a read would give back equal
        (:func:`statements.stored_as_sent`). Returning the A2A task's envelope
        cost an update about 20 µs more (raw psycopg, statements alternating).
        """
        assert write.base is not None
        sent: dict[str, Any] = {
            name: write.values[name]
            for name in shape.columns
            if name not in statements.DOCUMENTS or statements.stored_as_sent(params[f"v_{name}"])
        }
        if shape.status is not None:
            sent["status"] = shape.status
        key = ("written", shape, tuple(sent))
        prepared = self._prepared.get(key)
        if prepared is None:
            columns = statements.written_columns(shape, sent)
            prepared = self._prepare(
                key, lambda: statements.write_task(shape, self._clock_sql, columns), columns
            )
        params |= self._clock_params(lease)
        rows = self._execute(prepared, params, read=False)
        return _rewritten(write.base, rows[0], sent) if rows else None

    def _page(self, query: ListQuery, after: CursorKey | None, limit: int) -> list[Task]:
        shape, params = _page_shape(query, after=after is not None)
        params["limit"] = limit
        if after is not None:
            params |= {"after_created_at": after.created_at, "after_id": after.task_id}
        if self._postgres:
            prepared = self._prepare(
                ("json", shape),
                lambda: statements.page_tasks_json(shape),
                columns=[statements.PAGE_JSON],
            )
            (row,) = self._execute(prepared, params, read=True)
            return _PAGE.validate_json(row["page"])
        prepared = self._prepare(shape, lambda: statements.page_tasks(shape))
        return [_task_from(row) for row in self._execute(prepared, params, read=True)]

    def _count(self, query: ListQuery) -> int:
        shape, params = _page_shape(query, after=False)
        prepared = self._prepare(
            ("count", shape), lambda: statements.count_tasks(shape), [statements.COUNT]
        )
        (row,) = self._execute(prepared, params, read=True)
        return int(row["count"])

    def _delete(self, task_id: str, scope: OwnerScope) -> None:
        kind = statements.scope_kind(scope)
        prepared = self._prepare(("delete", kind), lambda: statements.delete_task(kind), [_C.id])
        self._execute(prepared, {"task_id": task_id, "owner": scope.owner}, read=False)

    def _delete_expired(self, ttl: timedelta, now: datetime | None, batch_size: int) -> int:
        if self._postgres:
            statement = statements.delete_expired_postgres(explicit_now=now is not None)
            params = {"now": now, "ttl": ttl, "batch": batch_size, "terminal": _TERMINAL_VALUES}
            with self._transaction() as connection:
                return connection.execute(statement, params).rowcount
        clock = self._clock(now)
        expired = and_(
            _C.status.in_(_TERMINAL_VALUES),
            or_(
                and_(_C.expires_at.is_not(None), _C.expires_at <= clock),
                and_(
                    _C.expires_at.is_(None),
                    _C.finished_at.is_not(None),
                    _C.finished_at <= self._earlier(clock, ttl),
                ),
            ),
        )
        batch = select(_C.id).where(expired).limit(batch_size)
        with self._transaction() as connection:
            return connection.execute(delete(_T).where(_C.id.in_(batch))).rowcount

    def _extend_lease(self, task_id: str, worker_id: str, lease: timedelta) -> Task | None:
        params = {"task_id": task_id, "worker": worker_id}
        build = functools.partial(statements.extend_lease, self._clock_sql)
        return self._run("extend_lease", build, params, lease=lease)

    def _expired_leases(self, now: datetime | None, limit: int) -> list[Task]:
        statement = (
            select(*_COLUMNS)
            .where(
                _C.lease_expires_at.is_not(None),
                _C.lease_expires_at < self._clock(now),
                _C.status == TaskStatus.WORKING.value,
            )
            .order_by(_C.lease_expires_at)
            .limit(limit)
        )
        with self._transaction() as connection:
            return [_to_task(row) for row in connection.execute(statement)]

    def _mark_dispatched(self, marks: Sequence[tuple[str, int | None]]) -> None:
        # Off the hot path (written in batches), so built per call rather than prepared.
        for start in range(0, len(marks), _MARK_BATCH):
            batch = marks[start : start + _MARK_BATCH]
            versioned = [(task_id, version) for task_id, version in batch if version is not None]
            plain = [task_id for task_id, version in batch if version is None]
            which = []
            if versioned:
                which.append(tuple_(_C.id, _C.version).in_(versioned))
            if plain:
                which.append(_C.id.in_(plain))
            statement = update(_T).where(or_(*which)).values(dispatched_at=self._clock())
            with self._transaction() as connection:
                connection.execute(statement)

    def _watch_tasks(self, task_ids: Collection[str], seconds: float) -> None:
        if not self._postgres or not task_ids:
            return  # SQLite announces nothing: its feed polls
        params = {"task_ids": json.dumps(sorted(task_ids)), "seconds": seconds}
        with self._transaction() as connection:
            connection.execute(statements.WATCH_TASKS, params)

    def _undispatched(
        self, older_than: timedelta, redispatch_after: timedelta | None, limit: int
    ) -> list[Task]:
        clock = self._clock()
        due = and_(_C.dispatched_at.is_(None), _C.updated_at <= self._earlier(clock, older_than))
        if redispatch_after is not None:
            due = or_(due, _C.dispatched_at <= self._earlier(clock, redispatch_after))
        statement = (
            select(*_COLUMNS)
            .where(
                _C.job,
                _C.status.in_([TaskStatus.SUBMITTED.value, TaskStatus.WORKING.value]),
                _C.worker_id.is_(None),
                due,
            )
            .order_by(_C.updated_at)
            .limit(limit)
        )
        with self._transaction() as connection:
            return [_to_task(row) for row in connection.execute(statement)]

    def _count_by_status(self) -> dict[TaskStatus, int]:
        with self._transaction() as connection:
            rows = connection.execute(statements.COUNT_BY_STATUS)
            return {TaskStatus(status): count for status, count in rows}

    def _count_undispatched(self, older_than: timedelta) -> int:
        before = self._earlier(self._clock(), older_than)
        with self._transaction() as connection:
            count: int = connection.execute(statements.count_undispatched(before)).scalar_one()
        return count

    def _now(self) -> datetime:
        if not self._postgres:
            return datetime.now(UTC)
        with self._transaction() as connection:
            now: datetime = connection.execute(statements.CLOCK).scalar_one()
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
        prepared = self._prepare(
            ("changed", after is not None),
            lambda: statements.changed_since(self.engine.dialect.name, after=after is not None),
        )
        return [_task_from(row) for row in self._execute(prepared, params, read=True)]

    @contextmanager
    def subscribe(self) -> Iterator[Listener]:
        """Status changes via LISTEN on PostgreSQL; plain sleeping on SQLite."""
        if not self._postgres:
            with super().subscribe() as listen:
                yield listen
            return
        with self._listening(NOTIFY_CHANNEL) as listen:
            yield listen

    @contextmanager
    def subscribe_stops(self) -> Iterator[Listener]:
        """Runs ended by a caller via LISTEN on PostgreSQL; plain sleeping on SQLite."""
        if not self._postgres:
            with super().subscribe_stops() as listen:
                yield listen
            return
        with self._listening(STOP_CHANNEL) as listen:
            yield listen

    @contextmanager
    def _listening(self, channel: str) -> Iterator[Listener]:
        """The status changes announced on ``channel``, on a connection of its own."""
        autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        with self._guard(), autocommit.connect() as connection:
            connection.exec_driver_sql(f"LISTEN {channel}")
            driver = connection.connection.driver_connection
            dbapi = self.engine.dialect.loaded_dbapi
            assert driver is not None

            def listen(seconds: float) -> list[StatusChange]:
                try:
                    changes = [
                        _parse_change(note.payload)
                        for note in driver.notifies(timeout=seconds, stop_after=1)
                    ]
                    # Drain what else arrived, without waiting.
                    changes.extend(
                        _parse_change(note.payload) for note in driver.notifies(timeout=0)
                    )
                except dbapi.Error as exc:
                    raise StoreUnavailable(f"lost the notification connection: {exc}") from exc
                return changes

            try:
                yield listen
            finally:
                connection.exec_driver_sql(f"UNLISTEN {channel}")


class _ConnectionLost(Exception):
    """The server closed the connection (restarted): a read may be tried again."""


def _driver_errors(engine: Engine) -> tuple[type[DBAPIModule.Error], ...]:
    """The driver's errors of a connection (rather than of a statement)."""
    dbapi = engine.dialect.loaded_dbapi
    return (dbapi.OperationalError, dbapi.InterfaceError)


def _raise_unavailable(engine: Engine, exc: Exception, *, lost: bool) -> NoReturn:
    """Raise for a failed statement; when the connection was lost, empty the pool first.

    When the server restarted, every pooled connection is dead.
    """
    if lost:
        engine.pool.dispose()
        raise _ConnectionLost from exc
    raise StoreUnavailable(f"database unavailable: {exc}") from exc


def _page_shape(query: ListQuery, *, after: bool) -> tuple[PageShape, dict[str, Any]]:
    """The statement shape of a listing's filters, and their parameters."""
    shape = PageShape(
        scope=statements.scope_kind(query.scope),
        statuses=query.statuses,
        context_id=query.context_id is not None,
        name=query.name is not None,
        updated_after=query.updated_after is not None,
        after=after,
    )
    params: dict[str, Any] = {
        "owner": query.scope.owner,
        "context_id": query.context_id,
        "name": query.name,
        "updated_after": query.updated_after,
    }
    return shape, params


def _parse_change(payload: str) -> StatusChange:
    task_id, _, status = payload.rpartition(":")
    return task_id, TaskStatus(status)


def _loop_engine(url: URL, *, max_connections: int, timeout: float) -> AsyncEngine:
    """An event loop's async engine on ``url``: psycopg 3, in autocommit."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        url.set(drivername="postgresql+psycopg"),  # psycopg 3, whatever the sync driver
        isolation_level="AUTOCOMMIT",
        pool_reset_on_return=None,  # autocommit: no transaction is ever left open
        json_serializer=to_json,
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=timeout,
    )


def _autocommit(engine: Engine) -> bool:
    level = engine.get_execution_options().get("isolation_level")
    if level is None:
        level = getattr(engine.dialect, "_on_connect_isolation_level", None)
    return level == "AUTOCOMMIT"


def _column_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_column_value(item) for item in value]
    return value


def _value_of(clock: ColumnElement[datetime]) -> datetime:
    value = getattr(clock, "value", None)
    if not isinstance(value, datetime):
        raise TypeError("only a literal clock can be shifted in Python")
    return value


def _to_task(row: Row[Any]) -> Task:
    return _task_from(dict(row._mapping))  # noqa: SLF001 - SQLAlchemy's public row mapping


_WRITTEN_AS: dict[str, Callable[[Any], Any]] = {
    "error": TypeAdapter(TaskError | None).validate_python,
    "artifacts": TypeAdapter(list[Artifact]).validate_python,
}
"""The columns a write returns that a ``Task`` holds as another type than the driver's."""


def _rewritten(base: Task, written: Mapping[str, Any], sent: Mapping[str, Any]) -> Task:
    """``base`` with the columns a write returned and the values it ``sent`` as they are.

    Only the returned values the driver does not give as ``Task`` holds them
    are converted: validating the whole task again cost three times as much as
    parsing the row from JSON.
    """
    changes = {
        name: value if (convert := _WRITTEN_AS.get(name)) is None else convert(value)
        for name, value in written.items()
    }
    return base.model_copy(update={**changes, **sent})


def _task_from(fields: dict[str, Any]) -> Task:
    ttl_ms = fields.pop("ttl_ms")
    fields["ttl"] = None if ttl_ms is None else timedelta(milliseconds=ttl_ms)
    return Task.model_validate(fields)
