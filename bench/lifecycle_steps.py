"""Where a queuestore lifecycle's milliseconds go: each step in process, beside its raw floor.

    uv run python bench/lifecycle_steps.py [--tasks N] [--rounds R]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and Redis on 6379.
It creates a scratch database ``queuestore_steps_<random>`` (dropped at the
end) and, in this one process, times every step that queuestore adds to a
Celery task, N tasks a step, each as this thread's CPU time and wall time per
task (medians over R rounds):

- the producer: ``check_input``, ``store.create``, Celery's ``send_task`` (to
  a Redis queue nobody reads, deleted at the end) and the publish mark;
- the worker: ``store.claim``, the run's bookkeeping (``Run``, the heartbeat's
  add and discard, the context and the job body's ``progress`` and
  ``add_artifact``) and the outcome's write (``Run.write``);
- the floor: the same three writes (insert, claim, complete, each returning
  the row) as raw psycopg prepared statements on the same table and indexes.

The Celery worker's own cost (receive, ack) is not here: ``celery_lifecycle.py``
measures it as the bare Celery run. docs/explanation/cost-model.md explains the figures.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis
from benchkit import RAW_CLAIM, RAW_COMPLETE, RAW_INSERT, scratch_database
from celery import Celery
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

from queuestore import Artifact, SqlTaskStore, TaskContext, TaskQueue, TaskStatus, job
from queuestore.run.heartbeat import Heartbeat
from queuestore.run.jobs import new_worker_id
from queuestore.run.lease import Run

REDIS_URL = "redis://127.0.0.1:6379/13"
console = Console(width=max(Console().width, 110))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu(raw: psycopg.Connection[Any]) -> float:
    """CPU seconds of this database's PostgreSQL backends, from /proc (same machine)."""
    total = 0.0
    pids = raw.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    ).fetchall()
    for (pid,) in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def timed(
    step: Callable[[Any], object], items: list[Any], raw: psycopg.Connection[Any]
) -> tuple[float, float, float]:
    """This thread's CPU, PostgreSQL's CPU and wall ms per item of ``step`` over ``items``."""
    pg = backend_cpu(raw)
    cpu, wall = time.thread_time(), time.perf_counter()
    for item in items:
        step(item)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    pg = backend_cpu(raw) - pg
    n = len(items)
    return cpu * 1000 / n, pg * 1000 / n, wall * 1000 / n


def lifecycle(ctx: TaskContext, n: int = 0) -> dict[str, object]:
    """The bench's job body: progress, one artifact, a small result."""
    ctx.progress(0.5)
    ctx.add_artifact(Artifact(artifact_id="out", name="out.txt", parts=[f"row {n}"]))
    return {"n": n, "ok": True}


class Steps:
    def __init__(self, url: str, n: int) -> None:
        self.n = n
        self.store = SqlTaskStore(url)
        self.store.migrate()
        self.app = Celery("steps", broker=REDIS_URL)
        self.app.conf.update(task_default_queue=f"steps_{secrets.token_hex(4)}")
        self.queue = TaskQueue(self.store, self.app)
        self.job = job(self.app, name="steps.lifecycle")(lifecycle)
        self.raw = psycopg.connect(url, autocommit=True)
        self.costs: dict[str, list[tuple[float, float, float]]] = {}

    def note(self, label: str, cost: tuple[float, float, float]) -> None:
        self.costs.setdefault(label, []).append(cost)

    def round(self) -> None:
        n, store, queue = self.n, self.store, self.queue
        inputs = [{"n": i} for i in range(n)]
        # -- producer ---------------------------------------------------
        self.note("producer: check_input", timed(self.job.check_input, inputs, self.raw))
        tasks: list[Any] = []
        self.note(
            "producer: store.create",
            timed(lambda i: tasks.append(store.create("steps.lifecycle", i)), inputs, self.raw),
        )
        self.note(
            "floor: raw INSERT ... RETURNING",
            timed(
                lambda i: self.raw.execute(
                    RAW_INSERT, (new_id(), "steps.lifecycle", Jsonb(i)), prepare=True
                ).fetchone(),
                inputs,
                self.raw,
            ),
        )
        self.note("producer: Celery send_task", timed(queue.publish, tasks, self.raw))
        self.note("producer: publish mark (add)", timed(queue.publisher.marks.add, tasks, self.raw))
        queue.publisher.marks.flush()
        # -- worker ------------------------------------------------------
        lease = queue.options.lease
        claimed: list[Any] = []
        self.note(
            "worker: store.claim",
            timed(
                lambda t: claimed.append(store.claim(t.id, new_worker_id(), lease)), tasks, self.raw
            ),
        )
        raw_ids = [
            r[0]
            for r in self.raw.execute(
                "SELECT id FROM queuestore_tasks WHERE status = 'submitted'"
            ).fetchall()
        ]
        worker = new_worker_id()
        self.note(
            "floor: raw claim UPDATE ... RETURNING",
            timed(
                lambda i: self.raw.execute(RAW_CLAIM, (worker, i), prepare=True).fetchone(),
                raw_ids,
                self.raw,
            ),
        )
        heartbeat = Heartbeat.of(queue)
        runs: list[Run] = []

        def bookkeeping(task: Any) -> None:
            run = Run(queue, task, task.worker_id)
            heartbeat.add(run)
            self.job.function(TaskContext(run), **task.input)
            heartbeat.discard(run)
            runs.append(run)

        bookkeeping_cost = timed(bookkeeping, claimed, self.raw)
        self.note("worker: run, heartbeat, context, job body", bookkeeping_cost)
        self.note(
            "worker: outcome write (Run.write)",
            timed(
                lambda run: run.write(
                    status=TaskStatus.COMPLETED, result={"n": 1, "ok": True}, progress=1.0
                ),
                runs,
                self.raw,
            ),
        )
        artifacts = Jsonb([{"artifact_id": "out", "name": "out.txt", "parts": ["row 1"]}])
        self.note(
            "floor: raw complete UPDATE ... RETURNING",
            timed(
                lambda i: self.raw.execute(
                    RAW_COMPLETE, (Jsonb({"n": 1, "ok": True}), artifacts, i, worker), prepare=True
                ).fetchone(),
                raw_ids,
                self.raw,
            ),
        )
        self.raw.execute("TRUNCATE queuestore_tasks")

    def report(self, rounds: int) -> None:
        table = Table(title=f"per task, medians of {rounds} rounds of {self.n} tasks")
        for column in ("step", "client CPU ms", "PostgreSQL CPU ms", "wall ms"):
            table.add_column(column, justify="left" if column == "step" else "right")
        sums: dict[str, list[float]] = {}
        for label, values in self.costs.items():
            measured = values[1:] or values  # the first round warms up
            medians = [statistics.median(v[k] for v in measured) for k in range(3)]
            table.add_row(label, *(f"{m:.3f}" for m in medians))
            side = sums.setdefault(label.split(":")[0], [0.0, 0.0, 0.0])
            for k in range(3):
                side[k] += medians[k]
        for side, totals in sums.items():
            table.add_row(f"[bold]sum, {side}", *(f"{m:.3f}" for m in totals))
        console.print(table)
        console.print(f"[dim]load: {os.getloadavg()[0]:.2f} (1 min)")


def new_id() -> str:
    return secrets.token_hex(12)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4, help="the first is a warm-up")
    args = parser.parse_args()
    with scratch_database("queuestore_steps") as url:
        steps = Steps(url, args.tasks)
        try:
            for number in range(args.rounds):
                steps.round()
                console.print(f"round {number + 1}/{args.rounds} done")
            steps.report(args.rounds)
        finally:
            redis.Redis.from_url(REDIS_URL).delete(steps.app.conf.task_default_queue)
            steps.raw.close()
            steps.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
