"""``queuestore demo``: the whole flow on a bare machine, in well under a minute.

It starts a Celery worker and beat on the embedded default (an SQLite file and
the filesystem broker, in a fresh folder), submits long-running tool calls,
shows their progress live, cancels one, answers one that asks for input, lets
the janitor remove an expired one, prints a final table and stops everything
it started.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from queuestore.core.errors import TaskNotFound
from queuestore.core.models import Task, TaskStatus
from queuestore.ops.presentation import task_table
from queuestore.run.subprocesses import celery_process

DEADLINE_SECONDS = 50.0
_DEMO_ENV = {
    "QUEUESTORE_JANITOR_INTERVAL": "1",
    "QUEUESTORE_JANITOR_TTL": "3600",
    "QUEUESTORE_REAPER_INTERVAL": "2",
    "QUEUESTORE_SWEEP_INTERVAL": "2",
    "QUEUESTORE_HEARTBEAT_INTERVAL": "0.5",
}


def run_demo(console: Console, *, keep: bool = False) -> int:
    """Run the demo; return the process exit code (0 when every step did what it should)."""
    home = Path(tempfile.mkdtemp(prefix="queuestore-demo-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
    env |= _DEMO_ENV | {"QUEUESTORE_HOME": str(home)}
    os.environ.update(env)
    for name in [k for k in os.environ if k.startswith("QUEUESTORE_") and k not in env]:
        del os.environ[name]
    console.print(f"[bold]queuestore demo[/] — SQLite and filesystem broker in {home}")
    try:
        with (
            _celery(env, home, "worker", "--pool=prefork", "--concurrency=4"),
            _celery(env, home, "beat"),
        ):
            return _drive(console)
    finally:
        if keep:
            console.print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


def _drive(console: Console) -> int:
    workers = importlib.import_module("workers")
    queue = workers.queue
    submitted = {
        "report": queue.submit("examples.research", {"topic": "otters", "pause": 0.7}),
        "expiring": queue.submit(
            "examples.research",
            {"topic": "tides", "sections": 3, "pause": 0.4},
            ttl=timedelta(seconds=2),
        ),
        "deploy": queue.submit("examples.deploy", {"service": "billing-api"}),
        "crunch": queue.submit("examples.crunch", {"seconds": 60}),
        "flaky": queue.submit("examples.flaky"),
    }
    latest: dict[str, Task] = dict(submitted)
    removed: set[str] = set()
    cancelled = answered = False
    deadline = time.monotonic() + DEADLINE_SECONDS
    with Progress(
        TextColumn("{task.fields[label]:<9}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[status]}"),
        console=console,
    ) as progress:
        bars: dict[str, TaskID] = {
            key: progress.add_task("", total=1.0, label=key, status="submitted")
            for key in submitted
        }
        while time.monotonic() < deadline:
            for key, task in submitted.items():
                if key in removed:
                    continue
                try:
                    latest[key] = queue.store.get(task.id)
                except TaskNotFound:
                    removed.add(key)
                    progress.update(bars[key], status="[dim]removed by the janitor[/]")
                    continue
                now = latest[key]
                progress.update(bars[key], completed=now.progress or 0.0, status=_describe(now))
            crunch = latest["crunch"]
            if not cancelled and (crunch.progress or 0) >= 0.05:
                queue.cancel(crunch.id, reason="the user changed their mind")
                progress.console.print("cancelled [bold]crunch[/] while it was working")
                cancelled = True
            deploy = latest["deploy"]
            if not answered and deploy.status is TaskStatus.INPUT_REQUIRED:
                progress.console.print(f"deploy asks: [magenta]{deploy.status_message}[/] → yes")
                queue.resume(deploy.id, "yes")
                answered = True
            live = [t for k, t in latest.items() if k not in removed and not t.is_terminal]
            if not live and "expiring" in removed:
                break
            time.sleep(0.2)
    console.print(task_table([latest[k] for k in submitted if k not in removed], "final state"))
    console.print(
        "removed by the janitor after its 2 s ttl: "
        + ", ".join(submitted[k].id for k in sorted(removed))
    )
    expected = {
        "report": TaskStatus.COMPLETED,
        "deploy": TaskStatus.COMPLETED,
        "crunch": TaskStatus.CANCELLED,
        "flaky": TaskStatus.FAILED,
    }
    wrong = {k: latest[k].status for k, s in expected.items() if latest[k].status is not s}
    if wrong or "expiring" not in removed:
        console.print(f"[red]demo did not finish as expected: {wrong or 'janitor did not run'}[/]")
        return 1
    console.print("[green]all done[/]: worker and beat stopped")
    return 0


def _describe(task: Task) -> str:
    text = task.status.value
    if task.status_message:
        text += f" — {task.status_message}"
    return text[:60]


def _celery(env: dict[str, str], home: Path, *arguments: str) -> AbstractContextManager[object]:
    """Run ``celery -A workers ARGUMENTS`` for the block's duration, then stop it."""
    return celery_process(
        "workers",
        *arguments,
        "--loglevel=WARNING",
        env=env,
        cwd=home,
        log=home / f"{arguments[0]}.log",
    )
