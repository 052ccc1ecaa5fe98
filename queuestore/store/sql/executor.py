"""How the SQL store runs its statements: one interface, on a thread or on an event loop.

:class:`Executor` runs a :class:`Prepared` statement (compiled once per
dialect, run straight on the driver's cursor, which skips SQLAlchemy's result
machinery) wherever the store's code runs:

- on a thread (the sync verbs, and the async ones handed to a worker thread):
  on a pooled connection of the store's engine, in autocommit;
- inside :meth:`SqlTaskStore.open_async <queuestore.SqlTaskStore.open_async>`
  on PostgreSQL: the same sync code runs in a greenlet on the loop's thread
  (:func:`run`), the way SQLAlchemy's ``AsyncConnection.run_sync`` runs the
  ORM, and each statement goes through the loop's async engine (psycopg's
  async driver), so that while it waits for the database the loop serves other
  coroutines. Validation, rules, retries and observers are the sync path's own.

Code that may run there and blocks on something else than the store (a broker
publish, a revoke) goes through :func:`blocking`, which hands it to a thread.

Between calls an event loop keeps its greenlets and connections warm
(``keep_warm``, the default): finished greenlets are reused, a few per thread,
rather than made for each call as SQLAlchemy's ``greenlet_spawn`` does (on
CPython 3.11 a new greenlet maps a fresh frame stack for its first frame),
and connections stay checked out with their cursors (:class:`LoopConnections`).
That holds the A2A store's figures over a2a-sdk's ``DatabaseTaskStore``
(``bench/a2a_store.py``); the cost model in the docs has them. It follows
SQLAlchemy's greenlet protocol (its ``await_only`` works inside), and its
pool's accounting. Without it, each call runs in SQLAlchemy's own
``greenlet_spawn`` and each statement takes a connection from the loop's pool
and gives it back, as SQLAlchemy's async engine does.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from functools import cache
from typing import TYPE_CHECKING, Any, Final, NoReturn, ParamSpec, TypeVar, cast

from sqlalchemy import JSON, ColumnElement, Connection, Dialect, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_only, greenlet_spawn

from queuestore.core.errors import StoreUnavailable
from queuestore.store.sql.engine import is_autocommit, loop_engine
from queuestore.store.sql.queries import COLUMNS
from queuestore.store.sql.schema import UTCDateTime

if TYPE_CHECKING:
    from greenlet import greenlet
    from psycopg import AsyncConnection, AsyncCursor
    from sqlalchemy import PoolProxiedConnection, QueuePool
    from sqlalchemy.engine.interfaces import DBAPIModule
    from sqlalchemy.ext.asyncio import AsyncEngine

P = ParamSpec("P")
T = TypeVar("T")


class Prepared:
    """One statement compiled for one dialect, run on the driver's own cursor.

    A row holds ``columns``, then the NOTIFYs the statement sends in its
    ``RETURNING`` (``pg_notify`` returns nothing worth decoding), which are dropped.
    """

    def __init__(
        self,
        statement: ClauseElement,
        dialect: Dialect,
        columns: Sequence[ColumnElement[Any]] = COLUMNS,
    ) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        self.sql = compiled.string
        self._defaults: dict[str, Any] = {
            name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
        }
        self._order = compiled.positiontup
        binds = {
            name: bind.type.dialect_impl(dialect).bind_processor(dialect)
            for name, bind in compiled.binds.items()
        }
        self._bind = {name: process for name, process in binds.items() if process is not None}
        self._result = [(str(column.key), _result_processor(column, dialect)) for column in columns]
        returned = getattr(statement, "exported_columns", None)
        self._width = len(columns) if returned is None else max(len(returned), len(columns))

    def first(self, connection: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run with ``params`` and return the first row as ``{column: value}``, or None."""
        rows = self.all(connection, params)
        return rows[0] if rows else None

    def arguments(self, params: Mapping[str, Any]) -> Any:
        """The driver's arguments for :attr:`sql`: defaults filled in, values bound."""
        values = {**self._defaults, **params}
        for name, process in self._bind.items():
            values[name] = process(values[name])
        return values if self._order is None else [values[n] for n in self._order]

    def all(self, connection: Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run with ``params`` and return every row as ``{column: value}``."""
        dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(self.sql, self.arguments(params))
            rows = cursor.fetchall()
        finally:
            cursor.close()
        return self.decoded(rows)

    async def all_async(
        self, cursor: AsyncCursor[Any], params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """:meth:`all` on a cursor of psycopg's async connection (PostgreSQL only)."""
        await cursor.execute(self.sql, self.arguments(params))
        return self.decoded(await cursor.fetchall())

    def decoded(self, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        """The driver's rows as ``{column: value}``, JSON and timestamps converted.

        Raises:
            ValueError: a row is not as wide as the statement's ``RETURNING``.
        """
        width, decoded = self._width, len(self._result)
        for row in rows:
            if len(row) != width:
                raise ValueError(f"a row of {len(row)} values for a statement returning {width}")
        return [
            {
                key: value if process is None else process(value)
                for (key, process), value in zip(self._result, row[:decoded], strict=True)
            }
            for row in rows
        ]


def _result_processor(column: ColumnElement[Any], dialect: Dialect) -> Any:
    """SQLAlchemy's conversion of a JSON or timestamp value; the driver's own elsewhere."""
    impl = column.type.dialect_impl(dialect)
    if isinstance(impl, JSON | UTCDateTime):
        return impl.result_processor(dialect, None)
    return None


class Executor:
    """Runs the store's statements on its engine, or on the running loop's own connections.

    Args:
        engine: the store's engine; its statements run in autocommit (each is
            atomic on its own), switched per connection only if the engine is not.
        keep_warm: on an event loop, keep greenlets and connections between
            calls (the module's docstring says what it buys and costs).
    """

    def __init__(self, engine: Engine, *, keep_warm: bool = True) -> None:
        self.engine = engine
        self.keep_warm = keep_warm
        # An engine built by make_engine is in autocommit already; switching per
        # checkout costs a round trip on PostgreSQL, so only other engines are switched.
        self._statements = (
            engine
            if is_autocommit(engine)
            else engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._prepared: dict[object, Prepared] = {}
        self._pid = os.getpid()
        self._loops: dict[asyncio.AbstractEventLoop, LoopConnections] = {}

    def prepare(
        self,
        key: object,
        build: Callable[[], ClauseElement],
        columns: Sequence[ColumnElement[Any]] = COLUMNS,
    ) -> Prepared:
        """The statement for ``key``, compiled on first use for this engine's dialect."""
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = Prepared(build(), self.engine.dialect, columns)
        return prepared

    def cached(self, key: object) -> Prepared | None:
        """The statement prepared for ``key``, if it was."""
        return self._prepared.get(key)

    @contextmanager
    def guard(self) -> Iterator[None]:
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
    def connection(self) -> Iterator[Connection]:
        """A ``Connection`` on which each statement commits by itself (on the loop's, there)."""
        engine = self._statements
        on_loop = loop_connections(self)
        if on_loop is not None:
            on_loop.release_idle()  # the pool may have none left but the kept ones
            engine = on_loop.sync_engine
        with self.guard(), engine.connect() as connection:
            yield connection

    def rows(
        self, prepared: Prepared, params: dict[str, Any], *, read: bool
    ) -> list[dict[str, Any]]:
        """Run a prepared statement and return its rows, on a thread or on the loop.

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
                    return self._rows_once(prepared, params)
                return self._rows_on_loop(on_loop, prepared, params)
            except _ConnectionLost as lost:
                if attempt == tries:
                    cause = lost.__cause__
                    raise StoreUnavailable(f"database unavailable: {cause}") from cause
        raise AssertionError("unreachable")

    def _rows_once(self, prepared: Prepared, params: dict[str, Any]) -> list[dict[str, Any]]:
        """One try of :meth:`rows` on a connection of the store's engine."""
        with self.connection() as connection:
            try:
                return prepared.all(connection, params)
            except _driver_errors(connection.engine) as exc:
                driver = connection.connection.dbapi_connection
                lost = connection.dialect.is_disconnect(exc, driver, None)
                connection.invalidate(exc)
                _raise_unavailable(connection.engine, exc, lost=lost)

    def in_transaction(
        self, statements: Sequence[tuple[Prepared, Mapping[str, Any]]], *, rows_of: int = -1
    ) -> list[dict[str, Any]]:
        """Run ``statements`` in one transaction and return the rows of the one at
        ``rows_of`` (the last by default; PostgreSQL).

        They go out together in psycopg's pipeline mode, ``BEGIN`` and
        ``COMMIT`` included, so the transaction costs about one round trip
        however many statements it holds. On a failure the connection is
        dropped, taking the open transaction with it. Not on a loop's connections.

        Raises:
            StoreUnavailable: the database is unreachable (nothing was committed,
                or the commit's answer was lost).
        """
        with self.connection() as connection:
            driver = connection.connection.dbapi_connection
            assert driver is not None
            cursors = [driver.cursor() for _ in statements]
            try:
                with driver.pipeline():
                    driver.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                    for cursor, (prepared, params) in zip(cursors, statements, strict=True):
                        cursor.execute(prepared.sql, prepared.arguments(params))
                    driver.execute("COMMIT")
                rows = cursors[rows_of].fetchall()
            except _driver_errors(connection.engine) as exc:
                lost = connection.dialect.is_disconnect(exc, driver, None)
                connection.invalidate(exc)
                if lost:
                    connection.engine.pool.dispose()
                raise StoreUnavailable(f"database unavailable: {exc}") from exc
            except BaseException as exc:
                connection.invalidate(exc if isinstance(exc, Exception) else None)
                raise
            finally:
                for cursor in cursors:
                    cursor.close()
            return statements[rows_of][0].decoded(rows)

    def _rows_on_loop(
        self, connections: LoopConnections, prepared: Prepared, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One try of :meth:`rows` on the loop's connections, straight on psycopg's.

        The loop's engine is in autocommit from its connect and holds nothing
        but these connections, so a connection is lent with no ``Connection``
        around it (no execution options to apply) and kept with no reset: each
        statement commits by itself, and psycopg cancels a statement whose
        coroutine is cancelled.
        """
        lent = connections.kept()
        if lent is None:
            with self.guard():  # a checkout may find the database gone
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

    # -- the event loop's path ------------------------------------------------

    @asynccontextmanager
    async def on_loop(self, *, max_connections: int, timeout: float) -> AsyncIterator[None]:
        """While open, :meth:`run_on_loop` of this loop has an async engine of its own.

        Blocks may nest and overlap on one loop: the engine is closed with the last.
        """
        loop = asyncio.get_running_loop()
        opened = self._loops.get(loop)
        if opened is None:
            opened = self._loops[loop] = LoopConnections(
                loop_engine(self.engine.url, max_connections=max_connections, timeout=timeout),
                keep_warm=self.keep_warm,
            )
        opened.users += 1
        try:
            yield
        finally:
            opened.users -= 1
            if not opened.users:
                del self._loops[loop]
                await opened.dispose()

    def opened_here(self) -> LoopConnections | None:
        """The running loop's connections, if :meth:`on_loop` is open on it."""
        return self._loops.get(asyncio.get_running_loop()) if self._loops else None

    async def run_on_loop(
        self,
        connections: LoopConnections,
        call: Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``call(*args, **kwargs)`` in a greenlet on this thread, on ``connections``."""
        return await run(self, connections, call, *args, **kwargs)

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


IDLE_CONNECTIONS: Final = 4
"""How many connections an event loop keeps between its calls, out of its pool."""


class Lent:
    """A connection of a loop's pool, lent to one call, with the cursor it keeps."""

    __slots__ = ("cursor", "pooled")

    def __init__(self, pooled: PoolProxiedConnection) -> None:
        self.pooled = pooled
        driver: AsyncConnection[Any] | None = pooled.driver_connection
        assert driver is not None
        self.cursor: AsyncCursor[Any] = driver.cursor()


class LoopConnections:
    """An event loop's async engine, and the connections it keeps between calls.

    A call that gives its connection back leaves it checked out of the pool,
    in a short list, for the next call to take as it is, with its cursor,
    rather than checked in and out again (the cost model in the docs has why).
    A kept connection still counts in the pool, so that the pool's limit
    holds; whenever every connection is out (someone may be waiting for one),
    a connection given back goes to the pool, and one that would be taken
    from the pool for a ``Connection`` (:meth:`release_idle`) releases the
    kept ones first. Without ``keep_warm`` none is kept: every connection
    given back returns to the pool, as SQLAlchemy's async engine does.
    """

    def __init__(self, engine: AsyncEngine, *, keep_warm: bool = True) -> None:
        self.engine = engine
        self.keep_warm = keep_warm  # False: none are kept, and greenlets are SQLAlchemy's
        self.users = 0  # the open_async blocks open on this loop
        self._idle: list[Lent] = []

    @property
    def sync_engine(self) -> Engine:
        """The async engine's sync face, for ``Connection`` and the pool."""
        return self.engine.sync_engine

    def kept(self) -> Lent | None:
        """A connection a previous call gave back, if one is kept."""
        return self._idle.pop() if self._idle else None

    def lend(self) -> Lent:
        """A connection for one call: a kept one, or one checked out of the pool."""
        kept = self.kept()
        return kept if kept is not None else Lent(self.sync_engine.raw_connection())

    def give_back(self, lent: Lent) -> None:
        """Keep ``lent`` for the next call, or return it to the pool (always
        without ``keep_warm``, and whenever a call may be waiting for one)."""
        if self.keep_warm and len(self._idle) < IDLE_CONNECTIONS and not self._exhausted():
            self._idle.append(lent)
        else:
            lent.pooled.close()

    def release_idle(self) -> None:
        """Return the kept connections to the pool when it has none left to lend."""
        if self._idle and self._exhausted():
            self.drop_idle(invalidate=False)

    def drop_idle(self, *, invalidate: bool) -> None:
        """Return every kept connection to the pool, or close them (``invalidate``)."""
        idle, self._idle = self._idle, []
        for lent in idle:
            if invalidate:
                lent.pooled.invalidate()
            else:
                lent.pooled.close()

    async def dispose(self) -> None:
        """Close every connection: the kept ones and the pool's."""
        self.drop_idle(invalidate=False)
        await self.engine.dispose()

    def _exhausted(self) -> bool:
        """Whether every connection of the pool is out: a call may be waiting for one."""
        pool = cast("QueuePool", self.sync_engine.pool)
        return pool.checkedout() >= pool.size()


_ON_LOOP: ContextVar[tuple[object, LoopConnections] | None] = ContextVar(
    "queuestore_on_loop", default=None
)
"""The owner (an executor) running in this greenlet and its loop's connections."""


def loop_connections(owner: object) -> LoopConnections | None:
    """The connections ``owner``'s statements use here: its loop's, in a greenlet of :func:`run`.

    ``owner`` is what :func:`run` was given with the connections (an :class:`Executor`).
    """
    running = _ON_LOOP.get()
    return running[1] if running is not None and running[0] is owner else None


async def run(
    owner: object,
    connections: LoopConnections,
    call: Callable[P, T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``call`` in a greenlet on this thread; ``owner``'s statements use ``connections``."""

    def on_loop() -> T:
        token = _ON_LOOP.set((owner, connections))
        try:
            return call(*args, **kwargs)
        finally:
            _ON_LOOP.reset(token)

    if connections.keep_warm:
        return await _in_greenlet(on_loop)
    return await greenlet_spawn(on_loop)


IDLE_GREENLETS: Final = 16
"""How many finished greenlets each thread keeps for the next calls."""

_idle = threading.local()


class _Outcome:
    """How a call in a kept greenlet ended: its value, or the exception it raised."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error


@cache
def _greenlets() -> tuple[type[greenlet], Callable[[], greenlet]]:
    """The kept greenlet's class and ``getcurrent`` (imported only where a loop uses them)."""
    from greenlet import GreenletExit, getcurrent, greenlet  # an optional dependency

    class Runner(greenlet):
        """A greenlet that runs one call after another, each sent in by a switch."""

        # What SQLAlchemy's await_only asks of the greenlet it is called in.
        __sqlalchemy_greenlet_provider__ = True

        def __init__(self) -> None:
            super().__init__(self._serve)

        def _serve(self, call: Callable[[], Any]) -> None:
            while True:
                try:
                    outcome = _Outcome(value=call())
                except GreenletExit:
                    raise  # the greenlet itself is being dropped
                except BaseException as exc:  # handed to the caller as is
                    outcome = _Outcome(error=exc)
                del call
                parent = self.parent
                assert parent is not None
                call = parent.switch(outcome)

    return Runner, getcurrent


async def _in_greenlet(call: Callable[[], T]) -> T:
    """``call()`` in a kept greenlet, its ``await_only`` awaitables awaited here.

    As ``greenlet_spawn``: the call runs in this task's context, an exception
    of an awaitable is thrown into the call where it waited, and the call's
    own exception is raised here.
    """
    runner_class, getcurrent = _greenlets()
    idle: list[greenlet] = _idle.__dict__.setdefault("runners", [])
    runner = idle.pop() if idle else runner_class()
    current = getcurrent()
    runner.parent = current
    runner.gr_context = current.gr_context
    step = runner.switch(call)
    while not isinstance(step, _Outcome):
        try:
            value = await step
        except BaseException:  # thrown into the call, which decides
            step = runner.throw(*sys.exc_info())
        else:
            step = runner.switch(value)
    runner.gr_context = None  # keep no task's context alive while idle
    if len(idle) < IDLE_GREENLETS:
        idle.append(runner)
    if step.error is not None:
        error, step.error = step.error, None
        raise error
    result: T = step.value
    return result


def blocking(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``call``, in a worker thread when on a loop's greenlet (the loop keeps running).

    For the calls that block on something else than the store: a broker
    publish, a revoke. Outside a greenlet of :func:`run` it is a plain call.
    """
    if _ON_LOOP.get() is None:
        return call(*args, **kwargs)

    def off_loop() -> T:
        _ON_LOOP.set(None)  # the thread's copy of the context: statements go the sync way
        return call(*args, **kwargs)

    result: T = await_only(asyncio.to_thread(off_loop))
    return result
