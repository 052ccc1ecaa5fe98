"""How tasks look in a terminal: shared by the CLI and the demo.

Everything here stays readable in 80 columns and when piped: long values are
cut with an ellipsis on one line, never folded one character per line.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from types import TracebackType
from typing import Self

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from queuestore.core.models import Step, Task, TaskStatus

_STATUS_COLOURS = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "input_required": "magenta",
}


def task_table(rows: list[Task], title: str | None = None) -> Table:
    """A table of tasks: ids stay whole, the other cells are cut with an ellipsis to fit.

    A scheduled task that has not started has its start (:func:`starts`) as its outcome.
    """
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("id", no_wrap=True)
    # Wrapable columns, so the table shrinks them to fit; each cell stays on one line.
    table.add_column("job", min_width=8, max_width=24)
    table.add_column("status", min_width=9)
    table.add_column("%", justify="right", min_width=4)
    table.add_column("outcome", min_width=10)
    table.add_column("parts", justify="right", min_width=3)
    for task in rows:
        table.add_row(
            task.id,
            _cell(task.name),
            _cell(task.status.value, _STATUS_COLOURS.get(task.status.value, "cyan")),
            _cell("" if task.progress is None else f"{task.progress:.0%}"),
            _cell(outcome(task) or starts(task)),
            _cell(str(sum(len(artifact.parts) for artifact in task.artifacts))),
        )
    return table


def step_table(steps: list[Step]) -> Table:
    """A table of a task's named steps: what each came to, in which run, how long it took."""
    table = Table(title="steps", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in ("name", "kind", "status", "run", "tries", "took", "error"):
        table.add_column(column, justify="right" if column in ("run", "tries", "took") else "left")
    for step in steps:
        took = (step.finished_at - step.started_at).total_seconds()
        table.add_row(
            _cell(step.name),
            step.kind.value,
            _cell(step.status.value, "green" if step.status.value == "completed" else "red"),
            str(step.attempt),
            str(step.tries),
            f"{took:.3f}s",
            _cell("" if step.error is None else step.error.type),
        )
    return table


def _cell(value: str, style: str = "") -> Text:
    return Text(" ".join(value.split()), style=style, no_wrap=True, overflow="ellipsis")


def styled_status(task: Task) -> str:
    """The task's status in rich markup, coloured by how it ended."""
    colour = _STATUS_COLOURS.get(task.status.value, "cyan")
    return f"[{colour}]{task.status.value}[/]"


def outcome(task: Task) -> str:
    """The error, the result as JSON, or the status message: what the task came to."""
    if task.error is not None:
        return f"{task.error.type}: {task.error.message}"
    if task.result is not None:
        return json.dumps(task.result)
    return task.status_message or ""


def starts(task: Task) -> str:
    """When a scheduled task that has not started starts, in local time; "" for any other.

    The time alone when the start is today, with its date on any other day.
    """
    if task.run_at is None or task.status is not TaskStatus.SUBMITTED:  # none, or started
        return ""
    start = task.run_at.astimezone()
    today = datetime.now(start.tzinfo).date()
    shown = "%H:%M:%S" if start.date() == today else "%Y-%m-%d %H:%M:%S"
    return "starts " + start.strftime(shown)


class TaskWatchView:
    """Shows tasks as they change: live bars on a terminal, one line per change otherwise.

    With ``as_json`` each change is one JSON line (the task), and a deletion is
    ``{"id": ..., "deleted": true}``.
    """

    def __init__(self, console: Console, *, as_json: bool = False) -> None:
        self.console = console
        self.as_json = as_json
        self._bars: dict[str, TaskID] = {}
        self._progress: Progress | None = None
        if not as_json and console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.fields[task_id]}"),
                TextColumn("{task.fields[job]}"),
                BarColumn(bar_width=20),
                TextColumn("{task.percentage:>3.0f}%"),
                TextColumn("{task.fields[status]}"),
                console=console,
            )

    def __enter__(self) -> Self:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def show(self, task: Task) -> None:
        """Show the task's latest state."""
        if self.as_json:
            self._line({"id": task.id} | task.model_dump(mode="json"))
        elif self._progress is not None:
            self._bar(self._progress, task)
        else:
            self.console.print(self._summary(task), no_wrap=True, overflow="ellipsis")

    def deleted(self, task: Task) -> None:
        """Say that the task was deleted while it was followed."""
        if self.as_json:
            self._line({"id": task.id, "deleted": True})
        elif self._progress is not None:
            self._progress.update(self._bars[task.id], status="[dim]deleted[/]")
        else:
            self.console.print(f"{task.id} deleted", no_wrap=True, overflow="ellipsis")

    def _bar(self, progress: Progress, task: Task) -> None:
        status = styled_status(task)
        if task.status_message:
            status += f" {_short(task.status_message, 30)}"
        completed = 1.0 if task.status.value == "completed" else (task.progress or 0.0)
        if task.id not in self._bars:
            self._bars[task.id] = progress.add_task(
                "", total=1.0, task_id=task.id, job=_short(task.name, 20), status=status
            )
        progress.update(self._bars[task.id], completed=completed, status=status)

    @staticmethod
    def _summary(task: Task) -> Text:
        text = Text(f"{task.id} {task.name} ")
        text.append(task.status.value, style=_STATUS_COLOURS.get(task.status.value, "cyan"))
        if task.progress is not None:
            text.append(f" {task.progress:.0%}")
        detail = " ".join(outcome(task).split())
        if detail:
            text.append(f" {detail}")
        return text

    @staticmethod
    def _line(document: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def _short(value: str, width: int) -> str:
    value = " ".join(value.split())
    return value if len(value) <= width else value[: width - 1] + "…"
