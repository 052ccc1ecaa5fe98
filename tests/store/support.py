"""Helpers the store tests share: walking the transition table, snapshots, threads."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import product
from typing import Any, TypeVar

from queuestore import LIVE, TRANSITIONS, Task, TaskStatus, TaskStore

T = TypeVar("T")

CLOSED_PORT_URL = "postgresql+psycopg://postgres@127.0.0.1:1/queuestore?connect_timeout=2"
"""A PostgreSQL URL nothing answers at: every connection attempt is refused at once."""

StoreFactory = Callable[..., TaskStore]
"""The ``make_store`` fixture: builds a store of the backend under test with options."""

ALLOWED = sorted((source, target) for source, targets in TRANSITIONS.items() for target in targets)
"""Every ``(from, to)`` pair the transition table allows."""

FORBIDDEN = sorted(
    (source, target)
    for source, target in product(TaskStatus, TaskStatus)
    if target not in TRANSITIONS[source] and not (source == target and source in LIVE)
)
"""Every pair it refuses (a live task rewritten in its own status is not a transition)."""


def path_to(status: TaskStatus) -> list[TaskStatus]:
    """The shortest list of statuses leading from ``submitted`` to ``status``."""
    paths = {TaskStatus.SUBMITTED: list[TaskStatus]()}
    queue = deque([TaskStatus.SUBMITTED])
    while queue:
        current = queue.popleft()
        for target in sorted(TRANSITIONS[current]):
            if target not in paths:
                paths[target] = [*paths[current], target]
                queue.append(target)
    return paths[status]


def reach(store: TaskStore, status: TaskStatus, **create: Any) -> Task:
    """A new task brought to ``status`` through allowed transitions only."""
    task = store.create(create.pop("name", "tests.job"), **create)
    for step in path_to(status):
        task = store.update(task.id, status=step)
    assert task.status == status
    return task


def snapshot(store: TaskStore) -> list[Task]:
    """Every task in the store, to check that a refused call wrote nothing."""
    return list(store.iterate(limit=1000))


def race(count: int, call: Callable[[int], T]) -> list[Future[T]]:
    """Run ``call(0..count-1)`` in as many threads released at the same instant."""
    start = threading.Barrier(count, timeout=30)

    def run(index: int) -> T:
        start.wait()
        return call(index)

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(run, index) for index in range(count)]
    return futures
