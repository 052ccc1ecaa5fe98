"""How tasks look in a terminal: shared by the CLI and the demo.

Everything here stays readable in 80 columns and when piped: long values are
cut with an ellipsis on one line, never folded one character per line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Column, Table
from rich.text import Text

from queuestore.core.callbacks import Delivery
from queuestore.core.models import Step, Task, TaskStatus
from queuestore.core.schedules import Schedule
from queuestore.core.views import TaskView

_STATUS_COLOURS = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "input_required": "magenta",
}


def task_table(rows: list[Task], title: str | None = None) -> RenderableType:
    """A table of tasks that fits the width it is printed at, cutting nothing essential.

    Ids, statuses and job names stay whole; an outcome (the error, the result,
    the status message, or the start of a scheduled task that has not started,
    :func:`starts`) is cut with an ellipsis to fit its line. Wide enough, a task
    is one line; narrower (80 columns), its job and outcome share a column on
    two lines and the artifact parts are left out.
    """
    return _Fitted(
        width=_task_columns_width(rows),
        wide=lambda: _wide_task_table(rows, title),
        narrow=lambda: _narrow_task_table(rows, title),
    )


_OUTCOME_WIDTH = len("starts 2031-01-02 08:34:05")
"""The least an outcome column shows: a start with its date, whole."""


def _task_columns_width(rows: list[Task]) -> int:
    widths = [
        max([2, *(len(task.id) for task in rows)]),
        max([3, *(len(task.name) for task in rows)]),
        max([6, *(len(task.status.value) for task in rows)]),
        4,
        _OUTCOME_WIDTH,
        5,
    ]
    return _table_width(widths)


def _table_width(widths: list[int]) -> int:
    """The width of a :func:`_table` with columns of ``widths``: a space at each edge,
    two between columns."""
    return sum(widths) + 2 * (len(widths) - 1) + 2


def _table(title: str | None = None) -> Table:
    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)


def _wide_task_table(rows: list[Task], title: str | None) -> Table:
    table = _table(title)
    table.add_column("id", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("%", justify="right", no_wrap=True)
    # The one column that gives way: each cell stays on one line, cut to fit.
    table.add_column("outcome", min_width=_OUTCOME_WIDTH)
    table.add_column("parts", justify="right", no_wrap=True)
    for task in rows:
        table.add_row(
            task.id,
            task.name,
            _status(task),
            _percent(task),
            _cell(outcome(task) or starts(task)),
            str(sum(len(artifact.parts) for artifact in task.artifacts)),
        )
    return table


def _narrow_task_table(rows: list[Task], title: str | None) -> Table:
    table = _table(title)
    table.add_column("id", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("%", justify="right", no_wrap=True)
    table.add_column("job / outcome", min_width=12)
    for task in rows:
        lines = [Text(task.name, overflow="fold")]
        detail = outcome(task) or starts(task)
        if detail:
            lines.append(_cell(detail, "dim"))
        table.add_row(task.id, _status(task), _percent(task), Group(*lines))
    return table


def delivery_table(deliveries: list[Delivery]) -> RenderableType:
    """A task's deliveries: a table when it fits, else a block a delivery (80 columns).

    Ids, statuses, states and URLs stay whole (a long URL folds); the last
    error is cut with an ellipsis. Times are local: the time alone when today.
    """
    widths = [2, 6, 5, 5, 19, 19, 16, max([3, *(len(d.url) for d in deliveries)])]
    return _Fitted(
        width=_table_width(widths),
        wide=lambda: _wide_delivery_table(deliveries),
        narrow=lambda: _delivery_blocks(deliveries),
    )


def _wide_delivery_table(deliveries: list[Delivery]) -> Table:
    table = _table()
    for name in ("id", "status", "state", "tries", "changed", "delivered / next"):
        table.add_column(name, no_wrap=True, justify="right" if name == "tries" else "left")
    table.add_column("error", min_width=16)
    table.add_column("url", no_wrap=True)
    for delivery in deliveries:
        table.add_row(
            str(delivery.id),
            delivery.status.value,
            _state(delivery),
            str(delivery.tries),
            when(delivery.created_at),
            _delivered_or_next(delivery),
            _cell(delivery.last_error or "-"),
            delivery.url,
        )
    return table


def _delivery_blocks(deliveries: list[Delivery]) -> Group:
    blocks: list[RenderableType] = []
    for delivery in deliveries:
        heading = Text(f"delivery {delivery.id}: ", style="bold")
        heading.append(delivery.status.value)
        heading.append(", ")
        heading.append_text(_state(delivery))
        heading.append(f", {delivery.tries} {'try' if delivery.tries == 1 else 'tries'}")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim", min_width=len("delivered"))
        grid.add_column(overflow="fold")
        grid.add_row("url", delivery.url)
        grid.add_row("changed", when(delivery.created_at))
        if delivery.delivered_at is not None:
            grid.add_row("delivered", when(delivery.delivered_at))
        elif delivery.next_try_at is not None:
            grid.add_row("next try", when(delivery.next_try_at))
        if delivery.last_error:
            grid.add_row("error", _cell(delivery.last_error))
        blocks.append(Group(heading, Padding(grid, (0, 0, 1, 2))))
    return Group(*blocks)


def timing(schedule: Schedule) -> str:
    """When a schedule ticks: its cron expression (and zone), or its interval."""
    if schedule.cron is not None:
        zone = "" if schedule.timezone == "UTC" else f" {schedule.timezone}"
        return f"cron {schedule.cron}{zone}"
    assert schedule.every is not None
    return f"every {schedule.every.total_seconds():g}s"


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def schedule_line(schedule: Schedule) -> str:
    """One schedule on one line: its id, job, timing, state, next and last run."""
    state = "paused" if schedule.paused else f"next {_moment(schedule.next_run_at)}"
    last = (
        ""
        if schedule.last_run_at is None
        else f", last {_moment(schedule.last_run_at)} {schedule.last_status or 'deleted'}"
    )
    return f"{schedule.id} {schedule.name} {timing(schedule)} ({state}{last})"


def schedule_table(rows: list[Schedule]) -> Table:
    """Schedules: when each ticks, its next and last run, and its last task's status."""
    table = _table()
    table.add_column("id", overflow="fold")
    table.add_column("job", overflow="fold")
    table.add_column("when", overflow="fold")
    for name in ("next run (UTC)", "last run (UTC)"):
        table.add_column(name, overflow="fold", min_width=10)
    table.add_column("last", no_wrap=True)
    for schedule in rows:
        last = "-" if schedule.last_task_id is None else str(schedule.last_status or "deleted")
        table.add_row(
            schedule.id,
            schedule.name,
            timing(schedule),
            "paused" if schedule.paused else _moment(schedule.next_run_at),
            _moment(schedule.last_run_at),
            last,
        )
    return table


def running_table(rows: list[dict[str, Any]]) -> Table:
    """How many tasks each owner and job runs, beside their limits (``-``: none)."""
    table = _table()
    table.add_column("owner", overflow="fold")
    table.add_column("job", overflow="fold")
    for name in ("running", "owner limit", "job limit"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            "-" if row["owner"] is None else str(row["owner"]),
            str(row["job"]),
            str(row["running"]),
            "-" if row["owner_limit"] is None else str(row["owner_limit"]),
            "-" if row["job_limit"] is None else str(row["job_limit"]),
        )
    return table


class _Fitted:
    """The wide layout where ``width`` columns fit, the narrow one elsewhere."""

    def __init__(
        self,
        *,
        width: int,
        wide: Callable[[], RenderableType],
        narrow: Callable[[], RenderableType],
    ) -> None:
        self.width = width
        self.wide = wide
        self.narrow = narrow

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.wide() if self.width <= options.max_width else self.narrow()


def _status(task: Task) -> Text:
    return Text(task.status.value, style=_STATUS_COLOURS.get(task.status.value, "cyan"))


def _percent(task: Task) -> str:
    return "" if task.progress is None else f"{task.progress:.0%}"


def _state(delivery: Delivery) -> Text:
    colour = {"delivered": "green", "dead": "red"}.get(delivery.state.value, "cyan")
    return Text(delivery.state.value, style=colour)


def _delivered_or_next(delivery: Delivery) -> str:
    moment = delivery.delivered_at or delivery.next_try_at
    return "-" if moment is None else when(moment)


def when(moment: datetime) -> str:
    """A time in this machine's local time: the time alone when it is today, else with its date."""
    local = moment.astimezone()
    today = datetime.now(local.tzinfo).date()
    return local.strftime("%H:%M:%S" if local.date() == today else "%Y-%m-%d %H:%M:%S")


def task_details(task: Task) -> Table:
    """One task, a field a line: what the HTTP API shows of it, for people.

    Times are in this machine's local time with their offset; documents
    (input, result, metadata) are compact JSON, folded to the width.
    """
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    status = Text(task.status.value, style=_STATUS_COLOURS.get(task.status.value, "cyan"))
    if task.status_message:
        status.append(f": {task.status_message}", style="")
    rows: list[tuple[str, str | Text | None]] = [
        ("id", task.id),
        ("job", task.name),
        ("status", status),
        ("progress", None if task.progress is None else f"{task.progress:.0%}"),
        ("owner", task.owner),
        ("context", task.context_id),
        ("priority", str(task.priority) if task.priority else None),
        ("unique key", task.unique_key),
        ("input", _document(task.input)),
        ("result", None if task.result is None else _document(task.result)),
        ("error", None if task.error is None else f"{task.error.type}: {task.error.message}"),
        ("retried", _retried(task)),
        ("artifacts", _artifacts(task)),
        ("metadata", _document(task.metadata) if task.metadata else None),
        ("created", _local(task.created_at)),
        ("starts", _local(task.run_at) if starts(task) else None),
        ("started", _local(task.started_at)),
        ("finished", _local(task.finished_at)),
        ("kept", None if task.ttl is None else f"{task.ttl.total_seconds():g} s once finished"),
        ("attempt", str(task.attempt)),
        ("version", str(task.version)),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(label, value)
    return table


def _document(value: object) -> Text:
    return Text(json.dumps(value, ensure_ascii=False))


def _local(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone().isoformat(sep=" ", timespec="seconds")


def _retried(task: Task) -> str | None:
    if not task.errors:
        return None
    last = task.errors[-1]
    return f"{len(task.errors)} runs, the last: {last.type}: {last.message}"


def _artifacts(task: Task) -> str | None:
    if not task.artifacts:
        return None
    return "; ".join(
        f"{artifact.name or artifact.artifact_id} ({len(artifact.parts)} parts"
        + (f", {artifact.media_type})" if artifact.media_type else ")")
        for artifact in task.artifacts
    )


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
    return "starts " + when(task.run_at)


class TaskWatchView:
    """Shows tasks as they change: live bars on a terminal, one line per change otherwise.

    With ``as_json`` each change is one JSON line (the task, as the HTTP API
    shows it), and a deletion is ``{"id": ..., "deleted": true}``.
    """

    def __init__(self, console: Console, *, as_json: bool = False) -> None:
        self.console = console
        self.as_json = as_json
        self._bars: dict[str, TaskID] = {}
        self._progress: Progress | None = None
        if not as_json and console.is_terminal:
            # Id and status first and whole; the job and its message give way.
            self._progress = Progress(
                TextColumn("{task.fields[task_id]}", table_column=Column(no_wrap=True)),
                TextColumn("{task.fields[status]}", table_column=Column(no_wrap=True)),
                BarColumn(bar_width=10),
                TextColumn("{task.percentage:>3.0f}%", table_column=Column(no_wrap=True)),
                TextColumn(
                    "{task.fields[job]}",
                    table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
                ),
                console=console,
                expand=True,  # the job's column takes the width the others leave
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
            self._line(TaskView.of(task).model_dump(mode="json"))
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
        job = escape(task.name)
        if task.status_message:
            job += f" [dim]{escape(_short(task.status_message, 60))}[/]"
        completed = 1.0 if task.status.value == "completed" else (task.progress or 0.0)
        if task.id not in self._bars:
            self._bars[task.id] = progress.add_task(
                "", total=1.0, task_id=task.id, job=job, status=status
            )
        progress.update(self._bars[task.id], completed=completed, status=status, job=job)

    @staticmethod
    def _summary(task: Task) -> Text:
        """The task on one line, what matters first: id, status, progress, job, outcome."""
        text = Text(f"{task.id} ")
        text.append_text(_status(task))
        if task.progress is not None:
            text.append(f" {task.progress:.0%}")
        text.append(f" {task.name}")
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
