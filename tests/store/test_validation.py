"""Bad input raises InvalidTaskData naming the field, before anything is written."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import pytest
from pydantic import BaseModel, JsonValue

from queuestore import Artifact, InvalidTaskData, Task, TaskStatus, TaskStore
from queuestore.core.large_json import TEXT_DOCUMENT_BYTES
from queuestore.core.models import PageOfTasks
from queuestore.core.validation import MAX_NESTING, _containers_around

from .support import StoreFactory, reach, snapshot

LIMIT = 1000
"""The payload limit of the store under test, in bytes of compact JSON (UTF-8)."""

BIG = "x" * LIMIT
NAIVE = datetime(2026, 1, 1, 12, 0)
LEASE = timedelta(minutes=1)

Call = Callable[[TaskStore, Task], object]


def nested(depth: int) -> list[Any]:
    """A list in a list ... ``depth`` levels deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


CASES: list[tuple[str, str, Call]] = [
    # create: name
    ("empty name", "name", lambda s, t: s.create("")),
    ("oversize name", "name", lambda s, t: s.create("j" * 201)),
    ("name with a space", "name", lambda s, t: s.create("reports build")),
    ("blank name", "name", lambda s, t: s.create("   ")),
    ("name with a newline", "name", lambda s, t: s.create("reports\nbuild")),
    ("name with a C1 control", "name", lambda s, t: s.create("reports\x9bbuild")),
    ("name with a next line", "name", lambda s, t: s.create("reports\x85build")),
    ("name not a string", "name", lambda s, t: s.create(5)),  # type: ignore[arg-type]
    # create: input
    ("input a set", "input", lambda s, t: s.create("x.y", {1, 2})),  # type: ignore[arg-type]
    ("input holding a set", "input", lambda s, t: s.create("x.y", {"a": {1, 2}})),
    ("input holding NaN", "input", lambda s, t: s.create("x.y", {"a": float("nan")})),
    ("input holding infinity", "input", lambda s, t: s.create("x.y", {"a": float("inf")})),
    ("input holding an object", "input", lambda s, t: s.create("x.y", {"a": object()})),
    ("input holding bytes", "input", lambda s, t: s.create("x.y", {"a": b"raw"})),
    ("input with a non-string key", "input", lambda s, t: s.create("x.y", {1: "a"})),  # type: ignore[dict-item]
    ("input holding a tuple", "input", lambda s, t: s.create("x.y", {"a": (1, 2)})),
    ("input holding a lone surrogate", "input", lambda s, t: s.create("x.y", {"a": "\ud800"})),
    ("input nested too deeply", "input", lambda s, t: s.create("x.y", nested(MAX_NESTING + 1))),
    ("input a list", "input", lambda s, t: s.create("x.y", [1, 2])),  # type: ignore[arg-type]
    ("input a string", "input", lambda s, t: s.create("x.y", "text")),  # type: ignore[arg-type]
    ("oversize input", "input", lambda s, t: s.create("x.y", {"a": BIG})),
    ("input holding NUL", "input", lambda s, t: s.create("x.y", {"a": ["\x00"]})),
    ("input with a NUL key", "input", lambda s, t: s.create("x.y", {"a\x00": 1})),
    # create: the other fields
    ("oversize metadata", "metadata", lambda s, t: s.create("x.y", metadata={"a": BIG})),
    ("metadata a list", "metadata", lambda s, t: s.create("x.y", metadata=[1])),  # type: ignore[arg-type]
    (
        "metadata holding NaN",
        "metadata",
        lambda s, t: s.create("x.y", metadata={"a": float("nan")}),
    ),
    ("negative ttl", "ttl", lambda s, t: s.create("x.y", ttl=timedelta(seconds=-1))),
    ("ttl in seconds", "ttl", lambda s, t: s.create("x.y", ttl=60)),  # type: ignore[arg-type]
    ("empty owner", "owner", lambda s, t: s.create("x.y", owner="")),
    ("oversize owner", "owner", lambda s, t: s.create("x.y", owner="o" * 257)),
    ("owner not a string", "owner", lambda s, t: s.create("x.y", owner=5)),  # type: ignore[arg-type]
    ("empty context id", "context_id", lambda s, t: s.create("x.y", context_id="")),
    ("owner holding NUL", "owner", lambda s, t: s.create("x.y", owner="a\x00")),
    ("context id holding NUL", "context_id", lambda s, t: s.create("x.y", context_id="\x00")),
    ("metadata holding NUL", "metadata", lambda s, t: s.create("x.y", metadata={"m": "\x00"})),
    ("id with a space", "task_id", lambda s, t: s.create("x.y", task_id="a b")),
    ("empty id", "task_id", lambda s, t: s.create("x.y", task_id="")),
    ("oversize id", "task_id", lambda s, t: s.create("x.y", task_id="i" * 65)),
    ("id with a slash", "task_id", lambda s, t: s.create("x.y", task_id="../etc")),
    ("non-ascii id", "task_id", lambda s, t: s.create("x.y", task_id="tâche")),
    # bad ids everywhere
    ("get by a bad id", "task_id", lambda s, t: s.get("a b")),
    ("get by a non-string id", "task_id", lambda s, t: s.get(5)),  # type: ignore[arg-type]
    ("update by a bad id", "task_id", lambda s, t: s.update("", progress=0.5)),
    ("cancel by a bad id", "task_id", lambda s, t: s.cancel("a/b")),
    ("delete by a bad id", "task_id", lambda s, t: s.delete("a b")),
    ("wait on a bad id", "task_id", lambda s, t: s.wait("a b", timeout=0.01)),
    ("claim a bad id", "task_id", lambda s, t: s.claim("a b", "w1", LEASE)),
    ("heartbeat a bad id", "task_id", lambda s, t: s.heartbeat("a b", "w1", LEASE)),
    ("artifact on a bad id", "task_id", lambda s, t: s.add_artifact("a b", {"artifact_id": "a"})),
    ("input for a bad id", "task_id", lambda s, t: s.provide_input("a b", "yes")),
    # update
    ("unknown status", "status", lambda s, t: s.update(t.id, status="done")),
    ("status in capitals", "status", lambda s, t: s.update(t.id, status="WORKING")),
    ("status not a string", "status", lambda s, t: s.update(t.id, status=5)),  # type: ignore[arg-type]
    ("progress above 1", "progress", lambda s, t: s.update(t.id, progress=1.5)),
    ("progress below 0", "progress", lambda s, t: s.update(t.id, progress=-0.1)),
    ("progress NaN", "progress", lambda s, t: s.update(t.id, progress=float("nan"))),
    ("progress a bool", "progress", lambda s, t: s.update(t.id, progress=True)),
    ("progress a string", "progress", lambda s, t: s.update(t.id, progress="0.5")),  # type: ignore[arg-type]
    ("result a set", "result", lambda s, t: s.update(t.id, result={1, 2})),
    ("result NaN", "result", lambda s, t: s.update(t.id, result=float("nan"))),
    ("result an object", "result", lambda s, t: s.update(t.id, result=object())),
    ("oversize result", "result", lambda s, t: s.update(t.id, result=BIG)),
    ("result holding NUL", "result", lambda s, t: s.update(t.id, result="\x00")),
    ("message holding NUL", "status_message", lambda s, t: s.update(t.id, status_message="\x00")),
    ("error holding NUL", "error", lambda s, t: s.update(t.id, error={"type": "E\x00"})),
    ("reason holding NUL", "reason", lambda s, t: s.cancel(t.id, reason="\x00")),
    ("oversize metadata update", "metadata", lambda s, t: s.update(t.id, metadata={"a": BIG})),
    ("metadata update a string", "metadata", lambda s, t: s.update(t.id, metadata="m")),  # type: ignore[arg-type]
    ("error without a type", "error", lambda s, t: s.update(t.id, error={"type": ""})),
    ("error a string", "error", lambda s, t: s.update(t.id, error="boom")),  # type: ignore[arg-type]
    ("error with extra keys", "error", lambda s, t: s.update(t.id, error={"type": "E", "x": 1})),
    ("oversize error", "error", lambda s, t: s.update(t.id, error={"type": "E", "message": BIG})),
    ("message not a string", "status_message", lambda s, t: s.update(t.id, status_message=5)),  # type: ignore[arg-type]
    ("version zero", "expected_version", lambda s, t: s.update(t.id, expected_version=0)),
    ("version a bool", "expected_version", lambda s, t: s.update(t.id, expected_version=True)),
    ("cancel reason not a string", "reason", lambda s, t: s.cancel(t.id, reason=5)),  # type: ignore[arg-type]
    # artifacts and answers
    (
        "oversize artifact",
        "artifact",
        lambda s, t: s.add_artifact(t.id, Artifact(artifact_id="a", parts=[BIG])),
    ),
    (
        "artifact with oversize metadata",
        "artifact",
        lambda s, t: s.add_artifact(t.id, Artifact(artifact_id="a", metadata={"m": BIG})),
    ),
    (
        "artifact holding an object",
        "artifact",
        lambda s, t: s.add_artifact(t.id, {"artifact_id": "a", "parts": [object()]}),
    ),
    ("artifact without an id", "artifact", lambda s, t: s.add_artifact(t.id, {"parts": [1]})),
    ("artifact a string", "artifact", lambda s, t: s.add_artifact(t.id, "a")),  # type: ignore[arg-type]
    ("answer NaN", "answer", lambda s, t: s.provide_input(t.id, float("nan"))),
    ("answer holding NUL", "answer", lambda s, t: s.provide_input(t.id, {"\x00": 0})),
    (
        "artifact holding NUL",
        "artifact",
        lambda s, t: s.add_artifact(t.id, Artifact(artifact_id="a", parts=["\x00"])),
    ),
    ("oversize answer", "answer", lambda s, t: s.provide_input(t.id, BIG)),
    # list
    ("limit 0", "limit", lambda s, t: s.list(limit=0)),
    ("limit 1001", "limit", lambda s, t: s.list(limit=1001)),
    ("limit True", "limit", lambda s, t: s.list(limit=True)),
    ("limit negative", "limit", lambda s, t: s.list(limit=-1)),
    ("limit a float", "limit", lambda s, t: s.list(limit=1.5)),  # type: ignore[arg-type]
    ("limit a string", "limit", lambda s, t: s.list(limit="10")),  # type: ignore[arg-type]
    ("naive updated_after", "updated_after", lambda s, t: s.list(updated_after=NAIVE)),
    ("unknown status filter", "status", lambda s, t: s.list(status="done")),
    ("unknown status in a list", "status", lambda s, t: s.list(status=["working", "nope"])),
    ("status filter not a string", "status", lambda s, t: s.list(status=5)),  # type: ignore[arg-type]
    ("name filter with a space", "name", lambda s, t: s.list(name="a b")),
    ("empty context filter", "context_id", lambda s, t: s.list(context_id="")),
    # cleanup and the worker protocol
    ("naive cleanup now", "now", lambda s, t: s.cleanup(timedelta(0), now=NAIVE)),
    ("negative cleanup ttl", "ttl", lambda s, t: s.cleanup(timedelta(seconds=-1))),
    ("cleanup without a ttl", "ttl", lambda s, t: s.cleanup(None)),  # type: ignore[arg-type]
    ("batch size 0", "batch_size", lambda s, t: s.cleanup(timedelta(0), batch_size=0)),
    ("naive reap now", "now", lambda s, t: s.reap(now=NAIVE)),
    ("max lost runs 0", "max_lost_runs", lambda s, t: s.reap(max_lost_runs=0)),
    ("zero lease", "lease", lambda s, t: s.claim(t.id, "w1", timedelta(0))),
    ("lease in seconds", "lease", lambda s, t: s.claim(t.id, "w1", 60)),  # type: ignore[arg-type]
    ("empty worker id", "worker_id", lambda s, t: s.claim(t.id, "", LEASE)),
    ("no worker id", "worker_id", lambda s, t: s.claim(t.id, None, LEASE)),  # type: ignore[arg-type]
    ("negative heartbeat lease", "lease", lambda s, t: s.heartbeat(t.id, "w1", -LEASE)),
    ("empty heartbeat worker", "worker_id", lambda s, t: s.heartbeat(t.id, "", LEASE)),
    ("update fenced by no one", "worker_id", lambda s, t: s.update(t.id, worker_id="")),
    (
        "artifact fenced by no one",
        "worker_id",
        lambda s, t: s.add_artifact(t.id, {"artifact_id": "a"}, worker_id=""),
    ),
]


@pytest.fixture
def small_store(make_store: StoreFactory) -> TaskStore:
    return make_store(max_payload_bytes=LIMIT)


@pytest.mark.parametrize(("field", "call"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    small_store: TaskStore, field: str, call: Call
) -> None:
    target = reach(small_store, TaskStatus.INPUT_REQUIRED, metadata={"m": 1})
    small_store.create("x.other", owner="alice")
    reach(small_store, TaskStatus.COMPLETED)
    before = snapshot(small_store)

    with pytest.raises(InvalidTaskData) as raised:
        call(small_store, target)

    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert isinstance(raised.value, ValueError)
    assert snapshot(small_store) == before


def test_payloads_up_to_the_limit_are_accepted(small_store: TaskStore) -> None:
    fits = {"a": "x" * (LIMIT - len('{"a":""}'))}
    task = small_store.create("x.y", fits, metadata=fits)
    small_store.update(task.id, status="working")

    done = small_store.update(task.id, result=fits, status="completed")

    assert done.input == done.metadata == done.result == fits


def test_the_limit_counts_the_bytes_of_utf8_not_of_escapes(small_store: TaskStore) -> None:
    room = LIMIT - len('{"a":""}')
    fits = {"a": "é" * (room // 2)}  # two bytes each; escaped as \\u00e9 it would be six
    over = {"a": "é" * (room // 2 + 1)}

    assert small_store.create("x.y", fits).input == fits
    with pytest.raises(InvalidTaskData, match=f"is {LIMIT + 2} bytes as JSON"):
        small_store.create("x.y", over)


def test_appending_past_the_limit_is_refused_and_keeps_the_parts(small_store: TaskStore) -> None:
    task = reach(small_store, TaskStatus.WORKING)
    half = "x" * (LIMIT // 2)
    small_store.add_artifact(task.id, Artifact(artifact_id="log", parts=[half]))
    before = small_store.get(task.id)

    with pytest.raises(InvalidTaskData) as raised:
        small_store.add_artifact(task.id, Artifact(artifact_id="log", parts=[half]), append=True)

    assert raised.value.field == "artifact"
    assert small_store.get(task.id) == before


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1000"])
def test_a_bad_payload_limit_is_refused(make_store: StoreFactory, bad: Any) -> None:
    with pytest.raises(InvalidTaskData) as raised:
        make_store(max_payload_bytes=bad)

    assert raised.value.field == "max_payload_bytes"


def test_ttl_is_cut_to_the_millisecond_by_every_store(store: TaskStore) -> None:
    task = store.create("x.y", ttl=timedelta(seconds=1, microseconds=1999))

    assert task.ttl == timedelta(seconds=1, milliseconds=1)
    assert store.get(task.id).ttl == task.ttl


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": {"b": [1, object()]}}, "is not JSON: a.b.1: input was not a valid JSON value"),
        ({"a": {"b": (1, 2)}}, "is not JSON: a.b: input was not a valid JSON value"),
        ({"a": float("nan")}, "is not JSON: a: Input should be a finite number"),
        ({"a": "\ud800"}, "surrogates not allowed"),
        ({"a": nested(MAX_NESTING)}, f"is not JSON: nests deeper than {MAX_NESTING} levels"),
    ],
)
def test_a_refusal_says_where_the_value_is_not_json(
    small_store: TaskStore, value: Any, says: str
) -> None:
    with pytest.raises(InvalidTaskData, match=r"^input: ") as raised:
        small_store.create("x.y", value)

    assert says in str(raised.value)


TEXT = "é" * (TEXT_DOCUMENT_BYTES // 2)
"""Non-ASCII text enough to make a document large with few containers (validated, not parsed)."""


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"text": TEXT, "a": {"b": [1, object()]}}, "a.b.1: input was not a valid JSON value"),
        ({"text": TEXT, "a": {"b": (1, 2)}}, "a.b: input was not a valid JSON value"),
        ({"text": TEXT, "a": float("inf")}, "a: Input should be a finite number"),
        ({"text": TEXT, 1: "a"}, "1: Input should be a valid string"),
        ({"text": TEXT + "\ud800"}, "surrogates not allowed"),
        ({"text": TEXT, "nul": ["\x00"]}, "must not contain the NUL character"),
    ],
)
def test_a_large_text_document_is_refused_alike(store: TaskStore, value: Any, says: str) -> None:
    with pytest.raises(InvalidTaskData, match=r"^input: ") as raised:
        store.create("x.y", value)

    assert says in str(raised.value)


@pytest.mark.parametrize("text", ["", TEXT], ids=["small", "large text"])
def test_what_is_kept_is_json_own_types(store: TaskStore, text: str) -> None:
    class Colour(StrEnum):
        RED = "red"

    given = {"colour": Colour.RED, "rows": OrderedDict(a=1), "big": 10**30, "text": text}

    task = store.create("x.y", given)

    assert task.input == given
    assert type(task.input["colour"]) is str
    assert type(task.input["rows"]) is dict
    assert store.get(task.id).input == task.input


def test_the_deepest_documents_are_read_back_one_by_one_and_in_pages(store: TaskStore) -> None:
    deep = nested(MAX_NESTING)
    task = store.create("x.y", {"a": nested(MAX_NESTING - 1)}, metadata={"m": deep[0]})
    store.update(task.id, status="working")
    store.add_artifact(task.id, Artifact(artifact_id="a", parts=[nested(MAX_NESTING - 2)]))
    store.update(task.id, status="input_required")
    store.provide_input(task.id, deep)
    store.update(task.id, status="completed", result=deep)

    read = store.get(task.id)
    (listed,) = store.list().tasks

    assert read == listed
    assert read.result == read.answers[0] == deep
    assert read.artifacts[0].parts == [nested(MAX_NESTING - 2)]


def test_the_nesting_a_read_leaves_documents_follows_the_pages_shape() -> None:
    class Deeper(BaseModel):
        answers: list[list[JsonValue]]
        count: int | None = None

    assert _containers_around(PageOfTasks) == 3  # the page, a task, its artifacts or answers
    assert _containers_around(Task) == 2
    assert _containers_around(list[Deeper]) == 4
    assert _containers_around(int | None) is None
    assert MAX_NESTING == 198  # what the parser takes (201), less the page around a document
