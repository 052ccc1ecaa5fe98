"""``after_fork``: a forked child forgets its parent's connections; the parent keeps them.

Celery sends ``worker_process_init`` from pools that fork (prefork) and from
pools that do not (solo, threads); the store must tell them apart, or an
in-process worker drops its own pooled connections unclosed.
"""

from __future__ import annotations

import os

import pytest

from queuestore import SqlTaskStore

from .support import StoreFactory

SQL_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_in_the_same_process_the_pool_is_kept(make_store: StoreFactory) -> None:
    store = make_store()
    assert isinstance(store, SqlTaskStore)
    task = store.create("a.b")
    pooled = store.engine.pool.checkedin()
    assert pooled >= 1
    store.after_fork()
    assert store.engine.pool.checkedin() == pooled
    assert store.get(task.id) == task


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_forked_child_forgets_the_parents_connections(make_store: StoreFactory) -> None:
    store = make_store()
    assert isinstance(store, SqlTaskStore)
    task = store.create("a.b")
    pooled = store.engine.pool.checkedin()
    assert pooled >= 1
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            store.after_fork()
            os.write(write, str(store.engine.pool.checkedin()).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read) as reported:
        assert reported.read() == "0"
    # The parent's connections were neither closed nor dropped by the child.
    assert store.engine.pool.checkedin() == pooled
    assert store.get(task.id) == task
