"""A store's sync code on an event loop's own connections: no thread hop, no blocking.

The async forms of the verbs (:mod:`queuestore.aio`, the A2A store) run the one
sync implementation off the event loop, in a worker thread. Each call then costs
three thread wake-ups instead of one, more than a read by key costs on the
database (``bench/read_paths.py``, ``bench/a2a_store.py``). Inside
:meth:`SqlTaskStore.open_async <queuestore.SqlTaskStore.open_async>` on
PostgreSQL the same sync code runs instead in a greenlet on the loop's thread,
the way SQLAlchemy's ``AsyncConnection.run_sync`` runs the ORM: every statement
goes through an async engine of that loop (psycopg's async driver), and while it
waits for the database the loop serves other coroutines. Validation, rules,
retries and observers are the sync path's own, unchanged.

Code that may run there and blocks on something else than the store (a broker
publish, a revoke) goes through :func:`blocking`, which hands it to a thread.

The greenlets are kept and reused, a few per thread, rather than made for each
call as SQLAlchemy's ``greenlet_spawn`` does: on CPython 3.11 a new greenlet
maps a fresh frame stack for its first frame and unmaps it when it dies, which
cost a call that waits on the database 20-40 µs more than the same call in a
greenlet that has run before (``bench/a2a_store.py``). The protocol is
SQLAlchemy's, so its ``await_only`` works inside them.

The loop's connections are kept the same way (:class:`LoopConnections`): a call
takes the one a previous call gave back, with its cursor, instead of checking
one out of the engine's pool and back in.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from functools import cache
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar, cast

from sqlalchemy.util import await_only

if TYPE_CHECKING:
    from greenlet import greenlet
    from psycopg import AsyncConnection, AsyncCursor
    from sqlalchemy import Engine, PoolProxiedConnection, QueuePool
    from sqlalchemy.ext.asyncio import AsyncEngine

P = ParamSpec("P")
T = TypeVar("T")

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
    in a short list, for the next call to take as it is: SQLAlchemy's
    checkout and check-in cost a store write about 19 µs more, and a new
    psycopg cursor about 5 µs (``bench/a2a_store.py``'s saves, timed inside).
    A kept connection still counts in the pool, so that the pool's limit
    holds; whenever every connection is out (someone may be waiting for one),
    a connection given back goes to the pool, and one that would be taken
    from the pool for a ``Connection`` (:meth:`release_idle`) releases the
    kept ones first.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
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
        """Keep ``lent`` for the next call, or return it to the pool if one may wait."""
        if len(self._idle) < IDLE_CONNECTIONS and not self._exhausted():
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
"""The store running in this greenlet and its loop's connections."""


def loop_connections(store: object) -> LoopConnections | None:
    """The connections ``store``'s statements use here: its loop's, in a greenlet of :func:`run`."""
    running = _ON_LOOP.get()
    return running[1] if running is not None and running[0] is store else None


async def run(
    store: object,
    connections: LoopConnections,
    call: Callable[P, T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``call`` in a greenlet on this thread; ``store``'s statements use ``connections``."""

    def on_loop() -> T:
        token = _ON_LOOP.set((store, connections))
        try:
            return call(*args, **kwargs)
        finally:
            _ON_LOOP.reset(token)

    return await _in_greenlet(on_loop)


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


__all__ = ["IDLE_CONNECTIONS", "Lent", "LoopConnections", "blocking", "loop_connections", "run"]
