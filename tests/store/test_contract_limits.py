"""Concurrency limits in the store: the claim counts and takes a slot in one decision."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queuestore import ConcurrencyLimits, Task, TaskStatus, TaskStore

from .support import race

LEASE = timedelta(seconds=30)
TWO_PER_OWNER = ConcurrencyLimits(per_owner=2)


def claimed(store: TaskStore, task_id: str, limits: ConcurrencyLimits) -> bool:
    return store.claim(task_id, f"w-{task_id}", LEASE, limits=limits) is not None


def test_an_owner_runs_no_more_than_its_limit_while_others_run(store: TaskStore) -> None:
    a = [store.create("x.slow", owner="a") for _ in range(3)]
    b = store.create("x.slow", owner="b")
    unowned = [store.create("x.slow") for _ in range(3)]

    assert [claimed(store, task.id, TWO_PER_OWNER) for task in a] == [True, True, False]
    assert claimed(store, b.id, TWO_PER_OWNER)
    assert all(claimed(store, task.id, TWO_PER_OWNER) for task in unowned)
    refused = store.get(a[2].id)
    assert (refused.status, refused.worker_id, refused.attempt) == (TaskStatus.SUBMITTED, None, 0)


def test_a_job_runs_no_more_than_its_limit_whatever_the_owners(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_job={"x.report": 1})
    first = store.create("x.report", owner="a")
    second = store.create("x.report", owner="b")
    other_job = store.create("x.other", owner="b")

    assert claimed(store, first.id, limits)
    assert not claimed(store, second.id, limits)
    assert claimed(store, other_job.id, limits)


def test_both_limits_apply_to_a_task_under_both(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_owner=5, per_job={"x.report": 1})
    store.claim(store.create("x.report", owner="b").id, "w", LEASE)  # b's report runs

    assert not claimed(store, store.create("x.report", owner="a").id, limits)
    assert claimed(store, store.create("x.other", owner="a").id, limits)


def test_a_run_that_ends_or_parks_frees_its_slot(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_owner=1)
    running = store.create("x.slow", owner="a")
    waiting = [store.create("x.slow", owner="a") for _ in range(2)]
    assert claimed(store, running.id, limits)
    assert not claimed(store, waiting[0].id, limits)

    store.report(running.id, f"w-{running.id}", status="input_required")
    assert claimed(store, waiting[0].id, limits)
    store.report(waiting[0].id, f"w-{waiting[0].id}", status="completed")
    assert claimed(store, waiting[1].id, limits)


def test_the_running_counts_are_by_owner_and_job(store: TaskStore) -> None:
    for owner, name in [("a", "x.one"), ("a", "x.one"), ("a", "x.two"), (None, "x.one")]:
        task = store.create(name, owner=owner)
        store.claim(task.id, f"w-{task.id}", LEASE)
    store.create("x.one", owner="a")  # not running

    assert store.running_counts() == {("a", "x.one"): 2, ("a", "x.two"): 1, (None, "x.one"): 1}


def test_a_task_waiting_for_a_slot_has_no_publish_mark(store: TaskStore) -> None:
    task = store.create("x.slow", owner="a")
    store.mark_published(task.id)
    published = store.get(task.id)
    assert store.unpublished(timedelta(0)) == []

    waiting = store.wait_for_slot(task.id, version=published.version)

    assert waiting is not None
    assert (waiting.status, waiting.version) == (TaskStatus.SUBMITTED, published.version + 1)
    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]
    # A mark still to be written for the message it had is void.
    store.mark_published(task.id, version=published.version)
    assert [t.id for t in store.unpublished(timedelta(0))] == [task.id]
    assert store.wait_for_slot(task.id, version=published.version) is None


def test_a_claimed_task_cannot_be_put_to_wait(store: TaskStore) -> None:
    task = store.create("x.slow", owner="a")
    running = store.claim(task.id, "w", LEASE)
    assert running is not None

    assert store.wait_for_slot(task.id, version=running.version) is None
    assert store.get(task.id).worker_id == "w"


def test_the_sweep_publishes_no_more_than_the_free_slots(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_owner=2, per_job={"x.report": 1})
    a = [store.create("x.slow", owner="a") for _ in range(4)]
    b = [store.create("x.slow", owner="b") for _ in range(3)]
    full = [store.create("x.slow", owner="c") for _ in range(3)]
    reports = [store.create("x.report", owner=f"r{i}") for i in range(3)]
    unowned = [store.create("x.slow") for _ in range(3)]
    assert claimed(store, a[0].id, limits)
    assert claimed(store, full[0].id, limits)
    assert claimed(store, full[1].id, limits)

    due = {task.id for task in store.unpublished(timedelta(0), limits=limits)}

    assert due == {a[1].id, b[0].id, b[1].id, reports[0].id} | {t.id for t in unowned}


def finished(store: TaskStore, name: str, owner: str) -> Task:
    """A task of ``owner`` whose run ended: the one a hand-off hands the slot of."""
    task = store.create(name, owner=owner)
    store.claim(task.id, "w", LEASE)
    return store.report(task.id, "w", status="completed")


def test_a_hand_off_offers_only_the_freed_slot_s_owner_and_job(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_owner=1, per_job={"x.report": 1})
    ended = finished(store, "x.report", "a")
    mine = store.create("x.slow", owner="a")
    same_job = store.create("x.report", owner="b")
    store.create("x.slow", owner="b")  # shares neither
    store.create("x.slow")  # not limited at all

    handed = store.unpublished(timedelta(0), limits=limits, freed_by=ended)

    assert {task.id for task in handed} == {mine.id, same_job.id}
    assert store.unpublished(timedelta(0), limits=limits, freed_by=store.create("x.y")) == []


def test_a_hand_off_respects_the_slots_still_held(store: TaskStore) -> None:
    limits = ConcurrencyLimits(per_owner=2)
    ended = finished(store, "x.slow", "a")
    holding = store.create("x.slow", owner="a")
    assert claimed(store, holding.id, limits)
    waiting = [store.create("x.slow", owner="a") for _ in range(3)]

    handed = store.unpublished(timedelta(0), limits=limits, freed_by=ended)

    # One slot of two is held: the longest waiting of a's tasks takes the other.
    assert [task.id for task in handed] == [waiting[0].id]


@pytest.mark.parametrize("round_", range(3))
def test_racing_claims_never_run_more_than_the_limit(store: TaskStore, round_: int) -> None:
    tasks = [store.create("x.slow", owner="a") for _ in range(8)]

    futures = race(8, lambda index: claimed(store, tasks[index].id, TWO_PER_OWNER))

    assert sorted(f.result() for f in futures) == [False] * 6 + [True] * 2
    assert store.running_counts() == {("a", "x.slow"): 2}


def test_limits_refuse_nonsense() -> None:
    for wrong in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="per_owner"):
            ConcurrencyLimits(per_owner=wrong)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="per_job"):
            ConcurrencyLimits(per_job={"x.y": wrong})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="per_job"):
        ConcurrencyLimits(per_job={"": 1})
    assert not ConcurrencyLimits()
    assert ConcurrencyLimits(per_job={"x.y": 1}) == ConcurrencyLimits(per_job={"x.y": 1})
