"""The app the ops tests' workers load: the ready ``workers`` app plus jobs that log.

    queuestore worker -A ops_app      # with this folder on PYTHONPATH

``QUEUESTORE_TEST_QUEUE`` names the queue, so tests sharing a broker never see
each other's messages.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from queuestore import TaskContext, job
from workers import app, queue

app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
# No worker consumes this queue: an ``ops.parked`` task stays submitted, even once the
# sweep publishes it.
app.conf.task_routes = {"ops.parked": {"queue": f"{app.conf.task_default_queue}.parked"}}
log = logging.getLogger("ops_app")


@job(app, name="ops.steps")
def steps(ctx: TaskContext, count: int = 3, pause: float = 0.2) -> dict[str, int]:
    """Report progress ``count`` times, logging each step."""
    for step in range(1, count + 1):
        time.sleep(pause)
        log.warning("step %d of %d", step, count)
        ctx.progress(step / count, f"step {step} of {count}")
    return {"steps": count}


@job(app, name="ops.ask")
def ask(
    ctx: TaskContext, question: str = "Proceed?", steps: int = 0, gate: str | None = None
) -> dict[str, object]:
    """Ask for input once, then report ``steps`` progress steps and return the answer.

    With ``gate`` (a file path), wait after the first step until that file exists,
    so a test can see the progress before the job goes on.
    """
    answer = ctx.request_input(question)
    for step in range(1, steps + 1):
        time.sleep(0.2)
        ctx.progress(step / (steps + 1), f"step {step}")
        if gate is not None and step == 1:
            ctx.flush()
            _wait_for_file(Path(gate), timeout=60.0)
    return {"answer": answer}


def _wait_for_file(path: Path, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout}s")
        time.sleep(0.05)


@job(app, name="ops.boom")
def boom(ctx: TaskContext, message: str = "it broke") -> None:
    """Fail at once (the worker logs the traceback)."""
    raise RuntimeError(message)


@job(app, name="ops.parked")
def parked(ctx: TaskContext) -> None:
    """Never runs: its queue has no consumer (see ``task_routes`` above)."""


__all__ = ["app", "queue"]
