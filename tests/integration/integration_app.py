"""The app the integration tests' workers load: the ready ``workers`` app plus test jobs.

    celery -A integration_app worker      # with this folder on PYTHONPATH
    python integration_app.py PORT        # an A2A server on its tasks (the push tests)

Everything comes from the environment, as for ``celery -A workers``; on top of
that ``QUEUESTORE_TEST_QUEUE`` names the queue (so that tests sharing a broker
never see each other's messages) and ``QUEUESTORE_TEST_RECORDS`` is a folder
where the test jobs leave one line per event, the proof of how often a body ran.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery.signals import before_task_publish, task_received

from queuestore import RetryAfter, TaskContext, job
from workers import app, queue

app.conf.task_default_queue = os.environ["QUEUESTORE_TEST_QUEUE"]
RECORDS = Path(os.environ["QUEUESTORE_TEST_RECORDS"])


def _trace_to_file(path: str) -> None:
    """Record this process's spans (OpenTelemetry's SDK), one JSON object a line."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(path, "a", buffering=1)  # noqa: SIM115 - kept open for the process's life
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


if os.environ.get("QUEUESTORE_TEST_SPANS"):
    _trace_to_file(os.environ["QUEUESTORE_TEST_SPANS"])


def record_message(task_id: str | None, event: str) -> None:
    """Append ``event`` to ``<task id>.messages``: every publish and delivery of its message."""
    if task_id is None:
        return
    descriptor = os.open(
        RECORDS / f"{task_id}.messages", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    try:
        os.write(descriptor, f"{event}\n".encode())
    finally:
        os.close(descriptor)


@before_task_publish.connect
def _published(headers: dict | None = None, **_: object) -> None:
    record_message((headers or {}).get("id"), "published")


@task_received.connect
def _received(request: object = None, **_: object) -> None:
    record_message(getattr(request, "id", None), "received")


def record(ctx: TaskContext, event: str) -> None:
    """Append ``<attempt> <event>`` to the task's record file (one small atomic write)."""
    line = f"{ctx.attempt} {event} {os.getpid()}\n".encode()
    descriptor = os.open(RECORDS / ctx.task_id, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(descriptor, line)
    finally:
        os.close(descriptor)


@job(app, name="tests.count_runs")
def count_runs(ctx: TaskContext) -> dict[str, int]:
    """Record that the body ran; nothing else."""
    record(ctx, "run")
    return {"attempt": ctx.attempt}


@job(app, name="tests.sleep")
def sleep(ctx: TaskContext, seconds: float, first_attempt_seconds: float | None = None) -> dict:
    """Sleep cooperatively (no store writes), recording start and how the body ended.

    ``first_attempt_seconds`` makes the first run longer than the retries, so a
    test can kill the first worker mid-task and see a retry finish.
    """
    if first_attempt_seconds is not None and ctx.attempt == 1:
        seconds = first_attempt_seconds
    record(ctx, "start")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(0.05)
    except BaseException as exc:
        record(ctx, f"stopped:{type(exc).__name__}")
        raise
    record(ctx, "end")
    return {"attempt": ctx.attempt, "slept": seconds}


@job(app, name="tests.gated")
def gated(ctx: TaskContext, gates: str) -> dict[str, int]:
    """Report progress, then wait until the file ``<gates>/<attempt>`` exists; return.

    The wait makes no store call, so a run frozen past its lease and resumed
    goes straight on to write its outcome: the write the lease must fence.
    """
    record(ctx, "start")
    ctx.progress(0.5, f"run {ctx.attempt} at its gate")
    ctx.flush()
    gate = Path(gates) / str(ctx.attempt)
    deadline = time.monotonic() + 120
    while not gate.exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"gate {gate} was never opened")
        time.sleep(0.05)
    record(ctx, "end")
    return {"attempt": ctx.attempt}


@job(app, name="tests.chatty")
def chatty(ctx: TaskContext) -> None:
    """Write progress in a tight loop until cancelled: a cancel lands mid-write."""
    record(ctx, "start")
    step = 0
    try:
        while True:
            step += 1
            ctx.progress(min(step / 1_000_000, 1.0), f"step {step}")
    except BaseException as exc:
        record(ctx, f"stopped:{type(exc).__name__}")
        raise


def side_effect(ctx: TaskContext, step: str) -> None:
    """Insert one row into ``it_side_effects`` through the job's own connection: the
    proof, counted in the database, of how often a step's body ran."""
    from sqlalchemy import text

    with _side_effects().begin() as connection:
        connection.execute(
            text(
                "INSERT INTO it_side_effects (task_id, step, attempt, pid) "
                "VALUES (:task_id, :step, :attempt, :pid)"
            ),
            {"task_id": ctx.task_id, "step": step, "attempt": ctx.attempt, "pid": os.getpid()},
        )


_ENGINES: dict[int, Any] = {}


def _side_effects() -> Any:
    """This process's engine on the deployment's database (made anew after a fork)."""
    from sqlalchemy import create_engine

    engine = _ENGINES.get(os.getpid())
    if engine is None:
        engine = _ENGINES[os.getpid()] = create_engine(
            os.environ["QUEUESTORE_DATABASE_URL"], pool_size=1, max_overflow=0
        )
    return engine


@job(app, name="tests.five_steps")
def five_steps(ctx: TaskContext) -> list[Any]:
    """Five named steps, each a side effect; the first run hangs inside step 4."""

    def body(i: int) -> int:
        side_effect(ctx, f"s{i}")
        if i == 4 and ctx.attempt == 1:
            record(ctx, "in-4")
            time.sleep(120)
        return i * 10

    return [ctx.step(f"s{i}", body, i) for i in range(1, 6)]


@job(app, name="tests.nap")
def nap(ctx: TaskContext, seconds: float) -> dict[str, str]:
    """Record, sleep durably, and say when the run after the sleep started."""
    ctx.step("before", record, ctx, "before")
    ctx.sleep("nap", seconds)
    return {"woke_at": ctx.run_started_at.isoformat()}


@job(app, name="tests.square")
def square(ctx: TaskContext, x: int) -> int:
    record(ctx, "run")
    return x * x


@job(app, name="tests.provider")
def provider(ctx: TaskContext, provider: str, busy_for: float = 0) -> dict[str, Any]:
    """Call a provider that answers 429 with Retry-After ``busy_for`` on the first run."""
    record(ctx, "run")
    if busy_for and ctx.attempt == 1:
        raise RetryAfter(str(int(busy_for)))  # the header's value, as a provider sends it
    return {"provider": provider, "attempt": ctx.attempt}


@job(app, name="tests.fan_out")
def fan_out(ctx: TaskContext, n: int, job: str = "tests.square", seconds: float = 0) -> Any:
    """Spawn ``n`` children (squares, or sleepers of ``seconds``) and sum their results."""
    record(ctx, "start")
    if job == "tests.square":
        children = [{"job": job, "input": {"x": i}, "key": str(i)} for i in range(n)]
    else:
        children = [{"job": job, "input": {"seconds": seconds}, "key": str(i)} for i in range(n)]
    results = ctx.wait_results(ctx.spawn_many(children))
    return sum(results) if job == "tests.square" else len(results)


@job(app, name="tests.spin")
def spin(ctx: TaskContext, stubborn: bool = False) -> None:
    """Loop on the CPU without a store call; ``stubborn`` swallows every interrupt."""
    record(ctx, "start")
    n = 0
    while True:
        try:
            while True:
                n += 1
        except BaseException as exc:
            record(ctx, f"stopped:{type(exc).__name__}")
            if not stubborn:
                raise


__all__ = ["app", "queue"]


def a2a_server(port: int) -> Any:
    """An A2A server whose every task is ``tests.sleep``: a message's text is the seconds.

    python integration_app.py PORT      # serves on 127.0.0.1:PORT
    """
    from queuestore.a2a import A2AServer, agent_card

    card = agent_card(
        f"http://127.0.0.1:{port}", name="integration", description="sleeps for the seconds sent"
    )
    server = A2AServer(
        queue,
        job="tests.sleep",
        card=card,
        input_from=lambda context: {"seconds": float(context.get_user_input())},
    )
    return server.app()


if __name__ == "__main__":
    import sys

    import uvicorn

    PORT = int(sys.argv[1])
    uvicorn.run(a2a_server(PORT), host="127.0.0.1", port=PORT, log_level="warning")
