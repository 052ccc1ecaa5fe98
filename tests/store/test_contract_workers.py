"""Workers' rows: each worker process's heartbeat writes what it is and what it runs.

A beat inserts the row or updates it (its start stays the first beat's); the
read says how long each has been silent, on the store's clock, so a process
that died shows as silent with the tasks it ran at its last beat. A clean
shutdown removes its row, and the janitor removes rows silent too long.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from queuestore import InvalidTaskData, TaskStore


def test_a_beat_writes_the_row_and_the_next_one_updates_it(store: TaskStore) -> None:
    store.beat_worker(
        "h1:10:ab", host="h1", pid=10, node="celery@h1", pool="prefork", concurrency=4
    )
    (first,) = store.workers()
    time.sleep(0.01)
    task = store.create("x.job")
    store.beat_worker(
        "h1:10:ab",
        host="h1",
        pid=10,
        node="celery@h1",
        pool="prefork",
        concurrency=4,
        running=[task.id],
    )

    (worker,) = store.workers()

    assert (worker.host, worker.pid, worker.node, worker.pool, worker.concurrency) == (
        "h1",
        10,
        "celery@h1",
        "prefork",
        4,
    )
    assert worker.running == [task.id]
    assert worker.started_at == first.started_at
    assert worker.beat_at > first.beat_at
    assert timedelta(0) <= worker.silent_for < timedelta(seconds=5)
    assert worker.alive(timedelta(seconds=30))


def test_workers_are_listed_by_host_and_pid_and_a_silent_one_shows_it(store: TaskStore) -> None:
    store.beat_worker("h2:5:aa", host="h2", pid=5)
    store.beat_worker("h1:7:bb", host="h1", pid=7)
    time.sleep(0.05)
    store.beat_worker("h1:3:cc", host="h1", pid=3)

    workers = store.workers()

    assert [w.id for w in workers] == ["h1:3:cc", "h1:7:bb", "h2:5:aa"]
    silent = {w.id for w in workers if not w.alive(timedelta(milliseconds=40))}
    assert silent == {"h1:7:bb", "h2:5:aa"}


def test_a_clean_shutdown_and_the_janitor_remove_rows(store: TaskStore) -> None:
    store.beat_worker("h1:1:aa", host="h1", pid=1)
    store.beat_worker("h1:2:bb", host="h1", pid=2)
    time.sleep(0.05)
    store.beat_worker("h1:3:cc", host="h1", pid=3)

    store.forget_worker("h1:1:aa")
    assert store.forget_workers(timedelta(milliseconds=40)) == 1

    assert [w.id for w in store.workers()] == ["h1:3:cc"]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"host": "", "pid": 1}, "host"),
        ({"host": "h", "pid": 0}, "pid"),
        ({"host": "h", "pid": 1, "concurrency": -1}, "concurrency"),
        ({"host": "h", "pid": 1, "running": ["not an id!"]}, "task_id"),
        ({"host": "h", "pid": 1, "pool": "x" * 300}, "pool"),
    ],
)
def test_a_bad_beat_is_refused_and_writes_nothing(
    store: TaskStore, arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidTaskData, match=field):
        store.beat_worker("h:1:aa", **arguments)  # type: ignore[arg-type]

    assert store.workers() == []
