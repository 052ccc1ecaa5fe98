"""The schedules over HTTP: create, list, get, change, pause, resume, trigger, delete.

Every route needs a principal (401 for an anonymous caller): a schedule's tasks
are its owner's, and the principal is that owner. A schedule of someone else is
as invisible as one that never existed (404); an admin (``http_admins``) sees
and acts on every owner's schedules, may create one for another owner, and each
of its actions is logged with who took it. The rules stay in the store and the
queue (:class:`~queuestore.submit.schedules.ScheduleCalls`); this module only
translates.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from queuestore.core.models import TASK_ID_PATTERN
from queuestore.core.schedules import MAX_CATCH_UP, CatchUp
from queuestore.core.validation import NAME_PATTERN
from queuestore.core.views import ScheduleView, TaskView
from queuestore.http.auth import forbidden, named
from queuestore.http.bodies import JsonRoute
from queuestore.http.problems import responses
from queuestore.http.schemas import NO_NUL_PATTERN, JsonDocument
from queuestore.http.service import Principal, Service, ServiceDep
from queuestore.http.tasks import check_job_name, listed_owner

router = APIRouter(prefix="/schedules", tags=["schedules"], route_class=JsonRoute)

MAX_EVERY = 366 * 24 * 3600.0
"""The longest interval, in seconds: a year."""

ScheduleId = Annotated[
    str,
    Path(min_length=1, max_length=64, pattern=TASK_ID_PATTERN.pattern, description="The schedule."),
]


def _input(description: str) -> Any:
    return Field(default_factory=dict, description=description)


class CreateSchedule(BaseModel):
    """A schedule: a job submitted on a cron expression or at an interval, by beat."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=200, pattern=NAME_PATTERN, description="The job each tick submits."
    )
    input: dict[str, JsonDocument] = _input("The job's keyword arguments, the same every tick.")
    cron: str | None = Field(
        None, min_length=1, max_length=200, description='A cron expression, e.g. "0 2 * * *".'
    )
    every: float | None = Field(
        None, ge=1, le=MAX_EVERY, description="Seconds between ticks, in place of cron."
    )
    timezone: str = Field("UTC", min_length=1, max_length=64, description="The cron's timezone.")
    catch_up: CatchUp = Field(
        CatchUp.SKIP,
        description="Ticks no beat saw in time: skip, once (one task for all), or each.",
    )
    catch_up_limit: int = Field(
        10, ge=1, le=MAX_CATCH_UP, description="With each: the most missed ticks run."
    )
    paused: bool = Field(False, description="Create it paused.")
    id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=TASK_ID_PATTERN.pattern,
        description="Its id (default: a new one); 409 when taken.",
    )
    owner: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=NO_NUL_PATTERN,
        description="Its owner: an admin's choice (default: the caller).",
    )


class ChangeSchedule(BaseModel):
    """What to change in a schedule; what is left out stays. A new timing counts from now."""

    model_config = ConfigDict(extra="forbid")

    input: dict[str, JsonDocument] | None = Field(None, description="New input for the job.")
    cron: str | None = Field(None, min_length=1, max_length=200, description="A cron expression.")
    every: float | None = Field(None, ge=1, le=MAX_EVERY, description="Seconds between ticks.")
    timezone: str | None = Field(None, min_length=1, max_length=64)
    catch_up: CatchUp | None = None
    catch_up_limit: int | None = Field(None, ge=1, le=MAX_CATCH_UP)


class ScheduleList(BaseModel):
    """Schedules, oldest first."""

    schedules: list[ScheduleView]


def _every(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(401, 403, 409, 422, 503))
async def create_schedule(
    body: CreateSchedule,
    request: Request,
    response: Response,
    principal: Principal,
    service: ServiceDep,
) -> ScheduleView:
    """Create a schedule (201); its first tick is the first after now.

    A job this server does not know, input the job cannot take, a bad cron
    expression or timezone, or both or neither of cron and every: 422, and
    nothing is written.
    """
    caller = named(principal, "scheduling")
    owner = caller if body.owner is None else body.owner
    if owner != caller and not service.is_admin(caller):
        raise forbidden("only an operator (QUEUESTORE_HTTP_ADMINS) schedules for another owner")
    check_job_name(service, body.name)
    schedule = await service.queue.create_schedule(
        body.name,
        body.input,
        owner=owner,
        cron=body.cron,
        every=_every(body.every),
        timezone=body.timezone,
        catch_up=body.catch_up,
        catch_up_limit=body.catch_up_limit,
        paused=body.paused,
        schedule_id=body.id,
    )
    service.audit(caller, "scheduled", schedule_id=schedule.id, owner=owner)
    response.headers["Location"] = str(request.url_for("get_schedule", schedule_id=schedule.id))
    return ScheduleView.of(schedule)


@router.get("", responses=responses(401, 403, 503))
async def list_schedules(
    principal: Principal,
    service: ServiceDep,
    owner: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=256,
            description="Only this owner's schedules: an admin's filter.",
        ),
    ] = None,
) -> ScheduleList:
    """The caller's schedules (an admin's: every owner's), oldest first, each with its next
    and last run and its last task's status."""
    scope = listed_owner(service, named(principal, "listing schedules"), owner)
    found = await service.queue.list_schedules(owner=scope, limit=1000)
    return ScheduleList(schedules=[ScheduleView.of(schedule) for schedule in found])


def _owner(service: Service, principal: str | None, action: str) -> Any:
    return service.owner_for(named(principal, action))


@router.get("/{schedule_id}", responses=responses(401, 404, 422, 503))
async def get_schedule(
    schedule_id: ScheduleId, principal: Principal, service: ServiceDep
) -> ScheduleView:
    """One schedule."""
    owner = _owner(service, principal, "reading a schedule")
    return ScheduleView.of(await service.queue.get_schedule(schedule_id, owner=owner))


@router.patch("/{schedule_id}", responses=responses(401, 404, 415, 422, 503))
async def change_schedule(
    schedule_id: ScheduleId, body: ChangeSchedule, principal: Principal, service: ServiceDep
) -> ScheduleView:
    """Change a schedule: the fields given (cron replaces every, and the other way round)."""
    owner = _owner(service, principal, "changing a schedule")
    changes: dict[str, Any] = body.model_dump(exclude_unset=True, exclude_none=True)
    if "every" in changes:
        changes["every"] = _every(changes["every"])
    schedule = await service.queue.update_schedule(schedule_id, owner=owner, **changes)
    service.audit(principal, "changed schedule", schedule_id=schedule_id, owner=schedule.owner)
    return ScheduleView.of(schedule)


@router.post("/{schedule_id}/pause", responses=responses(401, 404, 422, 503))
async def pause_schedule(
    schedule_id: ScheduleId, principal: Principal, service: ServiceDep
) -> ScheduleView:
    """Pause a schedule: no tick makes a task until it is resumed."""
    owner = _owner(service, principal, "pausing a schedule")
    schedule = await service.queue.pause_schedule(schedule_id, owner=owner)
    service.audit(principal, "paused schedule", schedule_id=schedule_id, owner=schedule.owner)
    return ScheduleView.of(schedule)


@router.post("/{schedule_id}/resume", responses=responses(401, 404, 422, 503))
async def resume_schedule(
    schedule_id: ScheduleId, principal: Principal, service: ServiceDep
) -> ScheduleView:
    """Resume a paused schedule from its next tick; the ticks it missed are not made."""
    owner = _owner(service, principal, "resuming a schedule")
    schedule = await service.queue.resume_schedule(schedule_id, owner=owner)
    service.audit(principal, "resumed schedule", schedule_id=schedule_id, owner=schedule.owner)
    return ScheduleView.of(schedule)


@router.post(
    "/{schedule_id}/trigger",
    status_code=status.HTTP_201_CREATED,
    responses=responses(401, 404, 422, 503),
)
async def trigger_schedule(
    schedule_id: ScheduleId,
    request: Request,
    response: Response,
    principal: Principal,
    service: ServiceDep,
) -> TaskView:
    """Submit the schedule's job now, once, paused or not (201: the task)."""
    owner = _owner(service, principal, "triggering a schedule")
    task = await service.queue.trigger_schedule(schedule_id, owner=owner)
    service.audit(principal, "triggered schedule", schedule_id=schedule_id, task_id=task.id)
    response.headers["Location"] = str(request.url_for("get_task", task_id=task.id))
    return TaskView.of(task)


@router.delete(
    "/{schedule_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=responses(401, 422, 503),
)
async def delete_schedule(
    schedule_id: ScheduleId, principal: Principal, service: ServiceDep
) -> None:
    """Delete a schedule (204, also when it is absent); the tasks it made stay."""
    owner = _owner(service, principal, "deleting a schedule")
    await service.queue.delete_schedule(schedule_id, owner=owner)
    service.audit(principal, "deleted schedule", schedule_id=schedule_id)


__all__ = ["router"]
