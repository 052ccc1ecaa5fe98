"""Every table the command prints fits 80 columns (a pipe, a narrow terminal) and cuts
nothing essential: ids, statuses, job names, states and URLs stay whole, a
scheduled start keeps its date and time, and the next page's cursor copies whole."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuestore import SqlTaskStore, Task
from queuestore.ops.cli import app
from queuestore.store.deliveries import Settlement

WIDTH = 80
LONG_JOB = "reports.build_the_monthly_summary"
HOOK = "https://93.184.216.34/hooks/queuestore/monthly-reports"


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, utc: None) -> str:
    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path))
    monkeypatch.setenv("QUEUESTORE_CURSOR_SECRET", "narrow")
    return f"sqlite:///{tmp_path / 'narrow.db'}"


@pytest.fixture
def tasks(url: str) -> Iterator[dict[str, Task]]:
    """A task in each status that matters, with long names, messages, results and errors."""
    store = SqlTaskStore(url)
    store.migrate()
    lease = timedelta(seconds=30)
    asking = store.create(LONG_JOB, {"month": "2026-11"}, owner="a-rather-long-owner-name")
    store.claim(asking.id, "w1", lease)
    store.update(asking.id, status="input_required", status_message="Proceed? " * 10)
    later = store.create("x.later", run_at=datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC))
    running = store.create("examples.crunch", owner="a-rather-long-owner-name")
    store.claim(running.id, "w2", lease)
    store.update(running.id, progress=0.42)
    failed = store.create("examples.failing")
    store.add_callback(failed.id, HOOK, events="all")
    store.claim(failed.id, "w3", lease)
    store.update(failed.id, status="failed", error={"type": "ValueError", "message": "no " * 50})
    taken = store.take_deliveries(limit=1)[0].delivery
    store.settle_delivery(taken, Settlement.dead("connection refused " * 10))
    yield {t.id: t for t in (store.get(t.id) for t in (asking, later, running, failed))}
    store.close()


def run(*arguments: str) -> str:
    result = CliRunner().invoke(app, list(arguments), env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


def fits(output: str) -> None:
    too_long = [line for line in output.splitlines() if len(line) > WIDTH]
    assert too_long == []


def test_tasks_list_keeps_ids_statuses_jobs_and_starts_whole(
    url: str, tasks: dict[str, Task]
) -> None:
    output = run("tasks", "list", "--url", url)

    fits(output)
    words = output.split()
    for task in tasks.values():
        assert task.id in words
        assert task.status.value in words
        assert task.name in words
    assert "starts 2031-01-02 03:04:05" in output
    assert "42%" in words


def test_the_next_page_s_cursor_is_one_line_that_copies_whole(
    url: str, tasks: dict[str, Task]
) -> None:
    output = run("tasks", "list", "--url", url, "--limit", "2")
    cursor = json.loads(run("tasks", "list", "--url", url, "--limit", "2", "--json"))["next_cursor"]

    assert cursor is not None
    assert f"--cursor {cursor}" in output.splitlines()
    fits(output.replace(f"--cursor {cursor}", ""))
    assert len(run("tasks", "list", "--url", url, "--cursor", cursor).split("\n")) > 3


def test_tasks_running_keeps_owners_and_jobs_whole(url: str, tasks: dict[str, Task]) -> None:
    output = run("tasks", "running", "--url", url)

    fits(output)
    assert "a-rather-long-owner-name" in output.split()
    assert "examples.crunch" in output.split()


def test_tasks_deliveries_keeps_ids_states_and_urls_whole(url: str, tasks: dict[str, Task]) -> None:
    failed = next(t for t in tasks.values() if t.name == "examples.failing")
    output = run("tasks", "deliveries", "--url", url, "--", failed.id)

    fits(output)
    assert output.count(HOOK) == 2
    assert "delivery 1: working, dead, 1 try" in output
    assert "delivery 2: failed, pending, 0 tries" in output
    assert "connection refused" in output


def test_tasks_show_keeps_the_id_and_status_whole(url: str, tasks: dict[str, Task]) -> None:
    for task in tasks.values():
        shown = run("tasks", "show", "--url", url, "--", task.id)

        fits(shown)
        assert task.id in shown.split()
        assert task.status.value in shown.replace(":", " ").split()


def test_tasks_watch_lines_begin_with_the_id_and_status_whole(
    url: str, tasks: dict[str, Task]
) -> None:
    output = run("tasks", "watch", "--url", url, "--timeout", "0.1")  # every live task

    fits(output)
    shown = {line.split()[0]: line.split()[1] for line in output.splitlines()}
    live = {task.id: task.status.value for task in tasks.values() if not task.is_terminal}
    assert shown.items() >= live.items()


def test_db_current_prints_the_revision_whole(url: str, tasks: dict[str, Task]) -> None:
    from queuestore.store.sql.migrations import head

    assert run("db", "current", "--url", url).split() == [head()]
