"""The greenlets ``open_async`` runs the sync verbs in: kept and reused, each call as if new.

``queuestore.store.sql.executor.run`` keeps finished greenlets for the next calls
(``keep_warm``) instead of making one per call; these tests hold it to what a
fresh greenlet per call (SQLAlchemy's ``greenlet_spawn``, what it runs without
``keep_warm``) gives, and hold both ways to it: the caller's context, its
exceptions both ways, cancellation, and calls that interleave.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from greenlet import getcurrent
from sqlalchemy.util import await_only

from queuestore.store.sql import executor as loop

T = TypeVar("T")

STORE = object()
REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")
CONNECTIONS = cast("loop.LoopConnections", SimpleNamespace(keep_warm=True))
"""What a call runs on: ``keep_warm`` is all ``run`` reads of it."""


@pytest.fixture(params=[True, False], ids=["kept", "greenlet_spawn"])
def keep_warm(request: pytest.FixtureRequest) -> Iterator[bool]:
    """The test runs on kept greenlets, then on SQLAlchemy's ``greenlet_spawn``."""
    flag: bool = request.param
    CONNECTIONS.keep_warm = flag
    yield flag
    CONNECTIONS.keep_warm = True


async def on_loop(call: Callable[..., T], *args: Any) -> T:
    return await loop.run(STORE, CONNECTIONS, call, *args)


def test_a_finished_greenlet_runs_the_next_call() -> None:
    async def main() -> list[object]:
        return [await on_loop(getcurrent) for _ in range(20)]  # held: no id is reused

    assert len({id(runner) for runner in asyncio.run(main())}) == 1


def test_a_call_sees_its_own_task_context_even_in_a_greenlet_another_task_used(
    keep_warm: bool,
) -> None:
    def handle(pause: float) -> tuple[str, str]:
        before = REQUEST.get()
        await_only(asyncio.sleep(pause))
        return before, REQUEST.get()

    async def request(name: str, pause: float) -> tuple[str, str]:
        REQUEST.set(name)
        return await on_loop(handle, pause)

    async def main() -> list[tuple[str, str]]:
        first = await request("warm", 0)  # leaves an idle greenlet with the warm context
        assert first == ("warm", "warm")
        return list(await asyncio.gather(*(request(f"r{n}", 0.001 * (5 - n)) for n in range(5))))

    assert asyncio.run(main()) == [(f"r{n}", f"r{n}") for n in range(5)]
    assert REQUEST.get() == "none"


def test_the_call_sees_the_connections_and_only_its_store(keep_warm: bool) -> None:
    async def main() -> tuple[object, object]:
        return await on_loop(
            lambda: (loop.loop_connections(STORE), loop.loop_connections(object()))
        )

    assert asyncio.run(main()) == (CONNECTIONS, None)
    assert loop.loop_connections(STORE) is None


def test_exceptions_cross_both_ways_and_a_kept_greenlet_is_used_again(keep_warm: bool) -> None:
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

    async def main() -> tuple[str, object, object]:
        caught = await on_loop(catches)
        with pytest.raises(Refused, match="from the call"):
            await on_loop(raises)
        return caught, await on_loop(getcurrent), await on_loop(getcurrent)

    caught, first, second = asyncio.run(main())
    assert caught == "caught awaited"
    assert (first is second) is keep_warm  # greenlet_spawn makes one a call


def test_a_cancelled_call_unwinds_where_it_waits(keep_warm: bool) -> None:
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


def test_many_interleaved_calls_each_get_their_own_answer_and_few_greenlets_stay(
    keep_warm: bool,
) -> None:
    def doubled(n: int) -> int:
        for _ in range(3):
            await_only(asyncio.sleep(0.0001 * (n % 7)))
        return 2 * n

    async def main() -> list[int]:
        return list(await asyncio.gather(*(on_loop(doubled, n) for n in range(200))))

    assert asyncio.run(main()) == [2 * n for n in range(200)]
    assert len(getattr(loop._idle, "runners", [])) <= loop.IDLE_GREENLETS
