"""The transition table, enforced by every store: each allowed move works, each other one fails.

The cases are generated from ``TRANSITIONS`` so that the table and the tests
cannot drift apart.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuestore import LIVE, TERMINAL, TRANSITIONS, InvalidTransition, TaskStatus, TaskStore

from .support import ALLOWED, FORBIDDEN, reach


def test_the_generated_cases_cover_every_pair_of_statuses() -> None:
    same_status_rewrites = {(status, status) for status in LIVE}
    every_pair = {(source, target) for source in TaskStatus for target in TaskStatus}

    assert set(ALLOWED) | set(FORBIDDEN) | same_status_rewrites == every_pair
    assert not set(ALLOWED) & set(FORBIDDEN)
    assert all((status, target) in FORBIDDEN for status in TERMINAL for target in TaskStatus)


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_an_allowed_transition_is_written(
    store: TaskStore, source: TaskStatus, target: TaskStatus
) -> None:
    task = reach(store, source)

    moved = store.update(task.id, status=target)

    assert moved.status == target
    assert moved.version == task.version + 1
    assert store.get(task.id) == moved
    assert (moved.finished_at is not None) == (target in TERMINAL)


@pytest.mark.parametrize(("source", "target"), FORBIDDEN)
def test_a_forbidden_transition_raises_and_writes_nothing(
    store: TaskStore, source: TaskStatus, target: TaskStatus
) -> None:
    task = reach(store, source)

    with pytest.raises(InvalidTransition) as raised:
        store.update(task.id, status=target, progress=1.0, status_message="nope")

    assert raised.value.task_id == task.id
    assert raised.value.current == source
    assert raised.value.requested == target
    assert store.get(task.id) == task


@pytest.mark.parametrize("status", sorted(LIVE))
def test_a_live_task_may_be_rewritten_in_its_own_status(
    store: TaskStore, status: TaskStatus
) -> None:
    task = reach(store, status)

    same = store.update(task.id, status=status, progress=0.5)
    unchanged = store.update(task.id, status_message="still here")

    assert same.status == unchanged.status == status
    assert (same.progress, unchanged.progress) == (0.5, 0.5)
    assert unchanged.version == task.version + 2


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_a_terminal_task_is_sticky(store: TaskStore, status: TaskStatus) -> None:
    task = reach(store, status, metadata={"m": 1})

    with pytest.raises(InvalidTransition):
        store.update(task.id, progress=0.5)
    with pytest.raises(InvalidTransition):
        store.update(task.id, metadata={"m": 2})
    with pytest.raises(InvalidTransition):
        store.update(task.id, result={"late": True})
    with pytest.raises(InvalidTransition):
        store.cancel(task.id)
    assert store.claim(task.id, "w1", timedelta(minutes=1)) is None

    assert store.get(task.id) == task


@pytest.mark.parametrize("target", sorted(TRANSITIONS[TaskStatus.WORKING]))
def test_a_status_given_as_a_string_is_accepted(store: TaskStore, target: TaskStatus) -> None:
    task = reach(store, TaskStatus.WORKING)

    assert store.update(task.id, status=target.value).status == target
