"""Priorities in the store: kept with the task, checked, and the sweep's order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queuestore import InvalidTaskData, TaskStore


def test_a_priority_is_kept_and_defaults_to_zero(store: TaskStore) -> None:
    urgent = store.create("x.y", priority=9)

    assert urgent.priority == 9
    assert store.get(urgent.id).priority == 9
    assert store.create("x.y").priority == 0
    assert store.create_many([{"name": "x.y", "priority": 4}])[0].priority == 4


def test_a_bad_priority_is_refused_and_writes_nothing(store: TaskStore) -> None:
    for wrong in (-1, 10, 2.5, "9", True):
        with pytest.raises(InvalidTaskData, match="priority"):
            store.create("x.y", priority=wrong)  # type: ignore[arg-type]

    assert store.count() == 0


def test_the_sweep_takes_the_most_urgent_first_then_the_longest_due(store: TaskStore) -> None:
    old_low = store.create("x.y")
    high = store.create("x.y", priority=9)
    scheduled_mid = store.create("x.y", priority=5, run_at=datetime.now(UTC) - timedelta(hours=1))
    new_low = store.create("x.y")
    later_high = store.create("x.y", priority=9)

    due = [task.id for task in store.unpublished(timedelta(0), ahead=timedelta(seconds=12))]

    assert due == [high.id, later_high.id, scheduled_mid.id, old_low.id, new_low.id]
    assert [t.id for t in store.unpublished(timedelta(0), limit=2)] == [high.id, later_high.id]
