"""The HTTP tests' app: workers load it (``celery -A http_app``), and so does the API
(``queuestore serve --app http_app``), so both publish and consume on the test's queue.

Everything comes from ``QUEUESTORE_*``, as for ``celery -A workers``;
``QUEUESTORE_TEST_QUEUE`` names the queue, so tests sharing a broker never
see each other's messages.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from celery import Celery

from queuestore import Artifact, Retry, Settings, TaskContext, job

settings = Settings()
app = settings.configure(Celery("http-tests"))
app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
queue = settings.make_queue(app)


@job(app, name="http.add")
def add(ctx: TaskContext, a: int, b: int) -> int:
    """Add two integers, with an artifact on the way."""
    ctx.add_artifact(
        Artifact(artifact_id="sum", name="sum.txt", media_type="text/plain", parts=[f"{a}+{b}"])
    )
    return a + b


@job(app, name="http.steps")
def steps(ctx: TaskContext, count: int = 10, pause: float = 0.3) -> dict[str, int]:
    """Report progress ``count`` times, ``pause`` seconds apart; stops when cancelled."""
    for step in range(1, count + 1):
        ctx.raise_if_cancelled()
        time.sleep(pause)
        ctx.progress(step / count, f"step {step} of {count}")
    return {"steps": count}


@job(app, name="http.ask")
def ask(ctx: TaskContext, question: str = "Proceed?") -> dict[str, object]:
    """Ask a question; return the answer."""
    return {"answer": ctx.request_input(question)}


@job(
    app,
    name="http.flaky",
    retry=Retry(on=(ConnectionError,), max_runs=2, backoff=timedelta(milliseconds=100)),
)
def flaky(ctx: TaskContext, message: str = "upstream down") -> None:
    """Raise an error its retry policy retries once: the second run fails the task."""
    raise ConnectionError(f"{message} (run {ctx.attempt})")


@job(app, name="http.fan")
def fan(ctx: TaskContext, numbers: list[int]) -> int:
    """A step, then one ``http.add`` child per number (each added to itself), summed."""
    doubled = ctx.step("double", lambda: [n * 2 for n in numbers])
    children = [ctx.spawn("http.add", {"a": n, "b": n}, key=str(i)) for i, n in enumerate(numbers)]
    total: int = sum(ctx.wait_results(children))
    assert total == sum(doubled)
    return total


@job(app, name="http.fail")
def fail(ctx: TaskContext, message: str = "it broke", report: str = "working on it") -> None:
    """Report ``report`` as progress, then fail with ``message``."""
    ctx.progress(0.5, report)
    ctx.flush()
    raise RuntimeError(message)
