"""Workers in the store: each process of a real Celery worker writes its row as it beats.

Busy or idle, every pool process of a worker is listed with its host, pid,
node, pool and concurrency, and the task it runs; a worker killed (SIGKILL)
stops beating, and its rows stay, silent, with the task it held; a worker
stopped cleanly removes its rows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuestore import Worker
from tests.integration.harness import DeploymentFactory, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.redis]

LEASE = timedelta(seconds=3)  # the harness's QUEUESTORE_LEASE


def test_workers_beat_idle_and_busy_and_a_killed_one_keeps_its_tasks(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("redis", "postgres")
    store = stack.queue.store
    killed = stack.start_worker(concurrency=2)

    def of(node_prefix: str) -> list[Worker]:
        return [w for w in store.workers() if (w.node or "").startswith(node_prefix)]

    idle = wait_for(
        lambda: (found := store.workers()) and len(found) == 2 and found,
        timeout=30,
        what="both idle pool processes' rows",
        logs=stack.processes,
    )
    assert {(w.pool, w.concurrency) for w in idle} == {("prefork", 2)}
    assert len({w.node for w in idle}) == 1
    node = str(idle[0].node)
    assert all(w.alive(LEASE) and w.running == [] for w in idle)
    assert all(killed.owns(w.pid) and w.pid != killed.pid for w in idle)  # its pool's children

    task = stack.queue.submit("tests.sleep", {"seconds": 60})
    busy = wait_for(
        lambda: [w for w in of(node) if w.running == [task.id]],
        timeout=30,
        what="the task in a worker's row",
        logs=stack.processes,
    )
    killed.kill()
    silent = wait_for(
        lambda: (rows := of(node)) and not any(w.alive(LEASE) for w in rows) and rows,
        timeout=30,
        what="the killed worker's rows to fall silent",
        logs=stack.processes,
    )
    assert [w.running for w in silent if w.id == busy[0].id] == [[task.id]]

    clean = stack.start_worker(concurrency=1)
    wait_for(
        lambda: len(store.workers()) == 3, timeout=30, what="the new worker's row", logs=[clean]
    )
    clean.stop()
    assert {w.node for w in store.workers()} == {node}  # its row went with it
    store.cancel(task.id)
