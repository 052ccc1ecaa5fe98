"""A task keeps the trace context of the submit that created it, for its runs to continue."""

from __future__ import annotations

import pytest

from queuestore import InvalidTaskData, TaskStore

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_trace_context_is_kept_and_read_back(store: TaskStore) -> None:
    task = store.create("x.job", traceparent=TRACEPARENT)
    (many,) = store.create_many([{"name": "x.job", "traceparent": TRACEPARENT}])

    assert task.traceparent == many.traceparent == TRACEPARENT
    assert store.get(task.id).traceparent == TRACEPARENT
    assert store.get(many.id).traceparent == TRACEPARENT
    assert store.create("x.job").traceparent is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        42,
    ],
)
def test_a_malformed_trace_context_is_refused(store: TaskStore, value: object) -> None:
    with pytest.raises(InvalidTaskData, match="traceparent"):
        store.create("x.job", traceparent=value)  # type: ignore[arg-type]

    assert store.count() == 0
