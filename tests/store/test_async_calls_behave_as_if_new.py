"""The greenlets ``open_async`` runs the sync verbs in (``queuestore.store.sql.executor.run``).

Each call runs in a greenlet of its own, as SQLAlchemy's ``greenlet_spawn``
makes them; these tests hold ``run`` to what a caller expects of it: the
caller's context, its exceptions both ways, cancellation, calls that
interleave, and statements routed to the loop only for the store that ran it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest
from sqlalchemy.util import await_only

from queuestore.store.sql import executor as loop

T = TypeVar("T")

STORE, CONNECTIONS = object(), cast("loop.LoopConnections", object())
REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


async def on_loop(call: Callable[..., T], *args: Any) -> T:
    return await loop.run(STORE, CONNECTIONS, call, *args)


def test_a_call_sees_its_own_task_context_while_other_calls_interleave() -> None:
    def handle(pause: float) -> tuple[str, str]:
        before = REQUEST.get()
        await_only(asyncio.sleep(pause))
        return before, REQUEST.get()

    async def request(name: str, pause: float) -> tuple[str, str]:
        REQUEST.set(name)
        return await on_loop(handle, pause)

    async def main() -> list[tuple[str, str]]:
        first = await request("first", 0)
        assert first == ("first", "first")
        return list(await asyncio.gather(*(request(f"r{n}", 0.001 * (5 - n)) for n in range(5))))

    assert asyncio.run(main()) == [(f"r{n}", f"r{n}") for n in range(5)]
    assert REQUEST.get() == "none"


def test_the_call_sees_the_connections_and_only_its_store() -> None:
    async def main() -> tuple[object, object]:
        return await on_loop(
            lambda: (loop.loop_connections(STORE), loop.loop_connections(object()))
        )

    assert asyncio.run(main()) == (CONNECTIONS, None)
    assert loop.loop_connections(STORE) is None


def test_exceptions_cross_both_ways() -> None:
    class Refused(Exception):
        pass

    async def refuse() -> None:
        await asyncio.sleep(0)
        raise Refused("awaited")

    def catches() -> str:
        try:
            await_only(refuse())
        except Refused as exc:
            return f"caught {exc}"
        return "not raised"

    def raises() -> None:
        await_only(asyncio.sleep(0))
        raise Refused("from the call")

    async def main() -> tuple[str, int]:
        caught = await on_loop(catches)
        with pytest.raises(Refused, match="from the call"):
            await on_loop(raises)
        return caught, await on_loop(lambda: 7)  # the loop goes on after a failed call

    assert asyncio.run(main()) == ("caught awaited", 7)


def test_a_cancelled_call_unwinds_where_it_waits() -> None:
    unwound = []

    def waits() -> None:
        try:
            await_only(asyncio.sleep(60))
        finally:
            unwound.append(True)

    async def main() -> int:
        call = asyncio.ensure_future(on_loop(waits))
        await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await on_loop(lambda: 7)

    assert asyncio.run(main()) == 7
    assert unwound == [True]


def test_many_interleaved_calls_each_get_their_own_answer() -> None:
    def doubled(n: int) -> int:
        for _ in range(3):
            await_only(asyncio.sleep(0.0001 * (n % 7)))
        return 2 * n

    async def main() -> list[int]:
        return list(await asyncio.gather(*(on_loop(doubled, n) for n in range(200))))

    assert asyncio.run(main()) == [2 * n for n in range(200)]
