"""Flow control over HTTP, for admins: the pauses in force, the rate limits and their
use now, and pausing and resuming a job, an owner or a key.

``GET /operator/flow`` lists them, with how much of each limit its current period
uses, by job and key; ``PUT /operator/pauses/{kind}/{value}``
pauses (until a time, for a number of seconds, or until resumed) and
``DELETE`` resumes. A pause acts on every owner's tasks, so only an admin
(``http_admins``) may (403 ``forbidden`` for any other principal). Everything
lives in the store: it holds on every worker and survives restarts.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field, model_validator

from queuestore.core.flow import Pause, PauseKind, RateUse
from queuestore.http.problems import ProblemError, responses
from queuestore.http.service import Admin, ServiceDep

router = APIRouter(tags=["operator"])

KindPath = Annotated[PauseKind, Path(description="What the pause stops: job, owner or key.")]
ValuePath = Annotated[
    str, Path(min_length=1, max_length=512, description="The job's name, the owner, or the key.")
]


class PauseView(BaseModel):
    """A pause in force: no task of ``kind`` ``value`` starts until ``until`` (null: resumed)."""

    kind: PauseKind
    value: str
    until: datetime | None
    reason: str | None
    created_at: datetime

    @classmethod
    def of(cls, pause: Pause) -> PauseView:
        return cls(
            kind=pause.kind,
            value=pause.value,
            until=pause.until,
            reason=pause.reason,
            created_at=pause.created_at,
        )


class RateView(BaseModel):
    """A job's rate limit: ``limit`` units of starts per ``per_seconds``, per key if keyed."""

    limit: int
    per_seconds: float
    key: str | None
    cost: int | str


class RateUseView(BaseModel):
    """The use of a rate limit now: ``used`` units of ``limit`` per ``per_seconds`` for a
    job (``key`` null) or one of its keys, counting the starts of the last period."""

    job: str
    key: str | None = Field(description="The key, for a keyed limit (empty: tasks without one).")
    used: int = Field(description="The units the starts of the last period cost.")
    limit: int
    per_seconds: float
    next_turn: datetime | None = Field(
        description="The latest turn given to a task waiting for a start; null: none waits."
    )

    @classmethod
    def of(cls, use: RateUse) -> RateUseView:
        return cls(
            job=use.job,
            key=use.key,
            used=use.used,
            limit=use.limit,
            per_seconds=use.per.total_seconds(),
            next_turn=use.next_turn,
        )


class Flow(BaseModel):
    """The pauses in force, the queue's rate limits by job, and their use now."""

    pauses: list[PauseView]
    rate_limits: dict[str, RateView]
    rate_use: list[RateUseView] = Field(
        description="By job, then key: one entry a job's one limit, one a key in use."
    )


class PauseRequest(BaseModel):
    """How long to pause: until a time, for a number of seconds, or (neither) until resumed."""

    model_config = {"extra": "forbid"}

    until: datetime | None = None
    seconds: float | None = Field(None, gt=0)
    reason: str | None = Field(None, max_length=1000)

    @model_validator(mode="after")
    def _one_end(self) -> PauseRequest:
        if self.until is not None and self.seconds is not None:
            raise ValueError("give until or seconds, not both")
        if self.until is not None and self.until.tzinfo is None:
            raise ValueError("until needs a UTC offset")
        return self

    def end(self) -> datetime | None:
        if self.seconds is not None:
            return datetime.now(UTC) + timedelta(seconds=self.seconds)
        return self.until


class DrainRequest(BaseModel):
    """Drain a worker, or (``undo``) make a drained one take messages again."""

    model_config = {"extra": "forbid"}

    undo: bool = False


class Drained(BaseModel):
    """The worker that answered, and whether it now takes messages from the queue."""

    node: str
    queue: str
    consuming: bool


class Resumed(BaseModel):
    """Whether a pause was in force and is lifted."""

    resumed: bool


@router.get("/operator/flow", responses=responses(401, 403, 503))
async def flow(admin: Admin, service: ServiceDep) -> Flow:
    """The pauses in force, the rate limits by job, and how much of each the current
    period uses, by job and key; admins."""
    control = service.queue.sync.options.flow
    rates = control.rates
    return Flow(
        pauses=[PauseView.of(pause) for pause in await service.store.pauses()],
        rate_limits={
            name: RateView(
                limit=rate.limit, per_seconds=rate.per.total_seconds(), key=rate.key, cost=rate.cost
            )
            for name, rate in rates.items()
        },
        rate_use=[RateUseView.of(use) for use in await service.store.rate_use(control)],
    )


@router.put("/operator/pauses/{kind}/{value}", responses=responses(401, 403, 422, 503))
async def pause(
    kind: KindPath, value: ValuePath, body: PauseRequest, admin: Admin, service: ServiceDep
) -> PauseView:
    """Stop every start of a job, an owner or a key on every worker (running tasks finish);
    a pause in force is extended, never shortened; admins."""
    paused = await service.store.pause(kind, value, until=body.end(), reason=body.reason)
    return PauseView.of(paused)


@router.delete("/operator/pauses/{kind}/{value}", responses=responses(401, 403, 422, 503))
async def resume(kind: KindPath, value: ValuePath, admin: Admin, service: ServiceDep) -> Resumed:
    """Lift a pause: its tasks start again as they come due; admins."""
    return Resumed(resumed=await service.store.resume(kind, value))


@router.post("/operator/workers/{node}/drain", responses=responses(401, 403, 404, 422))
async def drain(
    node: Annotated[str, Path(min_length=1, max_length=300, description="The worker's node name.")],
    body: DrainRequest,
    admin: Admin,
    service: ServiceDep,
) -> Drained:
    """Drain one worker for a deploy: it takes no new message from the app's queue and
    finishes what it runs (Celery's cancel_consumer); ``undo`` makes it take messages
    again. 404 ``worker-not-found`` when no worker of that name answers; admins."""
    app = service.queue.sync.app
    queue = app.conf.task_default_queue or "celery"
    control = app.control.add_consumer if body.undo else app.control.cancel_consumer
    replies = await asyncio.to_thread(control, queue, destination=[node], reply=True, timeout=5.0)
    if not replies:
        raise ProblemError(404, "worker-not-found", f"no worker named {node!r} answered")
    return Drained(node=node, queue=queue, consuming=body.undo)
