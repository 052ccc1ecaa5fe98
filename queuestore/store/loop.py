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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

if TYPE_CHECKING:
    from sqlalchemy import Engine

P = ParamSpec("P")
T = TypeVar("T")

_ON_LOOP: ContextVar[tuple[object, Engine] | None] = ContextVar("queuestore_on_loop", default=None)
"""The store running in this greenlet and its loop's engine (the async engine's sync face)."""


def loop_engine(store: object) -> Engine | None:
    """The engine ``store``'s statements use here: its loop's, in a greenlet :func:`run` started."""
    running = _ON_LOOP.get()
    return running[1] if running is not None and running[0] is store else None


async def run(
    store: object, engine: Engine, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run ``call`` in a greenlet on this thread; ``store``'s statements use ``engine``."""

    def on_loop() -> T:
        token = _ON_LOOP.set((store, engine))
        try:
            return call(*args, **kwargs)
        finally:
            _ON_LOOP.reset(token)

    result: T = await greenlet_spawn(on_loop)
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


__all__ = ["blocking", "loop_engine", "run"]
