"""Concurrency limits through real ``celery worker`` processes, PostgreSQL, Redis and RabbitMQ.

Owner ``a`` floods the queue with a thousand slow tasks; with
``QUEUESTORE_OWNER_CONCURRENCY=2`` and four worker processes, two of them run
``a``'s tasks and the rest of ``a``'s wait in the store, with no message in the
broker, so owner ``b``'s ten tasks find the two other workers free: each starts
within :data:`START_BOUND` of its submit. No beat runs here, so a task of
``a`` that starts after one of ``a``'s runs ended was handed the slot by that
run, not found by the sweep.
"""

from __future__ import annotations

import threading
import time

import pytest

from queuestore import TERMINAL, TaskStatus
from tests.integration.harness import Deployment, DeploymentFactory

pytestmark = pytest.mark.integration

BROKERS = [
    pytest.param("redis", id="redis", marks=[pytest.mark.redis, pytest.mark.postgres]),
    pytest.param("rabbitmq", id="rabbitmq", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
]

FLOOD = 1000
START_BOUND = 5.0
"""The longest wait of ``b``'s tasks, submit to start, beside ``a``'s flood (seconds).

Ten tasks of 0.1 s on two free worker processes: the last of them waits for
four of its own before it, 0.4 s and the claims; a 2-core machine measured 0.54 s
at most. The bound leaves room for a loaded CI machine; the first of ``b``'s
tasks has no one to wait for, and must start within :data:`FIRST_BOUND`.
"""

FIRST_BOUND = 1.0


class RunningSampler:
    """Samples the running tasks of each owner every few milliseconds, in a thread."""

    def __init__(self, deployment: Deployment) -> None:
        self.store = deployment.queue.store
        self.most: dict[str | None, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            by_owner: dict[str | None, int] = {}
            for (owner, _), running in self.store.running_counts().items():
                by_owner[owner] = by_owner.get(owner, 0) + running
            for owner, running in by_owner.items():
                self.most[owner] = max(self.most.get(owner, 0), running)

    def stop(self) -> dict[str | None, int]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.most


@pytest.mark.parametrize("broker", BROKERS)
def test_one_owner_s_flood_leaves_the_other_owners_free_workers(
    deployment: DeploymentFactory, broker: str
) -> None:
    deployed = deployment(broker, "postgres", QUEUESTORE_OWNER_CONCURRENCY="2")
    worker = deployed.start_worker(concurrency=4)
    queue = deployed.queue
    store = queue.store
    assert queue.options.limits.per_owner == 2
    sampler = RunningSampler(deployed)
    flood = queue.submit_many(
        [{"name": "tests.sleep", "input": {"seconds": 120}, "owner": "a"} for _ in range(FLOOD)]
    )
    deployed.wait_status(flood[0].id, TaskStatus.WORKING, timeout=30)

    others = [queue.submit("tests.sleep", {"seconds": 0.1}, owner="b") for _ in range(10)]

    done = [deployed.wait_status(task.id, *TERMINAL, timeout=120) for task in others]
    waits = []
    for task in done:
        assert task.status is TaskStatus.COMPLETED, (task.error, worker.tail())
        assert task.started_at is not None
        waits.append((task.started_at - task.created_at).total_seconds())
    print(f"b's waits, submit to start: max {max(waits):.2f}s, {sorted(waits)}")
    assert max(waits) < START_BOUND, worker.tail()
    assert min(waits) < FIRST_BOUND, worker.tail()
    running_a = [task for task in flood if store.get(task.id).worker_id is not None]
    assert len(running_a) == 2, worker.tail()

    # A run of a's that ends hands its slot to the next of a's waiting tasks.
    queue.cancel(running_a[0].id)
    ended = time.monotonic()

    def next_started() -> bool:
        return store.running_counts().get(("a", "tests.sleep"), 0) == 2 and (
            store.get(running_a[0].id).status is TaskStatus.CANCELLED
        )

    deadline = ended + 30
    while not next_started() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert next_started(), worker.tail()
    print(f"a's next task started {time.monotonic() - ended:.2f}s after a's run was cancelled")
    most = sampler.stop()
    assert most["a"] == 2, most  # never more than its limit, at any sample
    assert most.get("b", 0) >= 1

    # Stop the flood: the waiting tasks first (no message), then the running ones.
    for task in flood:
        current = store.get(task.id)
        if current.worker_id is None and not current.is_terminal:
            store.cancel(task.id)
    for task in flood:
        if not store.get(task.id).is_terminal:
            queue.cancel(task.id)
