"""The A2A stores' rules on every backend (memory, SQLite, PostgreSQL), in process.

Owners stay apart (inside the query, before the page limit; a save never takes
another owner's id), terminal states stay terminal, CANCELED keeps artifacts
and history, saves are compare-and-set on the row's version, and ListTasks
honours each of its fields with page tokens in the SDK's format.
"""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from a2a.helpers import new_text_message
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.types import (
    Artifact,
    ListTasksRequest,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import decode_list_tasks_cursor

from queuestore import Task as Row
from queuestore import TaskStatus as Status
from queuestore import TaskStore
from queuestore.a2a import (
    SDK_TASK,
    QueuestoreEventStream,
    QueuestoreTaskStore,
    VersionedQueuestoreTaskStore,
    convert,
    resolve_owner,
)
from queuestore.a2a.convert import part_from_json, part_to_json, to_a2a
from tests.a2a.a2a_support import (
    ALICE,
    BOB,
    CANCELED,
    COMPLETED,
    SUBMITTED,
    WORKING,
    a2a_task,
    call_context,
    run,
)


def test_a_task_round_trips_with_history_metadata_artifacts_and_status_message(
    store: TaskStore,
) -> None:
    ours = QueuestoreTaskStore(store)
    task = a2a_task("t-round", WORKING)
    task.metadata.update({"origin": "test", "n": 2})
    task.status.message.CopyFrom(new_text_message("thinking", role=Role.ROLE_AGENT))
    task.artifacts.append(
        Artifact(
            artifact_id="a1",
            name="answer",
            description="the answer",
            parts=[Part(text="42"), Part(url="https://example.com/x")],
        )
    )
    run(ours.save(task, ALICE))
    got = run(ours.get("t-round", ALICE))

    assert got is not None
    assert got.status.state == WORKING
    assert got.status.message.parts[0].text == "thinking"
    assert got.status.message.message_id == task.status.message.message_id
    assert got.status.HasField("timestamp")
    assert got.metadata == task.metadata
    assert list(got.history) == list(task.history)
    assert list(got.artifacts) == list(task.artifacts)
    assert got is not run(ours.get("t-round", ALICE))  # fresh protos out
    assert store.get("t-round").name == SDK_TASK
    assert store.get("t-round").owner == "alice"


def test_a_task_the_agent_runs_in_the_server_is_never_published(store: TaskStore) -> None:
    # Not a Celery job: the sweep must not publish it under its name,
    # and the outbox backlog must not count it, however long it works.
    ours = VersionedQueuestoreTaskStore(store)
    run(ours.as_task_store.save(a2a_task("t-plain"), ALICE))
    first = a2a_task("t-versioned", WORKING)
    run(ours.save(first, event=first, prev=None, prev_version=TaskVersion.MISSING, context=ALICE))
    job = store.create("agent.job", owner="alice")

    due = store.unpublished(timedelta(0), republish_after=timedelta(0))

    assert [task.id for task in due] == [job.id]
    assert store.unpublished_count() == 1
    assert store.get("t-versioned").status is Status.WORKING


def test_owners_are_apart_and_a_save_never_moves_a_task_between_them(store: TaskStore) -> None:
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-owned"), ALICE))

    with pytest.raises(ConcurrentTaskModificationError):
        run(ours.save(a2a_task("t-owned", COMPLETED), BOB))

    assert run(ours.get("t-owned", BOB)) is None
    assert run(ours.list(ListTasksRequest(), BOB)).total_size == 0
    alices = run(ours.get("t-owned", ALICE))
    assert alices is not None
    assert alices.status.state == SUBMITTED
    assert store.get("t-owned").owner == "alice"
    run(ours.delete("t-owned", BOB))
    assert run(ours.get("t-owned", ALICE)) is not None


def test_terminal_states_are_sticky_and_the_refusal_is_logged(
    store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-end", WORKING), ALICE))
    run(ours.save(a2a_task("t-end", CANCELED), ALICE))

    for late in (COMPLETED, WORKING, TaskState.TASK_STATE_FAILED):
        with pytest.raises(ConcurrentTaskModificationError):
            run(ours.save(a2a_task("t-end", late), ALICE))
    run(ours.save(a2a_task("t-end", CANCELED), ALICE))  # the same end again: a no-op

    assert store.get("t-end").status is Status.CANCELLED
    assert sum("refused a late" in line for line in caplog.messages) == 3


def test_canceled_changes_the_status_only_and_keeps_artifacts_and_history(
    store: TaskStore,
) -> None:
    ours = VersionedQueuestoreTaskStore(store)
    task = a2a_task("t-cancel", WORKING)
    task.artifacts.append(Artifact(artifact_id="a", parts=[Part(text="kept")]))
    version = run(
        ours.save(task, event=None, prev=None, prev_version=TaskVersion.MISSING, context=ALICE)
    )
    stale = a2a_task("t-cancel", CANCELED)  # a stale copy: no artifacts, other history

    stale.history[0].parts[0].text = "stale"
    run(ours.save(stale, event=None, prev=None, prev_version=version, context=ALICE))
    stored = run(ours.get("t-cancel", ALICE))

    assert stored is not None
    assert stored.task.status.state == CANCELED
    assert [artifact.parts[0].text for artifact in stored.task.artifacts] == ["kept"]
    assert [message.parts[0].text for message in stored.task.history] == ["hi"]


def test_versioned_saves_are_compare_and_set_except_cancel(store: TaskStore) -> None:
    ours = VersionedQueuestoreTaskStore(store)
    first = run(
        ours.save(
            a2a_task("t-cas"),
            event=None,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=ALICE,
        )
    )
    working = TaskStatusUpdateEvent(
        task_id="t-cas", context_id="ctx", status=TaskStatus(state=WORKING)
    )
    second = run(
        ours.save(
            a2a_task("t-cas", WORKING), event=working, prev=None, prev_version=first, context=ALICE
        )
    )

    with pytest.raises(ConcurrentTaskModificationError):
        run(
            ours.save(
                a2a_task("t-cas", COMPLETED),
                event=None,
                prev=None,
                prev_version=first,
                context=ALICE,
            )
        )
    with pytest.raises(ConcurrentTaskModificationError):  # a first write of an existing id
        run(
            ours.save(
                a2a_task("t-missing", WORKING),
                event=None,
                prev=None,
                prev_version=second,
                context=ALICE,
            )
        )
    cancelled = run(
        ours.save(
            a2a_task("t-cas", CANCELED), event=None, prev=None, prev_version=first, context=ALICE
        )
    )
    stored = run(ours.get("t-cas", ALICE))

    assert second.is_after(first)
    assert cancelled.is_after(second)
    assert stored is not None
    assert stored.version == cancelled
    assert stored.task.status.state == CANCELED


def test_an_artifact_event_is_applied_as_what_it_adds(store: TaskStore) -> None:
    ours = VersionedQueuestoreTaskStore(store)
    version = run(
        ours.save(
            a2a_task("t-art", WORKING),
            event=None,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=ALICE,
        )
    )
    chunk = Artifact(artifact_id="s", parts=[Part(text="a")])
    event = TaskArtifactUpdateEvent(task_id="t-art", context_id="ctx", artifact=chunk)
    version = run(
        ours.save(
            a2a_task("t-art", WORKING), event=event, prev=None, prev_version=version, context=ALICE
        )
    )
    more = TaskArtifactUpdateEvent(
        task_id="t-art",
        context_id="ctx",
        artifact=Artifact(artifact_id="s", parts=[Part(text="b")]),
        append=True,
    )
    run(
        ours.save(
            a2a_task("t-art", WORKING), event=more, prev=None, prev_version=version, context=ALICE
        )
    )

    parts = to_a2a(store.get("t-art")).artifacts[0].parts
    assert [part.text for part in parts] == ["a", "b"]


def test_a2a_skipping_working_goes_through_it(store: TaskStore) -> None:
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-skip"), ALICE))
    run(ours.save(a2a_task("t-skip", COMPLETED), ALICE))
    assert store.get("t-skip").status is Status.COMPLETED


def test_bad_input_is_a_clear_error_and_writes_nothing(store: TaskStore) -> None:
    ours = QueuestoreTaskStore(store)
    with pytest.raises(InvalidParamsError):
        run(ours.save(a2a_task("t-bad", TaskState.TASK_STATE_UNSPECIFIED), ALICE))
    with pytest.raises(InvalidParamsError):
        run(ours.save(a2a_task("not an id!"), ALICE))
    assert store.count() == 0


def test_list_honours_every_field_with_tokens_in_the_sdks_format(store: TaskStore) -> None:
    ours = QueuestoreTaskStore(store)
    for index in range(7):
        task = a2a_task(f"t-{index}", WORKING, context_id="even" if index % 2 == 0 else "odd")
        task.artifacts.append(Artifact(artifact_id="a", parts=[Part(text=str(index))]))
        task.history.append(new_text_message("second", role=Role.ROLE_USER))
        run(ours.save(task, ALICE))
    run(ours.save(a2a_task("t-bob"), BOB))
    run(ours.save(a2a_task("t-3", COMPLETED), ALICE))

    walked, token, totals = [], "", set()
    while True:
        page = run(ours.list(ListTasksRequest(page_size=3, page_token=token), ALICE))
        walked.extend(task.id for task in page.tasks)
        totals.add(page.total_size)
        assert page.page_size == 3
        token = page.next_page_token
        if not token:
            break
        cursor = decode_list_tasks_cursor(token)
        assert cursor is not None
        assert cursor.task_id == page.tasks[-1].id
    default = run(ours.list(ListTasksRequest(), ALICE))
    even = run(ours.list(ListTasksRequest(context_id="even"), ALICE))
    done = run(ours.list(ListTasksRequest(status=COMPLETED), ALICE))
    trimmed = run(ours.list(ListTasksRequest(history_length=1, include_artifacts=True), ALICE))
    bare = run(ours.list(ListTasksRequest(), ALICE))
    future = ListTasksRequest()
    future.status_timestamp_after.FromDatetime(datetime.now(UTC) + timedelta(days=1))
    at_update = ListTasksRequest()
    at_update.status_timestamp_after.CopyFrom(run(ours.get("t-3", ALICE)).status.timestamp)

    assert walked == [f"t-{index}" for index in reversed(range(7))]  # newest created first
    assert totals == {7}
    assert default.page_size == 50
    assert {task.id for task in even.tasks} == {"t-0", "t-2", "t-4", "t-6"}
    assert even.total_size == 4
    assert [task.id for task in done.tasks] == ["t-3"]
    assert all(len(task.history) == 1 for task in trimmed.tasks)
    assert {task.history[0].parts[0].text for task in trimmed.tasks if task.id != "t-3"} == {
        "second"
    }
    assert all(task.artifacts for task in trimmed.tasks)
    assert all(not task.artifacts for task in bare.tasks)
    assert run(ours.list(future, ALICE)).total_size == 0
    assert "t-3" in {task.id for task in run(ours.list(at_update, ALICE)).tasks}  # >=, as A2A says
    for bad in (
        ListTasksRequest(page_size=0),
        ListTasksRequest(page_size=101),
        ListTasksRequest(page_token="nope"),
    ):
        with pytest.raises(InvalidParamsError):
            run(ours.list(bad, ALICE))
    legacy = base64.urlsafe_b64encode(json.dumps({"ts": None, "id": "t-1"}).encode()).decode()
    with pytest.raises(InvalidParamsError):
        run(ours.list(ListTasksRequest(page_token=legacy), ALICE))


def test_the_owner_is_the_user_within_the_tenant() -> None:
    assert resolve_owner(call_context("alice")) == "alice"
    assert resolve_owner(call_context("")) is None
    assert resolve_owner(call_context("alice", tenant="acme")) == '["acme","alice"]'
    assert resolve_owner(call_context("alice", tenant="acme")) != resolve_owner(
        call_context("alice", tenant="other")
    )


def test_parts_round_trip_and_a_jobs_plain_values_read_as_text_or_data() -> None:
    for part in (
        Part(text="t"),
        Part(url="https://x"),
        Part(raw=b"\x00\x01"),
        Part(text="t", media_type="text/plain"),
    ):
        assert part_from_json(part_to_json(part)) == part
    assert part_from_json("plain").text == "plain"
    data = part_from_json({"rows": 3})
    assert data.WhichOneof("content") == "data"
    assert data.data.struct_value["rows"] == 3


def test_the_event_stream_delivers_each_new_version_until_the_end(store: TaskStore) -> None:
    ours = VersionedQueuestoreTaskStore(store)
    stream = QueuestoreEventStream(store)
    version = run(
        ours.save(
            a2a_task("t-stream", WORKING),
            event=None,
            prev=None,
            prev_version=TaskVersion.MISSING,
            context=ALICE,
        )
    )

    async def follow() -> list[str]:
        seen: list[str] = []

        async def write() -> None:
            await asyncio.sleep(0.2)
            await asyncio.to_thread(
                store.add_artifact, "t-stream", {"artifact_id": "x", "parts": ["one"]}
            )
            await asyncio.to_thread(
                store.update, "t-stream", status=Status.COMPLETED, result={"ok": True}
            )

        writer = asyncio.create_task(write())
        async for versioned in stream.subscribe("t-stream", after=version):
            event = versioned.event
            if isinstance(event, TaskArtifactUpdateEvent):
                seen.append(f"artifact:{event.artifact.artifact_id}")
            elif isinstance(event, TaskStatusUpdateEvent):
                seen.append(f"status:{TaskState.Name(event.status.state)}")
        await writer
        return seen

    seen = asyncio.run(asyncio.wait_for(follow(), 15))

    assert seen[-1] == "status:TASK_STATE_COMPLETED"
    assert "artifact:x" in seen
    assert "artifact:result" in seen


def _working_job(store: TaskStore, task_id: str) -> Row:
    """A job's row of alice's, working half way, its A2A history the user's "first"."""
    first = new_text_message("first", role=Role.ROLE_USER)
    row = store.create(
        "agent.job",
        owner="alice",
        context_id="ctx",
        task_id=task_id,
        metadata={"a2a": convert.content_for(Task(history=[first]))},
    )
    return store.update(row.id, status=Status.WORKING, progress=0.5)


def test_a_jobs_task_is_written_by_its_worker_and_the_sdk_adds_history_only(
    store: TaskStore,
) -> None:
    ours = QueuestoreTaskStore(store)
    row = _working_job(store, "t-job")
    store.update(row.id, status_message="worker says")
    store.add_artifact(row.id, {"artifact_id": "w", "parts": ["from the worker"]})
    copy = a2a_task("t-job", COMPLETED)  # an SDK copy: other status, no artifacts
    del copy.history[:]  # a copy that never saw the first message
    copy.history.append(new_text_message("second", role=Role.ROLE_USER))

    run(ours.save(copy, ALICE))
    after = store.get("t-job")
    view = run(ours.get("t-job", ALICE))

    assert after.status is Status.WORKING  # the worker's status stands
    assert [artifact.artifact_id for artifact in after.artifacts] == ["w"]
    assert view is not None
    assert [message.parts[0].text for message in view.history] == ["first", "second"]
    failed = a2a_task("t-job", TaskState.TASK_STATE_FAILED)
    run(ours.save(failed, ALICE))
    assert store.get("t-job").status is Status.FAILED


def test_a_relayed_event_of_a_job_that_ends_during_the_save_leaves_the_end_standing(
    store: TaskStore,
) -> None:
    """The worker's end lands between the save's read and its write (seen on CI)."""
    versioned = VersionedQueuestoreTaskStore(store)
    row = _working_job(store, "t-ends")
    fetch = store._fetch  # type: ignore[attr-defined]
    ended: list[int] = []

    def fetch_then_the_worker_ends_it(task_id: str, scope: object) -> object:
        read = fetch(task_id, scope)
        if not ended:
            ended.append(store.update(task_id, status=Status.COMPLETED, result={"ok": 1}).version)
        return read

    store._fetch = fetch_then_the_worker_ends_it  # type: ignore[attr-defined]
    copy = a2a_task("t-ends", WORKING, text="first")
    copy.history.append(new_text_message("second", role=Role.ROLE_USER))  # a write to make
    event = TaskStatusUpdateEvent(task_id="t-ends", context_id="ctx", status=copy.status)

    version = run(
        versioned.save(
            copy, event=event, prev=None, prev_version=TaskVersion(row.version), context=ALICE
        )
    )

    after = store.get("t-ends")
    assert (after.status, after.result) == (Status.COMPLETED, {"ok": 1})
    assert version == TaskVersion(ended[0]) == TaskVersion(after.version)


def test_the_jobs_status_messages_the_sdk_moves_into_the_history_are_left_out(
    store: TaskStore,
) -> None:
    versioned = VersionedQueuestoreTaskStore(store)
    row = _working_job(store, "t-reports")
    copy = to_a2a(row)
    for report in range(5):  # what the SDK does with each status update it relays
        row = store.update(row.id, status_message=f"report {report}")
        copy.history.append(convert.status_of_task(row).message)
    answer = new_text_message("an answer", role=Role.ROLE_USER)
    copy.history.append(answer)
    event = TaskStatusUpdateEvent(task_id=row.id, context_id="ctx", status=copy.status)

    run(
        versioned.save(
            copy, event=event, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
        )
    )

    stored = run(versioned.get(row.id, ALICE))
    assert stored is not None
    assert [message.parts[0].text for message in stored.task.history] == ["first", "an answer"]
    assert list(copy.history) == list(stored.task.history)  # the SDK's copy, pruned too


def test_list_shows_the_tasks_a_client_created_not_the_children_their_jobs_spawned(
    store: TaskStore,
) -> None:
    ours = QueuestoreTaskStore(store)
    run(ours.save(a2a_task("t-parent"), ALICE))
    assert store.claim("t-parent", "w1", timedelta(minutes=1)) is not None
    ((child, _),) = store.spawn("t-parent", "w1", [{"name": "a2a.child"}])

    listed = run(ours.list(ListTasksRequest(), ALICE))

    assert [task.id for task in listed.tasks] == ["t-parent"]
    assert listed.total_size == 1
    assert run(ours.get(child.id, ALICE)) is not None  # a child is readable by id
