"""An unreachable database raises StoreUnavailable, with the driver's error chained."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from queuestore import ConcurrencyLimits, QueueStoreError, SqlTaskStore, StoreUnavailable, TaskStore

from .support import CLOSED_PORT_URL

CALLS: dict[str, Callable[[TaskStore], object]] = {
    "create": lambda store: store.create("x.y"),
    "get": lambda store: store.get("some-id"),
    "list": lambda store: store.list(),
    "update": lambda store: store.update("some-id", progress=0.5),
    "cancel": lambda store: store.cancel("some-id"),
    "delete": lambda store: store.delete("some-id"),
    "cleanup": lambda store: store.cleanup(timedelta(hours=1)),
    "claim": lambda store: store.claim("some-id", "w1", timedelta(minutes=1)),
    "claim within limits": lambda store: store.claim(
        "some-id", "w1", timedelta(minutes=1), limits=ConcurrencyLimits(per_owner=1)
    ),
    "running_counts": lambda store: store.running_counts(),
    "wait_for_slot": lambda store: store.wait_for_slot("some-id", version=1),
    "reap": lambda store: store.reap(),
    "wait": lambda store: store.wait("some-id", timeout=0.01),
}


@pytest.fixture(params=["postgres-closed-port", "sqlite-folder"])
def unreachable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTaskStore]:
    if request.param == "postgres-closed-port":
        store = SqlTaskStore(CLOSED_PORT_URL)
    else:
        store = SqlTaskStore(f"sqlite:///{tmp_path}")  # a folder cannot be opened as a file
    yield store
    store.close()


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_verb_raises_store_unavailable(unreachable: SqlTaskStore, call: str) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        CALLS[call](unreachable)

    assert isinstance(raised.value, QueueStoreError)
    assert isinstance(raised.value.__cause__, sa_exc.DBAPIError)


def test_migrate_raises_store_unavailable(unreachable: SqlTaskStore) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        unreachable.migrate()

    assert raised.value.__cause__ is not None
