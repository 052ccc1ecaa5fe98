"""A submit's callback: registered before the job is published; a refused URL writes nothing."""

from __future__ import annotations

import pytest

from queuestore import CallbackRefused, CallbackRequest, InvalidTaskData, TaskQueue, TaskStatus
from queuestore.core.callbacks import DEFAULT_CALLBACK_ID, CallbackEvents
from tests.celery_support import Published

URL = "https://93.184.216.34/hook"


def test_submit_registers_the_callback_before_it_publishes(
    queue: TaskQueue, published: Published
) -> None:
    seen: list[int] = []
    send = published.send_task

    def publishing(name: str, **options: object) -> None:
        task_id = str(options["task_id"])
        seen.append(len(queue.store.callbacks(task_id)))
        send(name, **options)

    published.send_task = publishing  # type: ignore[method-assign]
    queue.app.send_task = publishing  # type: ignore[method-assign]
    task = queue.submit("x.y", owner="a", callback=CallbackRequest(url=URL, events="all"))

    (callback,) = queue.store.callbacks(task.id, owner="a")
    assert (callback.id, callback.events, callback.owner) == (
        DEFAULT_CALLBACK_ID,
        CallbackEvents.ALL,
        "a",
    )
    assert seen == [1]


@pytest.mark.parametrize("url", ["http://10.0.0.1/hook", "http://127.0.0.1:8080/", "ftp://x.y/"])
def test_a_refused_callback_writes_and_publishes_nothing(
    queue: TaskQueue, published: Published, url: str
) -> None:
    with pytest.raises(CallbackRefused):
        queue.submit("x.y", callback=CallbackRequest(url=url))

    assert queue.store.count() == 0
    assert published.messages == []


def test_a_joined_task_gets_the_second_callback_beside_the_first(queue: TaskQueue) -> None:
    first = queue.submit("x.y", unique_key="k", callback=CallbackRequest(url=URL))
    second = queue.submit(
        "x.y", unique_key="k", callback=CallbackRequest(url="https://93.184.216.35/other")
    )

    assert second.id == first.id
    assert sorted(c.url for c in queue.store.callbacks(first.id)) == [
        URL,
        "https://93.184.216.35/other",
    ]


def test_submit_many_registers_each_items_callback(queue: TaskQueue) -> None:
    tasks = queue.submit_many(
        [
            {"name": "x.y", "callback": {"url": URL, "events": "all"}},
            {"name": "x.y"},
            {"name": "x.y", "callback": CallbackRequest(url=URL)},
        ]
    )

    assert [len(queue.store.callbacks(task.id)) for task in tasks] == [1, 0, 1]
    queue.store.update(tasks[0].id, status="working")
    assert [d.status for d in queue.store.deliveries(tasks[0].id)] == [TaskStatus.WORKING]


@pytest.mark.parametrize(
    ("callback", "field"),
    [
        ({"url": "http://192.168.1.1/"}, "tasks[1].callback.url"),
        ({"url": URL, "events": "sometimes"}, "tasks[1].callback"),
        ("not a callback", "tasks[1].callback"),
    ],
)
def test_submit_many_refuses_a_bad_callback_and_writes_nothing(
    queue: TaskQueue, published: Published, callback: object, field: str
) -> None:
    with pytest.raises(InvalidTaskData) as raised:
        queue.submit_many([{"name": "x.y"}, {"name": "x.y", "callback": callback}])

    assert raised.value.field == field
    assert queue.store.count() == 0
    assert published.messages == []
