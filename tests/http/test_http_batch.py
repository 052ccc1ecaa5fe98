"""``POST /tasks:batch`` over a real uvicorn process, a real worker and PostgreSQL.

A batch creates its tasks in order, as the caller, all or none; per-item
idempotency keys make a retried batch a replay, concurrent retries included;
a key reused for another item, or one bad item, refuses the batch and writes
nothing; unique keys give their holders back.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from queuestore import ANY
from tests.http.http_deployment import Api, HttpDeployment
from tests.http.http_support import assert_problem, create, snapshot, wait_for_status

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

CREATED = {"status": 201, "replayed": False, "unique_key_holder": False}
REPLAYED = {"status": 200, "replayed": True, "unique_key_holder": False}
HOLDER = {"status": 200, "replayed": False, "unique_key_holder": True}
ATTEMPTS = 16
"""Concurrent retries of one batch."""


def batch(client: httpx.Client, items: list[dict[str, Any]]) -> httpx.Response:
    return client.post("/tasks:batch", json={"tasks": items})


def adds(count: int, *, keyed: bool = True, start: int = 0) -> list[dict[str, Any]]:
    """``count`` additions of one context, each with a key of its own unless not ``keyed``."""
    context = f"batch-{uuid.uuid4().hex[:8]}"
    return [
        {"name": "http.add", "input": {"a": n, "b": 1000}, "context_id": context}
        | ({"idempotency_key": f"{context}-{n}"} if keyed else {})
        for n in range(start, start + count)
    ]


def ids_of(response: httpx.Response) -> list[str]:
    return [task["id"] for task in response.json()["tasks"]]


def completed(client: httpx.Client, response: httpx.Response) -> list[dict[str, Any]]:
    return [wait_for_status(client, task_id, "completed") for task_id in ids_of(response)]


def test_a_batch_creates_its_tasks_in_order_and_their_jobs_run(alice: httpx.Client) -> None:
    items = adds(50, keyed=False)
    response = batch(alice, items)

    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["results"] == [CREATED] * 50
    assert [task["input"] for task in answer["tasks"]] == [item["input"] for item in items]
    assert {(task["owner"], task["status"]) for task in answer["tasks"]} == {("alice", "submitted")}
    ids = ids_of(response)
    assert len(set(ids)) == 50
    assert [task["result"] for task in completed(alice, response)] == [n + 1000 for n in range(50)]
    listed = alice.get("/tasks", params={"context_id": items[0]["context_id"], "limit": 100})
    assert [task["id"] for task in listed.json()["tasks"]] == ids[::-1]  # newest first


def test_a_retried_batch_replays_every_item_and_writes_nothing(
    alice: httpx.Client, pg: HttpDeployment
) -> None:
    items = adds(5)
    first = batch(alice, items)
    assert first.status_code == 201, first.text
    completed(alice, first)
    store = pg.deployment.queue.store
    before = snapshot(store)

    again = batch(alice, items)

    assert again.status_code == 200, again.text
    assert again.json()["results"] == [REPLAYED] * 5
    assert again.json()["tasks"] == [alice.get(f"/tasks/{id}").json() for id in ids_of(first)]
    assert snapshot(store) == before
    # An item's key is the single create's Idempotency-Key: the same task.
    item = dict(items[2])
    key = item.pop("idempotency_key")
    single = alice.post("/tasks", json=item, headers={"Idempotency-Key": key})
    assert single.status_code == 200, single.text
    assert single.headers["idempotent-replayed"] == "true"
    assert single.json()["id"] == ids_of(first)[2]
    assert snapshot(store) == before


def test_a_batch_mixes_replayed_new_and_repeated_items(alice: httpx.Client) -> None:
    old = adds(2)
    made = batch(alice, old)
    assert made.status_code == 201, made.text
    new = adds(2, start=10)
    new[1].pop("idempotency_key")
    items = [old[0], new[0], new[1], old[1], new[0]]

    response = batch(alice, items)

    assert response.status_code == 201, response.text
    assert response.json()["results"] == [REPLAYED, CREATED, CREATED, REPLAYED, REPLAYED]
    ids = ids_of(response)
    assert [ids[0], ids[3]] == ids_of(made)
    assert ids[4] == ids[1]  # a repeated key within the batch is a replay of its first item
    assert len({*ids, *ids_of(made)}) == 4
    done = completed(alice, response)
    assert [task["result"] for task in done] == [1000, 1010, 1011, 1001, 1010]
    assert {task["attempt"] for task in done} == {1}
    listed = alice.get("/tasks", params={"context_id": new[0]["context_id"]}).json()["tasks"]
    assert [task["id"] for task in listed] == [ids[2], ids[1]]  # each made once


def test_a_key_reused_for_another_item_refuses_the_batch(
    alice: httpx.Client, pg: HttpDeployment
) -> None:
    (kept,) = adds(1)
    made = batch(alice, [kept])
    assert made.status_code == 201, made.text
    completed(alice, made)
    store = pg.deployment.queue.store
    before = snapshot(store)
    fresh = adds(2)
    other_input = kept | {"input": {"a": 1, "b": 1}}

    against_its_task = batch(alice, [fresh[0], other_input])
    within_the_batch = batch(alice, [fresh[1], fresh[1] | {"ttl": 60}])

    problem = assert_problem(against_its_task, 422, "idempotency-key-reused")
    assert problem["detail"].startswith("tasks[1].idempotency_key: ")
    assert [error["loc"] for error in problem["errors"]] == [
        ["body", "tasks", 1, "idempotency_key"]
    ]
    assert problem["task_id"] == ids_of(made)[0]
    problem = assert_problem(within_the_batch, 422, "idempotency-key-reused")
    assert [error["loc"] for error in problem["errors"]] == [
        ["body", "tasks", 1, "idempotency_key"]
    ]
    assert "tasks[0]" in problem["detail"]
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("bad", "kind", "said"),
    [
        ({"name": "http.add", "input": [1, 2]}, "invalid-request", "body.tasks.3.input"),
        ({"name": "http.add", "input": {"a": 1, "c": 2}}, "invalid-task-data", "tasks[3].input.b"),
        ({"name": "http.nothing"}, "unknown-job", "tasks[3].name"),
        ({"name": "http.add", "owner": "bob"}, "invalid-request", "body.tasks.3.owner"),
        (
            {"name": "http.add", "delay": 1, "run_at": "2031-01-01T00:00:00Z"},
            "invalid-request",
            "body.tasks.3.delay",
        ),
        (
            {"name": "http.add", "idempotency_key": " padded "},
            "invalid-request",
            "body.tasks.3.idempotency_key",
        ),
    ],
    ids=["wrong-type", "not-the-jobs-input", "unknown-job", "owner", "two-starts", "bad-key"],
)
def test_one_bad_item_refuses_the_batch_naming_it(
    alice: httpx.Client, pg: HttpDeployment, bad: dict[str, Any], kind: str, said: str
) -> None:
    # Two replays first: the store sees item 3 as its second item, the answer names item 3.
    replays = adds(2)
    made = batch(alice, replays)
    assert made.status_code == 201, made.text
    completed(alice, made)
    store = pg.deployment.queue.store
    before = snapshot(store)

    response = batch(alice, [*replays, *adds(1), bad, *adds(1)])

    problem = assert_problem(response, 422, kind)
    field = said.removeprefix("body.").replace("[3]", ".3").split(".")
    assert [error["loc"] for error in problem["errors"]] == [["body", *field[:1], 3, *field[2:]]]
    assert problem["detail"].startswith(f"{said}: ")
    assert snapshot(store) == before


def test_unique_keys_give_their_holders_back(alice: httpx.Client) -> None:
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    held_key, fresh_key = (f"refresh:{uuid.uuid4().hex[:8]}" for _ in range(2))
    body = {"name": "http.add", "input": {"a": 1, "b": 1}, "run_at": later}
    held = create(alice, **body, unique_key=held_key)
    made: list[str] = [held["id"]]
    try:
        items = [body | {"unique_key": key} for key in (held_key, fresh_key, fresh_key)]
        response = batch(alice, items)
        assert response.status_code == 201, response.text
        made += ids_of(response)
        assert response.json()["results"] == [HOLDER, CREATED, HOLDER]
        ids = ids_of(response)
        assert ids[0] == held["id"]
        assert ids[2] == ids[1]  # an earlier item holds the key
        assert response.json()["tasks"][1]["unique_key"] == fresh_key

        only_holders = batch(alice, items[:2])
        assert only_holders.status_code == 200, only_holders.text
        assert only_holders.json()["results"] == [HOLDER, HOLDER]
        assert ids_of(only_holders) == ids[:2]
    finally:
        for task_id in set(made):
            alice.post(f"/tasks/{task_id}/cancel")


def test_the_batch_size_and_the_header_are_checked(
    api: Api, alice: httpx.Client, pg: HttpDeployment
) -> None:
    store = pg.deployment.queue.store
    before = snapshot(store)
    too_many = [{"name": "http.add", "input": {"a": 1, "b": 1}}] * 1001
    for body, kind in (({"tasks": []}, "too_short"), ({"tasks": too_many}, "too_long")):
        problem = assert_problem(alice.post("/tasks:batch", json=body), 422, "invalid-request")
        assert [(error["loc"], error["type"]) for error in problem["errors"]] == [
            (["body", "tasks"], kind)
        ]
    assert_problem(alice.post("/tasks:batch", json={}), 422, "invalid-request")
    assert_problem(alice.post("/tasks:batch", json=[]), 422, "invalid-request")
    header = alice.post(
        "/tasks:batch", json={"tasks": adds(1, keyed=False)}, headers={"Idempotency-Key": "k"}
    )
    assert_problem(header, 400, "invalid-idempotency-key")
    not_allowed = alice.get("/tasks:batch")
    assert_problem(not_allowed, 405)
    assert not_allowed.headers["allow"] == "POST"
    assert snapshot(store) == before

    with api.client() as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    tasks = schemas["CreateTasks"]["properties"]["tasks"]
    assert (tasks["minItems"], tasks["maxItems"]) == (1, 1000)
    item = schemas["CreateTaskItem"]["properties"]
    assert item["idempotency_key"]["anyOf"][0]["maxLength"] == 255
    assert "owner" not in item
    assert schemas["CreateTaskItem"]["additionalProperties"] is False


def test_concurrent_retries_of_a_batch_make_each_task_once(api: Api, pg: HttpDeployment) -> None:
    items = adds(5)
    together = threading.Barrier(ATTEMPTS)

    def attempt(_: int) -> httpx.Response:
        with api.client("token-alice") as client:
            client.get("/livez")  # connected: the batches leave at one moment
            together.wait(timeout=30)
            return batch(client, items)

    with ThreadPoolExecutor(max_workers=ATTEMPTS) as pool:
        responses = list(pool.map(attempt, range(ATTEMPTS)))

    assert [response.status_code for response in responses].count(201) == 1, [
        response.text for response in responses if response.status_code not in (200, 201)
    ]
    assert {response.status_code for response in responses} == {200, 201}
    for response in responses:
        expected = CREATED if response.status_code == 201 else REPLAYED
        assert response.json()["results"] == [expected] * 5
    assert len({tuple(ids_of(response)) for response in responses}) == 1
    store = pg.deployment.queue.store
    context = items[0]["context_id"]
    mine = [task for task in store.iterate(owner=ANY) if task.context_id == context]
    assert sorted(task.id for task in mine) == sorted(ids_of(responses[0]))
    with api.client("token-alice") as client:
        assert {task["attempt"] for task in completed(client, responses[0])} == {1}


def test_keys_belong_to_their_principal(api: Api, alice: httpx.Client, bob: httpx.Client) -> None:
    items = adds(3)
    mine = batch(alice, items)
    assert mine.status_code == 201, mine.text
    with api.client() as anonymous:
        for client, owner in ((bob, "bob"), (anonymous, None)):
            theirs = batch(client, items)
            assert theirs.status_code == 201, theirs.text
            assert theirs.json()["results"] == [CREATED] * 3
            assert {task["owner"] for task in theirs.json()["tasks"]} == {owner}
            assert not set(ids_of(theirs)) & set(ids_of(mine))
            completed(client, theirs)
            assert_problem(client.get(f"/tasks/{ids_of(mine)[0]}"), 404, "task-not-found")
    again = batch(alice, items)
    assert again.status_code == 200, again.text
    assert ids_of(again) == ids_of(mine)
    completed(alice, mine)
