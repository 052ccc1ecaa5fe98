"""How tasks look in a terminal: shared by the CLI and the demo."""

from __future__ import annotations

import json

from rich.table import Table

from queuestore.models import Task

_STATUS_COLOURS = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "input_required": "magenta",
}


def task_table(rows: list[Task], title: str | None = None) -> Table:
    """A table of tasks for the terminal."""
    table = Table(title=title)
    table.add_column("id", no_wrap=True)
    table.add_column("job", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("progress", justify="right")
    table.add_column("outcome", overflow="fold")
    table.add_column("artifacts", justify="right")
    for task in rows:
        table.add_row(
            task.id,
            task.name,
            styled_status(task),
            "" if task.progress is None else f"{task.progress:.0%}",
            outcome(task),
            str(sum(len(artifact.parts) for artifact in task.artifacts)),
        )
    return table


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
