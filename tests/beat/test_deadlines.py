"""Beat enforces deadlines: late tasks fail, stuck runs are revoked and their slots freed."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from queuestore import TaskQueue, TaskStatus
from tests.celery_support import Published, reconfigure


def test_beat_fails_late_tasks_revokes_their_runs_and_frees_stuck_slots(
    queue: TaskQueue, published: Published
) -> None:
    reconfigure(queue, timeout_grace=timedelta(milliseconds=100))
    never_started = queue.submit("test.job", start_by=datetime.now(UTC) - timedelta(seconds=1))
    frozen = queue.submit("test.job", timeout=timedelta(milliseconds=50))
    held = queue.store.claim(frozen.id, "frozen-worker", queue.options.lease)
    assert held is not None
    time.sleep(0.06)

    first = queue.enforce_deadlines()

    assert [t.id for t in first.expired] == [never_started.id]
    assert [t.id for t in first.timed_out] == [frozen.id]
    assert published.revoked[-1] == ([frozen.id], {"terminate": True, "signal": "SIGUSR1"})
    assert queue.store.running_counts() == {(None, "test.job"): 1}  # it may still run
    time.sleep(0.1)

    second = queue.enforce_deadlines()

    assert [t.id for t in second.unresponsive] == [frozen.id]
    assert published.revoked[-1] == ([frozen.id], {"terminate": True, "signal": "SIGKILL"})
    assert queue.store.running_counts() == {}
    failed = queue.store.get(frozen.id)
    assert (failed.status, failed.worker_id) == (TaskStatus.FAILED, None)
    assert queue.enforce_deadlines() == ([], [], [], [])
