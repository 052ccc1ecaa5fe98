"""Flow control in the store: rate limits and pauses decided in the claim, waits after."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

import pytest

from queuestore import FlowControl, InvalidTaskData, RateLimit, TaskStore

from .support import race

LEASE = timedelta(seconds=30)
SLOW = timedelta(seconds=60)
THREE_A_MINUTE = FlowControl(rates={"x.call": RateLimit(3, per=SLOW)})


def claimed(store: TaskStore, task_id: str, flow: FlowControl) -> bool:
    return store.claim(task_id, f"w-{task_id}", LEASE, flow=flow) is not None


def test_a_job_starts_no_more_than_its_rate_in_a_period(store: TaskStore) -> None:
    calls = [store.create("x.call") for _ in range(5)]
    other = store.create("x.other")

    assert [claimed(store, task.id, THREE_A_MINUTE) for task in calls] == [True] * 3 + [False] * 2
    assert claimed(store, other.id, THREE_A_MINUTE)
    refused = store.get(calls[3].id)
    assert (refused.worker_id, refused.attempt) == (None, 0)


def test_the_starts_count_whether_their_runs_ended_or_not(store: TaskStore) -> None:
    calls = [store.create("x.call") for _ in range(4)]
    for task in calls[:3]:
        assert claimed(store, task.id, THREE_A_MINUTE)
        store.report(task.id, f"w-{task.id}", status="completed")

    assert not claimed(store, calls[3].id, THREE_A_MINUTE)


def test_a_start_stops_counting_after_the_period(store: TaskStore) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(2, per=timedelta(milliseconds=400))})
    calls = [store.create("x.call") for _ in range(3)]
    assert [claimed(store, task.id, flow) for task in calls] == [True, True, False]

    time.sleep(0.5)
    assert claimed(store, calls[2].id, flow)


def test_each_key_has_its_own_rate(store: TaskStore) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(1, per=SLOW, key="input.provider")})
    a = [store.create("x.call", {"provider": "a"}) for _ in range(2)]
    b = store.create("x.call", {"provider": "b"})
    by_owner = FlowControl(rates={"x.call": RateLimit(1, per=SLOW, key="owner")})
    alice = [store.create("x.call", owner="alice") for _ in range(2)]

    assert [claimed(store, task.id, flow) for task in a] == [True, False]
    assert claimed(store, b.id, flow)
    assert [claimed(store, task.id, by_owner) for task in alice] == [True, False]


def test_a_start_costs_its_weight(store: TaskStore) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(10, per=SLOW, cost="input.units")})
    heavy = store.create("x.call", {"units": 7})
    light = store.create("x.call", {"units": 3})
    over = store.create("x.call", {"units": 1})

    assert claimed(store, heavy.id, flow)
    assert claimed(store, light.id, flow)
    assert not claimed(store, over.id, flow)


def test_racing_claims_never_pass_the_rate(store: TaskStore) -> None:
    calls = [store.create("x.call") for _ in range(8)]
    wins = race(8, lambda i: claimed(store, calls[i].id, THREE_A_MINUTE))

    assert sum(win.result() for win in wins) == 3


@pytest.mark.parametrize(
    ("kind", "value"), [("job", "x.call"), ("owner", "alice"), ("key", "openai")]
)
def test_a_pause_stops_starts_until_resumed_and_running_tasks_go_on(
    store: TaskStore, kind: str, value: str
) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(100, key="input.provider")})
    running = store.create("x.call", {"provider": "openai"}, owner="alice")
    assert claimed(store, running.id, flow)
    waiting = store.create("x.call", {"provider": "openai"}, owner="alice")
    free = store.create("x.call", {"provider": "other"}, owner="bob")

    store.pause(kind, value, reason="maintenance")
    assert [(p.kind, p.value, p.reason) for p in store.pauses()] == [(kind, value, "maintenance")]
    assert not claimed(store, waiting.id, flow)
    assert claimed(store, free.id, flow) is (kind != "job")
    store.report(running.id, f"w-{running.id}", status="completed")

    assert store.resume(kind, value)
    assert not store.resume(kind, value)
    assert claimed(store, waiting.id, flow)


def test_a_pause_with_an_end_lifts_itself_and_extends_never_shortens(store: TaskStore) -> None:
    flow = FlowControl()
    task = store.create("x.call")
    soon = datetime.now(UTC) + timedelta(milliseconds=400)
    store.pause("job", "x.call", until=soon)
    kept = store.pause("job", "x.call", until=soon - timedelta(seconds=10))

    assert kept.until == soon
    assert not claimed(store, task.id, flow)
    time.sleep(0.5)
    assert store.pauses() == []
    assert claimed(store, task.id, flow)


def test_a_refused_task_waits_unpublished_each_one_turn_after_the_other(
    store: TaskStore,
) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(2, per=timedelta(seconds=10))})
    calls = [store.create("x.call") for _ in range(5)]
    for task in calls:
        store.mark_published(task.id)
    started = datetime.now(UTC)
    assert [claimed(store, task.id, flow) for task in calls[:3]] == [True, True, False]

    wakes = []
    for task in calls[2:]:
        version = store.get(task.id).version
        waiting = store.wait_for_flow(task.id, version=version, flow=flow, recheck=LEASE)
        assert waiting is not None
        assert waiting.run_at is not None
        wakes.append(waiting.run_at)
    assert all(abs((wakes[0] - started).total_seconds() - 10) < 2 for _ in wakes)
    assert [round((b - a).total_seconds(), 1) for a, b in itertools.pairwise(wakes)] == [5.0, 5.0]
    assert {task.id for task in store.unpublished(timedelta(0), ahead=SLOW)} >= {
        task.id for task in calls[2:]
    }


def test_a_paused_task_waits_until_the_pause_ends(store: TaskStore) -> None:
    task = store.create("x.call", owner="alice")
    until = datetime.now(UTC) + timedelta(minutes=5)
    store.pause("owner", "alice", until=until)
    assert not claimed(store, task.id, FlowControl())

    waiting = store.wait_for_flow(task.id, version=task.version, flow=FlowControl(), recheck=LEASE)
    assert waiting is not None
    assert waiting.run_at == until
    store.resume("owner", "alice")
    forever = store.pause("owner", "alice")
    again = store.wait_for_flow(task.id, version=waiting.version, flow=FlowControl(), recheck=LEASE)
    assert forever.until is None
    assert again is not None
    assert again.run_at is not None
    assert again.run_at > datetime.now(UTC)


def test_a_task_nothing_holds_back_is_not_made_to_wait(store: TaskStore) -> None:
    task = store.create("x.unrated")

    assert (
        store.wait_for_flow(task.id, version=task.version, flow=THREE_A_MINUTE, recheck=LEASE)
        is None
    )


def test_a_bad_pause_writes_nothing(store: TaskStore) -> None:
    with pytest.raises(InvalidTaskData):
        store.pause("tenant", "x")
    with pytest.raises(InvalidTaskData):
        store.pause("job", "")
    with pytest.raises(InvalidTaskData):
        store.pause("job", "x.call", until=datetime(2030, 1, 1))
    assert store.pauses() == []


def test_pruning_forgets_what_no_longer_counts(store: TaskStore) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(1, per=timedelta(milliseconds=100))})
    assert claimed(store, store.create("x.call").id, flow)
    store.pause("key", "k", until=datetime.now(UTC) + timedelta(milliseconds=100))
    time.sleep(0.2)

    assert store.prune_flow() == 2


def test_rate_use_counts_the_units_of_the_period_by_job_and_key(store: TaskStore) -> None:
    flow = FlowControl(
        rates={
            "x.call": RateLimit(10, per=SLOW, cost="input.units"),
            "x.keyed": RateLimit(2, per=SLOW, key="input.provider"),
            "x.idle": RateLimit(5),
        }
    )
    assert claimed(store, store.create("x.call", {"units": 7}).id, flow)
    assert claimed(store, store.create("x.call", {"units": 2}).id, flow)
    keyed = [store.create("x.keyed", {"provider": "a"}) for _ in range(3)]
    assert [claimed(store, task.id, flow) for task in keyed] == [True, True, False]
    assert claimed(store, store.create("x.keyed").id, flow)
    refused = store.get(keyed[2].id)
    waiting = store.wait_for_flow(refused.id, version=refused.version, flow=flow, recheck=LEASE)
    assert waiting is not None

    uses = store.rate_use(flow)

    assert [(u.job, u.key, u.used, u.limit) for u in uses] == [
        ("x.call", None, 9, 10),
        ("x.idle", None, 0, 5),
        ("x.keyed", "", 1, 2),
        ("x.keyed", "a", 2, 2),
    ]
    assert uses[0].per == SLOW
    assert [u.next_turn for u in uses[:3]] == [None, None, None]
    assert uses[3].next_turn == waiting.run_at
    assert store.rate_use(FlowControl()) == []


def test_rate_use_forgets_the_starts_past_their_period(store: TaskStore) -> None:
    flow = FlowControl(rates={"x.call": RateLimit(3, per=timedelta(milliseconds=300))})
    assert claimed(store, store.create("x.call").id, flow)
    assert [u.used for u in store.rate_use(flow)] == [1]

    time.sleep(0.4)
    assert [u.used for u in store.rate_use(flow)] == [0]
