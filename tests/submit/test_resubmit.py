"""Resubmit: a failed or cancelled task's job submitted again, as a new task linked to the old.

The old task stays as it ended (terminal is sticky); the new one has its job,
input, owner, context, ttl and priority, and names the old one in its
metadata; it is published as any submit. Only failed and cancelled tasks are
resubmitted, and only by a caller who sees them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuestore import InvalidTransition, TaskNotFound, TaskQueue, TaskStatus
from queuestore.submit.queue import RESUBMITTED_FROM
from tests.celery_support import Published


def test_a_failed_task_is_submitted_again_as_a_new_task_naming_it(
    queue: TaskQueue, published: Published
) -> None:
    old = queue.submit(
        "reports.build",
        {"month": "2026-11"},
        owner="bob",
        context_id="ctx",
        ttl=timedelta(hours=2),
        metadata={"team": "ops"},
        priority=7,
    )
    queue.store.update(old.id, status="working")
    failed = queue.store.update(old.id, status="failed", error={"type": "E", "message": "m"})

    new = queue.resubmit(old.id)

    assert new.id != old.id
    assert new.status is TaskStatus.SUBMITTED
    assert (new.name, new.input, new.owner, new.context_id, new.ttl, new.priority) == (
        "reports.build",
        {"month": "2026-11"},
        "bob",
        "ctx",
        timedelta(hours=2),
        7,
    )
    assert new.metadata == {"team": "ops", RESUBMITTED_FROM: old.id}
    assert queue.store.get(old.id) == failed
    assert [m["task_id"] for m in published.messages] == [old.id, new.id]


def test_a_cancelled_task_may_be_resubmitted_by_its_owner_only(queue: TaskQueue) -> None:
    old = queue.submit("x.job", owner="bob")
    queue.cancel(old.id, owner="bob")

    with pytest.raises(TaskNotFound):
        queue.resubmit(old.id, owner="alice")
    assert queue.resubmit(old.id, owner="bob").owner == "bob"


@pytest.mark.parametrize("status", ["submitted", "working", "completed"])
def test_a_task_neither_failed_nor_cancelled_is_refused(queue: TaskQueue, status: str) -> None:
    task = queue.submit("x.job")
    for step in {"submitted": [], "working": ["working"], "completed": ["working", "completed"]}[
        status
    ]:
        queue.store.update(task.id, status=step)
    before = queue.store.count()

    with pytest.raises(InvalidTransition, match="cancelled, failed"):
        queue.resubmit(task.id)

    assert queue.store.count() == before
