"""Flow control through real ``celery worker`` processes, PostgreSQL and Redis.

A rate limit holds across four worker processes in every one-second window; a
job told Retry-After pauses its key on every worker until then and runs again
after; an operator's pause of a job, an owner or a key stops their starts
until the resume. Throughput under a rate is measured in ``bench/``, not here.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import TERMINAL, TaskStatus
from tests.integration.harness import DeploymentFactory

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.postgres]

RATE = 10
TASKS = 120


def most_in_a_window(starts: list[datetime], window: timedelta) -> int:
    """The most starts in any half-open window of ``window``, wherever it begins."""
    starts = sorted(starts)
    most = 0
    for index, start in enumerate(starts):
        most = max(most, sum(1 for later in starts[index:] if later < start + window))
    return most


def test_four_workers_under_a_rate_never_start_more_than_it_in_any_second(
    deployment: DeploymentFactory,
) -> None:
    rates = {"tests.square": {"limit": RATE, "per": 1}}
    deployed = deployment("redis", "postgres", QUEUESTORE_RATE_LIMITS=json.dumps(rates))
    worker = deployed.start_worker(concurrency=4, beat=True)
    queue = deployed.queue
    assert queue.options.flow.rates["tests.square"].limit == RATE

    tasks = queue.submit_many(
        [{"name": "tests.square", "input": {"x": index}} for index in range(TASKS)]
    )
    done = [deployed.wait_status(task.id, *TERMINAL, timeout=90) for task in tasks]

    assert all(task.status is TaskStatus.COMPLETED for task in done), worker.tail()
    starts = [task.started_at for task in done if task.started_at is not None]
    most = most_in_a_window(starts, timedelta(seconds=1))
    span = (max(starts) - min(starts)).total_seconds()
    print(f"{TASKS} starts over {span:.1f}s ({TASKS / span:.1f}/s); most in one second: {most}")
    assert most <= RATE, worker.tail()


def test_a_retry_after_pauses_the_key_on_every_worker_until_then(
    deployment: DeploymentFactory,
) -> None:
    rates = {"tests.provider": {"limit": 100, "per": 1, "key": "input.provider"}}
    deployed = deployment("redis", "postgres", QUEUESTORE_RATE_LIMITS=json.dumps(rates))
    worker = deployed.start_worker(concurrency=4, beat=True)
    queue = deployed.queue
    store = queue.store

    told = queue.submit("tests.provider", {"provider": "p", "busy_for": 4})
    deadline = time.monotonic() + 30
    while not store.pauses() and time.monotonic() < deadline:
        time.sleep(0.05)
    [pause] = store.pauses()
    assert (pause.kind, pause.value) == ("key", "p"), worker.tail()
    assert pause.until is not None
    same_key = [queue.submit("tests.provider", {"provider": "p"}) for _ in range(3)]
    other_key = queue.submit("tests.provider", {"provider": "q"})

    other = deployed.wait_status(other_key.id, *TERMINAL, timeout=30)
    assert other.status is TaskStatus.COMPLETED
    assert other.finished_at is not None
    assert other.finished_at < pause.until, "a task of another key waited for the pause"
    waited = [deployed.wait_status(task.id, *TERMINAL, timeout=60) for task in same_key]
    again = deployed.wait_status(told.id, *TERMINAL, timeout=60)
    for task in [*waited, again]:
        assert task.status is TaskStatus.COMPLETED, (task.error, worker.tail())
    for task in waited:
        assert task.started_at is not None
        assert task.started_at >= pause.until, (task.started_at, pause.until)
    assert again.result == {"provider": "p", "attempt": 2}
    assert again.finished_at is not None
    assert again.finished_at >= pause.until
    assert again.errors == []  # a pause is not a failure


@pytest.mark.parametrize(
    ("kind", "value", "submit"),
    [
        ("job", "tests.square", {}),
        ("owner", "alice", {"owner": "alice"}),
        ("key", "p", {}),
    ],
)
def test_an_operator_pause_stops_starts_until_the_resume(
    deployment: DeploymentFactory, kind: str, value: str, submit: dict[str, str]
) -> None:
    rates = {"tests.provider": {"limit": 100, "per": 1, "key": "input.provider"}}
    deployed = deployment(
        "redis",
        "postgres",
        QUEUESTORE_RATE_LIMITS=json.dumps(rates),
        QUEUESTORE_PAUSE_RECHECK="1",
    )
    worker = deployed.start_worker(concurrency=2, beat=True)
    queue = deployed.queue
    store = queue.store
    name, given = (
        ("tests.provider", {"provider": "p"}) if kind == "key" else ("tests.square", {"x": 3})
    )

    store.pause(kind, value, reason="deploy")
    held = queue.submit(name, given, **submit)
    free = queue.submit("tests.provider", {"provider": "q"}, owner="bob")
    assert deployed.wait_status(free.id, *TERMINAL, timeout=30).status is TaskStatus.COMPLETED
    time.sleep(2)
    waiting = store.get(held.id)
    assert waiting.status is TaskStatus.SUBMITTED, worker.tail()
    assert waiting.started_at is None

    resumed_at = datetime.now(UTC)
    assert store.resume(kind, value)
    done = deployed.wait_status(held.id, *TERMINAL, timeout=30)
    assert done.status is TaskStatus.COMPLETED, worker.tail()
    assert done.started_at is not None
    assert done.started_at >= resumed_at - timedelta(seconds=1)
