"""Steering a task from the command line, as the tutorial does: ``tasks watch --until``
stops when a task waits for an answer, and refusing to cancel a finished task or to
answer one that does not wait says so in the reader's words.

In-process (typer's runner) on an SQLite file; the store stands in for the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuestore import SqlTaskStore, TaskStatus
from queuestore.ops.cli import app


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'steering.db'}"


@pytest.fixture
def store(url: str) -> Iterator[SqlTaskStore]:
    made = SqlTaskStore(url)
    made.migrate()
    yield made
    made.close()


def run(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(arguments))
    return result.exit_code, result.stdout, result.stderr


def test_watch_until_input_required_stops_when_the_task_asks(store: SqlTaskStore, url: str) -> None:
    task = store.create("reports.build", {"month": "2026-11"})

    def ask() -> None:
        store.update(task.id, status=TaskStatus.WORKING, progress=0.5)
        store.update(task.id, status=TaskStatus.INPUT_REQUIRED, status_message="Publish?")

    worker = threading.Timer(0.5, ask)
    worker.start()
    try:
        code, out, err = run(
            "tasks", "watch", "--until", "input_required", "--timeout", "20", "--url", url,
            "--", task.id,
        )  # fmt: skip
    finally:
        worker.join()
    assert (code, err) == (0, "")
    assert "input_required" in out.splitlines()[-1]
    assert "Publish?" in out


def test_watch_until_also_stops_at_the_end(store: SqlTaskStore, url: str) -> None:
    task = store.create("reports.build")
    store.update(task.id, status=TaskStatus.WORKING)
    store.update(task.id, status=TaskStatus.COMPLETED, result={"rows": 42})
    code, out, _ = run("tasks", "watch", "--until", "input_required", "--url", url, "--", task.id)
    assert code == 0
    assert "completed" in out


def test_watch_until_times_out_like_a_watch(store: SqlTaskStore, url: str) -> None:
    task = store.create("reports.build")
    code, _, err = run(
        "tasks", "watch", "--until", "input_required", "--timeout", "0.5", "--url", url,
        "--", task.id,
    )  # fmt: skip
    assert code == 1
    assert err.strip() == "queuestore: error: tasks still running after 0.5s"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--until", "input_required"], "--until needs the TASK_IDs to follow"),
        (["--until", "completed", "--", "x"], "--until takes live statuses"),
    ],
)
def test_watch_until_refuses_what_cannot_stop(url: str, arguments: list[str], message: str) -> None:
    code, _, err = run("tasks", "watch", "--url", url, *arguments)
    assert code == 2
    assert message in err


def test_cancelling_a_finished_task_says_it_has_finished(store: SqlTaskStore, url: str) -> None:
    task = store.create("reports.build")
    store.update(task.id, status=TaskStatus.WORKING)
    store.update(task.id, status=TaskStatus.COMPLETED, result={"rows": 42})
    code, _, err = run("tasks", "cancel", "--url", url, "--", task.id)
    assert code == 1
    assert err.strip() == (
        f"queuestore: error: task {task.id} is completed already: only a live task can be cancelled"
    )


def test_answering_a_task_that_does_not_wait_says_what_it_is_doing(
    store: SqlTaskStore, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "steering_app.py").write_text(
        "from celery import Celery\n\napp = Celery('steering', broker='memory://')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = store.create("reports.build")
    store.update(task.id, status=TaskStatus.WORKING)
    code, _, err = run("tasks", "resume", "--url", url, "-A", "steering_app", "--", task.id, "yes")
    assert code == 1
    assert err.strip() == (
        f"queuestore: error: task {task.id} is working: only a task waiting for input "
        "(input_required) takes an answer"
    )
