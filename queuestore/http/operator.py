"""The operator's views over HTTP: the overview, the workers, and a task's timeline.

``GET /operator/overview`` and ``GET /operator/workers`` read every owner's
numbers: only an admin (``http_admins``) may (403 ``forbidden`` for any
other principal). The overview is the store's rollup
(:meth:`TaskStore.rollup <queuestore.TaskStore.rollup>`): it never scans the
tasks. ``GET /tasks/{id}/timeline`` is the caller's own task's (an admin's:
anyone's). Everything is read from the store, so it survives a restart of
every process; the dashboard follows the event stream to read them again.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from queuestore.core.errors import TaskNotFound
from queuestore.core.models import TASK_ID_PATTERN, Task, TaskStatus
from queuestore.core.rollup import BACKLOG, RUN, WAIT, Rollup, percentile
from queuestore.core.workers import Worker
from queuestore.http.problems import responses
from queuestore.http.service import Admin, Principal, ServiceDep
from queuestore.http.timeline import Timeline, timeline

router = APIRouter(tags=["operator"])

WINDOWS: Final = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
"""The windows the overview reads."""

SERIES: Final = (
    "submitted",
    "started",
    "completed",
    "failed",
    "cancelled",
    "rejected",
    "retried",
    "lost",
    "dead",
)
"""The counts of the overview's series: tasks submitted, started and ended; runs retried
by their job's policy and lost with their worker; deliveries that died."""


class TaskSummary(BaseModel):
    """A task as a list of the operator's views shows it."""

    id: str
    name: str
    owner: str | None
    status: TaskStatus
    status_message: str | None
    progress: float | None
    attempt: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, task: Task) -> TaskSummary:
        return cls(
            id=task.id,
            name=task.name,
            owner=task.owner,
            status=task.status,
            status_message=task.status_message,
            progress=task.progress,
            attempt=task.attempt,
            created_at=task.created_at,
            updated_at=task.updated_at,
        )


class Count(BaseModel):
    """How many tasks of a job or an owner (null: tasks without one)."""

    key: str | None
    count: int


class Backlog(BaseModel):
    """The tasks waiting to start now (``submitted``, scheduled ones included)."""

    total: int
    by_job: list[Count]
    by_owner: list[Count]
    oldest: TaskSummary | None = Field(
        description="The submitted task due to start that has waited longest."
    )


class Series(BaseModel):
    """Counts per step of the window, every job's together."""

    step_seconds: float
    starts: list[datetime] = Field(description="The start of each step; the last is under way.")
    counts: dict[str, list[int]] = Field(description="Per metric, one count per step.")
    backlog: list[int | None] = Field(
        description="The tasks waiting to start as last sampled in each step (null: unsampled)."
    )


class Latency(BaseModel):
    """Percentiles of durations per (coarser) step, every job's together, in seconds."""

    step_seconds: float
    starts: list[datetime]
    wait_p50: list[float | None] = Field(description="Submit (or scheduled start) to first claim.")
    wait_p95: list[float | None]
    run_p50: list[float | None] = Field(description="First claim to the end.")
    run_p95: list[float | None]


class JobNumbers(BaseModel):
    """A job's numbers: now, and over the hours the window touches."""

    name: str
    waiting: int = Field(description="Submitted now.")
    working: int = Field(description="Working now.")
    started: int
    completed: int
    failed: int
    cancelled: int
    retried: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None


class Overview(BaseModel):
    """Every owner's tasks at a glance, from the store's rollup."""

    now: datetime
    window_seconds: float
    counts: dict[TaskStatus, int] = Field(description="Tasks in each status now.")
    backlog: Backlog
    series: Series
    latency: Latency
    jobs: list[JobNumbers]


class WorkerView(BaseModel):
    """A worker process, as its heartbeat last wrote it."""

    id: str
    host: str
    pid: int
    node: str | None
    pool: str | None
    concurrency: int | None
    started_at: datetime
    beat_at: datetime
    silent_seconds: float = Field(description="Since its last beat, on the store's clock.")
    alive: bool = Field(description="It beat within a lease.")
    running: list[str] = Field(description="The tasks it ran at its last beat.")
    tasks: list[TaskSummary] = Field(description="Those of them still in the store, as they are.")


class Workers(BaseModel):
    """Every worker process the store knows: live ones, and those whose beats stopped."""

    stale_after_seconds: float = Field(description="A worker silent this long is stopped.")
    live: list[WorkerView]
    stopped: list[WorkerView]


@router.get("/operator/overview", responses=responses(401, 403, 422, 503))
async def overview(
    admin: Admin,
    service: ServiceDep,
    window: Annotated[Literal["hour", "day"], Query(description="How far back.")] = "hour",
) -> Overview:
    """Counts by status now, the backlog, throughput and latency over the window; admins."""
    rollup = await service.store.rollup(WINDOWS[window])
    return Overview(
        now=rollup.now,
        window_seconds=rollup.window.total_seconds(),
        counts=rollup.status_counts(),
        backlog=_backlog(rollup),
        series=Series(
            step_seconds=rollup.step.total_seconds(),
            starts=rollup.steps(),
            counts={metric: rollup.per_step(metric) for metric in SERIES},
            backlog=rollup.samples(BACKLOG),
        ),
        latency=Latency(
            step_seconds=rollup.timed_step.total_seconds(),
            starts=rollup.steps(rollup.timed_step),
            wait_p50=rollup.percentiles(WAIT, 0.5),
            wait_p95=rollup.percentiles(WAIT, 0.95),
            run_p50=rollup.percentiles(RUN, 0.5),
            run_p95=rollup.percentiles(RUN, 0.95),
        ),
        jobs=[_job(rollup, name) for name in rollup.names()],
    )


def _backlog(rollup: Rollup) -> Backlog:
    waiting = TaskStatus.SUBMITTED
    oldest = rollup.oldest_waiting
    return Backlog(
        total=rollup.status_counts()[waiting],
        by_job=[Count(key=k, count=n) for k, n in rollup.current(waiting, by="name").items()],
        by_owner=[Count(key=k, count=n) for k, n in rollup.current(waiting, by="owner").items()],
        oldest=None if oldest is None else TaskSummary.of(oldest),
    )


def _job(rollup: Rollup, name: str) -> JobNumbers:
    wait, run = rollup.job_histogram(name, WAIT), rollup.job_histogram(name, RUN)
    waiting = rollup.current(TaskStatus.SUBMITTED, by="name").get(name, 0)
    working = rollup.current(TaskStatus.WORKING, by="name").get(name, 0)
    return JobNumbers(
        name=name,
        waiting=waiting,
        working=working,
        started=rollup.job_total(name, "started"),
        completed=rollup.job_total(name, "completed"),
        failed=rollup.job_total(name, "failed"),
        cancelled=rollup.job_total(name, "cancelled"),
        retried=rollup.job_total(name, "retried"),
        wait_p50=percentile(wait, 0.5),
        wait_p95=percentile(wait, 0.95),
        run_p50=percentile(run, 0.5),
        run_p95=percentile(run, 0.95),
    )


@router.get("/operator/workers", responses=responses(401, 403, 503))
async def workers(admin: Admin, service: ServiceDep) -> Workers:
    """Every worker process from its heartbeats: the live ones, what each runs, and those
    that stopped beating with the tasks they held; admins."""
    stale_after = service.queue.sync.options.lease
    found = await service.store.workers()
    views = await asyncio.gather(*(_worker(service, w, stale_after) for w in found))
    return Workers(
        stale_after_seconds=stale_after.total_seconds(),
        live=[view for view in views if view.alive],
        stopped=[view for view in views if not view.alive],
    )


async def _worker(service: ServiceDep, worker: Worker, stale_after: timedelta) -> WorkerView:
    tasks = []
    for task_id in worker.running:
        try:
            tasks.append(TaskSummary.of(await service.store.get(task_id)))
        except TaskNotFound:
            continue
    return WorkerView(
        id=worker.id,
        host=worker.host,
        pid=worker.pid,
        node=worker.node,
        pool=worker.pool,
        concurrency=worker.concurrency,
        started_at=worker.started_at,
        beat_at=worker.beat_at,
        silent_seconds=worker.silent_for.total_seconds(),
        alive=worker.alive(stale_after),
        running=worker.running,
        tasks=tasks,
    )


@router.get("/tasks/{task_id}/timeline", tags=["tasks"], responses=responses(401, 404, 422, 503))
async def task_timeline(
    task_id: Annotated[str, Path(min_length=1, max_length=64, pattern=TASK_ID_PATTERN.pattern)],
    principal: Principal,
    service: ServiceDep,
) -> Timeline:
    """What happened to a task, oldest first: its submit, runs, errors, input requests and
    answers, progress, end, and each callback delivery."""
    owner = service.owner_for(principal)
    task = await service.store.get(task_id, owner=owner)
    return timeline(task, await service.store.deliveries(task_id, owner=owner))


__all__ = ["Overview", "Workers", "router"]
