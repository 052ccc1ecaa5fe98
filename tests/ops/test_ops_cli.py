"""The ``queuestore`` command through its real entry point, against PostgreSQL, Redis and a
worker and beat that ``queuestore worker`` and ``queuestore beat`` started."""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from queuestore import TaskStatus
from queuestore.store.sql.migrations import head
from tests.ops.ops_support import Ops, queuestore_command, wait_for


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_worker_started_by_the_command_runs_a_job(ops: Ops) -> None:
    task = ops.deployment.queue.submit("ops.steps", {"count": 2, "pause": 0.05})
    done = ops.deployment.wait_status(task.id, TaskStatus.COMPLETED)
    assert done.result == {"steps": 2}
    assert "ops-" in ops.worker.text()  # the --hostname given through to Celery


def test_beat_started_by_the_command_drives_the_janitor(ops: Ops) -> None:
    queue = ops.deployment.queue
    task = queue.submit("ops.steps", {"count": 1, "pause": 0.0}, ttl=timedelta(seconds=1))
    ops.deployment.wait_status(task.id, TaskStatus.COMPLETED)

    def gone() -> bool:
        listed = ops.cli("tasks", "list", "--json", "--limit", "1000")
        return task.id not in {t["id"] for t in json.loads(listed.stdout)["tasks"]}

    wait_for(gone, timeout=30, what="the janitor to remove the task", logs=[ops.beat, ops.worker])
    # The worker logs the janitor's round that acted (its idle rounds, and Celery's own
    # lines about sending and running it, are at DEBUG).
    wait_for(
        lambda: "the janitor removed 1 expired tasks" in ops.worker.text(),
        timeout=10,
        what="the janitor's line",
        logs=[ops.worker],
    )


def test_a_schedule_added_by_the_command_ticks_through_beat_and_the_worker(ops: Ops) -> None:
    added = ops.cli(
        "schedules", "add", "-A", "ops_app", "ops.steps", '{"count": 1, "pause": 0}',
        "--every", "2", "--owner", "dora", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    schedule_id = json.loads(added.stdout)["id"]

    def ran() -> dict[str, Any] | None:
        shown = json.loads(ops.cli("schedules", "show", "--json", "--", schedule_id).stdout)
        return shown if shown["last_status"] == "completed" else None

    shown = wait_for(ran, timeout=60, what="a tick's task to run", logs=[ops.beat, ops.worker])
    assert ops.cli("schedules", "pause", "--", schedule_id).returncode == 0
    task = ops.deployment.queue.store.get(shown["last_task_id"])
    assert (task.name, task.owner, task.result) == ("ops.steps", "dora", {"steps": 1})
    assert ops.cli("schedules", "delete", "--", schedule_id).returncode == 0


def test_inspecting_commands_print_json(ops: Ops) -> None:
    ops.deployment.queue.submit("ops.steps", {"count": 1, "pause": 0.0})  # a second page below
    task = ops.deployment.queue.submit("ops.steps", {"count": 1, "pause": 0.0}, owner="carol")
    ops.deployment.wait_status(task.id, TaskStatus.COMPLETED)

    current = ops.cli("db", "current", "--json")
    assert json.loads(current.stdout) == {"revision": head()}

    listed = ops.cli("tasks", "list", "--json", "--owner", "carol", "--status", "completed")
    page = json.loads(listed.stdout)
    assert [t["id"] for t in page["tasks"]] == [task.id]
    assert page["next_cursor"] is None

    shown = ops.cli("tasks", "show", "--json", "--", task.id)
    assert json.loads(shown.stdout)["result"] == {"steps": 1}
    assert len(_lines(shown.stdout)) == 1

    paged = ops.cli("tasks", "list", "--json", "--limit", "1")
    cursor = json.loads(paged.stdout)["next_cursor"]
    assert cursor is not None
    following = ops.cli("tasks", "list", "--json", "--limit", "1", "--cursor", cursor)
    assert following.returncode == 0, following.stderr


def test_watch_follows_a_task_until_it_finishes_as_json_lines(ops: Ops) -> None:
    queue = ops.deployment.queue
    gate = ops.deployment.root / "watch-gate"  # the job waits for it after its first step
    task = queue.submit("ops.ask", {"steps": 3, "gate": str(gate)})
    ops.deployment.wait_status(task.id, TaskStatus.INPUT_REQUIRED)  # parked until resumed
    command = queuestore_command("tasks", "watch", "--json", "--timeout", "60", "--", task.id)
    with subprocess.Popen(
        command, env=ops.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as watcher:
        assert watcher.stdout is not None
        states = [json.loads(watcher.stdout.readline())]  # the state when the watch opened
        assert (states[0]["id"], states[0]["status"]) == (task.id, "input_required")
        queue.resume(task.id, "go")  # the worker runs it again, while the watch is open
        # The run's progress arrives while the job is still running, not only at its end.
        while not (states[-1]["status"] == "working" and states[-1]["progress"] is not None):
            line = watcher.stdout.readline()
            assert line, f"the watch ended before any progress: {states}"
            states.append(json.loads(line))
            assert states[-1]["status"] in {"submitted", "working"}, states
        gate.touch()
        rest = watcher.stdout.read()
        assert watcher.wait(timeout=60) == 0, watcher.stderr.read() if watcher.stderr else ""
    states += [json.loads(line) for line in _lines(rest)]
    assert {state["id"] for state in states} == {task.id}
    versions = [state["version"] for state in states]
    assert versions == sorted(set(versions))
    assert states[-1]["status"] == "completed"
    progress = [
        state["progress"]
        for state in states
        if state["status"] == "working" and state["progress"] is not None
    ]
    assert progress == sorted(progress)


def test_watch_without_ids_follows_every_task_until_the_timeout(ops: Ops) -> None:
    queue = ops.deployment.queue
    parked = queue.submit("ops.ask", {"steps": 1})
    ops.deployment.wait_status(parked.id, TaskStatus.INPUT_REQUIRED)
    command = queuestore_command("tasks", "watch", "--json", "--timeout", "15")
    with subprocess.Popen(
        command, env=ops.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as watcher:
        assert watcher.stdout is not None
        first = []
        while not any(state["id"] == parked.id for state in first):  # the live tasks first
            first.append(json.loads(watcher.stdout.readline()))
        queue.resume(parked.id, "go")
        fresh = queue.submit("ops.steps", {"count": 1, "pause": 0.0})  # written after it opened
        rest = watcher.stdout.read()
        assert watcher.wait(timeout=60) == 0  # the end of a follow, not an error
    states = [json.loads(line) for line in _lines(rest)]
    assert [s["status"] for s in states if s["id"] == parked.id][-1] == "completed"
    assert [s["status"] for s in states if s["id"] == fresh.id][-1] == "completed"
    assert all(state["status"] not in {"completed", "failed", "cancelled"} for state in first)


def test_watch_prints_one_line_per_change_when_piped(ops: Ops) -> None:
    task = ops.deployment.queue.submit("ops.boom", {"message": "x" * 300})
    watched = ops.cli("tasks", "watch", "--timeout", "45", "--", task.id)
    assert watched.returncode == 0, watched.stderr
    lines = _lines(watched.stdout)
    assert lines[-1].startswith(f"{task.id} failed ops.boom")
    assert all(len(line) <= 80 for line in lines)


def test_watch_times_out_with_one_line(ops: Ops) -> None:
    task = ops.deployment.queue.store.create("ops.parked")  # its queue has no consumer
    watched = ops.cli("tasks", "watch", "--timeout", "0.5", "--", task.id)
    assert watched.returncode == 1
    assert _lines(watched.stderr) == ["queuestore: error: tasks still running after 0.5s"]


def test_resume_answers_a_task_and_its_job_finishes(ops: Ops) -> None:
    task = ops.deployment.queue.submit("ops.ask", {"question": "Ship it?"})
    ops.deployment.wait_status(task.id, TaskStatus.INPUT_REQUIRED)
    resumed = ops.cli("tasks", "resume", "-A", "ops_app", "--", task.id, '{"ship": true}')
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == [task.id, "working"]
    done = ops.deployment.wait_status(task.id, TaskStatus.COMPLETED)
    assert done.result == {"answer": {"ship": True}}

    again = ops.deployment.queue.submit("ops.ask")
    ops.deployment.wait_status(again.id, TaskStatus.INPUT_REQUIRED)
    as_text = ops.cli("tasks", "resume", "-A", "ops_app", "--text", "--", again.id, "42")
    assert as_text.returncode == 0, as_text.stderr
    assert ops.deployment.wait_status(again.id, TaskStatus.COMPLETED).result == {"answer": "42"}


def test_delete_removes_a_finished_task_and_refuses_a_live_one(ops: Ops) -> None:
    store = ops.deployment.queue.store
    live = store.create("ops.parked")
    refused = ops.cli("tasks", "delete", "--", live.id)
    assert refused.returncode == 1
    assert len(_lines(refused.stderr)) == 1
    assert "--force" in refused.stderr
    assert store.get(live.id).status is TaskStatus.SUBMITTED

    forced = ops.cli("tasks", "delete", "--force", "--", live.id)
    assert forced.returncode == 0, forced.stderr
    cancelled = store.cancel(store.create("ops.parked").id)
    deleted = ops.cli("tasks", "delete", "--", cancelled.id)
    assert deleted.returncode == 0, deleted.stderr
    for task_id in (live.id, cancelled.id):
        shown = ops.cli("tasks", "show", "--", task_id)
        assert shown.returncode == 1
        assert _lines(shown.stderr) == [f"queuestore: error: task {task_id!r} not found"]


BAD_INPUT = [
    pytest.param(["tasks", "list", "--status", "finished"], 2, id="unknown-status"),
    pytest.param(["tasks", "list", "--limit", "0"], 2, id="limit-zero"),
    pytest.param(["tasks", "list", "--cursor", "not-a-cursor"], 2, id="bad-cursor"),
    pytest.param(["tasks", "show", "--", "no-such-task"], 1, id="show-unknown"),
    pytest.param(["tasks", "show", "--", "bad id!"], 2, id="show-malformed-id"),
    pytest.param(["tasks", "show", "--owner", "mallory", "--", "{carol}"], 1, id="show-foreign"),
    pytest.param(["tasks", "cancel", "--", "{done}"], 1, id="cancel-finished"),
    pytest.param(["tasks", "resume", "--", "{done}", "yes"], 1, id="resume-not-waiting"),
    pytest.param(["tasks", "resume", "--", "no-such-task", "yes"], 1, id="resume-unknown"),
    pytest.param(["tasks", "resume", "-A", "no_such_module", "--", "{done}", "y"], 2, id="bad-app"),
    pytest.param(["tasks", "delete", "--", "no-such-task"], 1, id="delete-unknown"),
    pytest.param(
        ["tasks", "delete", "--owner", "mallory", "--", "{carol}"], 1, id="delete-foreign"
    ),
    pytest.param(["tasks", "watch", "--", "no-such-task"], 1, id="watch-unknown"),
    pytest.param(["tasks", "watch", "--timeout", "-1", "--", "{done}"], 2, id="watch-timeout"),
    pytest.param(["tasks", "lsit"], 2, id="unknown-command"),
    pytest.param(["worker", "-A", "no_such_module"], 2, id="worker-bad-app"),
    pytest.param(["db", "current", "--url", "postgresql://nobody@127.0.0.1:1/x"], 1, id="no-db"),
]


def test_bad_input_is_one_line_on_stderr_and_writes_nothing(ops: Ops) -> None:
    store = ops.deployment.queue.store
    carol = store.create("ops.parked", owner="carol")
    done = store.cancel(store.create("ops.parked").id)
    before = store.status_counts()

    def run(case: Any) -> str | None:
        arguments, code = case.values
        arguments = [
            argument.replace("{carol}", carol.id).replace("{done}", done.id)
            for argument in arguments
        ]
        result = ops.cli(*arguments)
        output = f"{case.id}: exit {result.returncode}\n{result.stdout}{result.stderr}"
        if result.returncode != code or result.stdout:
            return output
        if len(_lines(result.stderr)) != 1 or not result.stderr.startswith("queuestore: error: "):
            return output
        return None

    # The commands are independent and each spends seconds starting Python: run four at once.
    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [failure for failure in pool.map(run, BAD_INPUT) if failure is not None]
    assert failures == []
    assert store.status_counts() == before
    assert store.get(carol.id).version == carol.version
    assert store.get(done.id).version == done.version


def test_bad_configuration_is_one_line(ops: Ops) -> None:
    result = ops.cli("tasks", "list", QUEUESTORE_LEASE="soon")
    assert result.returncode == 2
    assert _lines(result.stderr) == [
        "queuestore: error: QUEUESTORE_LEASE must be seconds (30) or an ISO 8601 duration "
        "(PT30S); see queuestore config reference"
    ]


def test_table_fits_80_columns_when_piped(ops: Ops) -> None:
    message = "upstream answered 503 " * 20
    task = ops.deployment.queue.submit("ops.boom", {"message": message})
    ops.deployment.wait_status(task.id, TaskStatus.FAILED)
    listed = ops.cli("tasks", "list", "--limit", "5")
    assert listed.returncode == 0, listed.stderr
    # The next page's cursor is the one line that may be longer: it is never broken.
    lines = [line for line in listed.stdout.splitlines() if not line.startswith("--cursor ")]
    assert all(len(line) <= 80 for line in lines), listed.stdout
    at = next(n for n, line in enumerate(lines) if task.id in line.split())  # the id whole
    assert lines[at].split()[1:3] == ["failed", "ops.boom"]
    assert "RuntimeError" in lines[at + 1]  # its outcome on the line below, cut to fit
    assert "…" in lines[at + 1]
    # No column folded one character per line: a header, a rule, two lines a task at most.
    table = _lines(listed.stdout.split("more tasks")[0])
    rows = [line for line in table if re.match(r"\s*[A-Za-z0-9_-]{22}\s", line)]
    assert 1 <= len(rows) <= 5
    assert len(table) <= 2 + 2 * len(rows), listed.stdout


def test_flow_drain_stops_a_worker_taking_messages_until_undone(ops: Ops) -> None:
    import socket

    node = f"{ops.worker.name}@{socket.gethostname()}"
    drained = ops.cli("flow", "drain", node, "--app", "ops_app")
    assert drained.returncode == 0, drained.stderr
    assert "stopped taking messages" in drained.stdout
    try:
        task = ops.deployment.queue.submit("ops.steps", {"count": 1, "pause": 0.0})
        time.sleep(2)
        assert ops.deployment.queue.store.get(task.id).status is TaskStatus.SUBMITTED
    finally:
        undone = ops.cli("flow", "drain", node, "--undo", "--app", "ops_app")
    assert undone.returncode == 0, undone.stderr
    done = ops.deployment.wait_status(task.id, TaskStatus.COMPLETED, timeout=30)
    assert done.status is TaskStatus.COMPLETED
    unknown = ops.cli("flow", "drain", "nobody@nowhere", "--app", "ops_app")
    assert unknown.returncode == 1
    assert "did not answer" in unknown.stderr
