"""How tasks look in a terminal: live bars on a terminal, tables that fit 80 columns."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from queuestore import InMemoryTaskStore
from queuestore.ops.presentation import TaskWatchView, task_table


def _console(*, terminal: bool, width: int = 80) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=width, color_system=None)


def test_watch_view_draws_a_bar_per_task_on_a_terminal() -> None:
    store = InMemoryTaskStore()
    task = store.create("reports.build")
    working = store.update(task.id, status="working", progress=0.5, status_message="half way")
    done = store.update(task.id, status="completed", result={"rows": 1})
    console = _console(terminal=True)
    with TaskWatchView(console) as view:
        view.show(working)
        view.show(done)
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert task.id in drawn
    assert "reports.build" in drawn
    assert "100%" in drawn
    assert "completed" in drawn


def test_watch_view_json_lines_and_deletions(capsys: pytest.CaptureFixture[str]) -> None:
    store = InMemoryTaskStore()
    task = store.create("reports.build")
    console = _console(terminal=True)
    with TaskWatchView(console, as_json=True) as view:
        view.show(task)
        view.deleted(task)
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["id"], first["status"]) == (task.id, "submitted")
    assert second == {"id": task.id, "deleted": True}
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_task_table_fits_its_width_and_cuts_only_the_outcome(width: int) -> None:
    store = InMemoryTaskStore()
    task = store.create("a.rather.long.job.name.for.a.table")
    store.update(task.id, status="working")
    store.update(task.id, status="failed", error={"type": "E", "message": "why " * 100})
    console = _console(terminal=False, width=width)

    console.print(task_table(store.list().tasks))

    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(len(line) <= width for line in output.splitlines())
    assert task.id in output.split()
    assert "failed" in output.split()
    (outcome,) = [line for line in output.splitlines() if "E: why" in line]
    assert "…" in outcome  # one line, cut, never folded
    if width >= 80:
        assert task.name in output.split()
    if width >= 120:  # wide enough: one line a task
        assert task.id in outcome


def test_watch_bars_keep_the_id_and_status_whole_at_80_columns() -> None:
    store = InMemoryTaskStore()
    task = store.create("reports.build_the_monthly_summary_for_every_region")
    store.update(task.id, status="working", progress=0.3)
    asking = store.update(task.id, status="input_required", status_message="Proceed? " * 20)
    console = _console(terminal=True)
    with TaskWatchView(console) as view:
        view.show(asking)
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    last = [line for line in drawn.splitlines() if task.id in line][-1]
    assert "input_required" in last
