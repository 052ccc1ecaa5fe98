"""The task verbs over HTTP: create, get, list, cancel, resume, resubmit, delete.

Every route passes the caller's principal to the store as the owner, so a
task of someone else is exactly as invisible as a task that never existed
(404); an admin (``http_admins``) reads and acts on every owner's tasks, and
each of its actions is logged with who took it. The rules -- transitions, the
owner filter, cursors -- stay in the store and the queue; this module only
translates.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response, status

from queuestore import Job
from queuestore.core.errors import TaskConflict, TaskNotFound
from queuestore.core.models import TASK_ID_PATTERN, TaskStatus, new_task_id
from queuestore.core.owner import Owner
from queuestore.core.validation import NAME_PATTERN
from queuestore.core.views import DeliveryView, TaskView
from queuestore.http import idempotency
from queuestore.http.auth import forbidden, named
from queuestore.http.bodies import JsonRoute
from queuestore.http.problems import ProblemError, responses
from queuestore.http.schemas import (
    NO_NUL_PATTERN,
    CancelTask,
    CreateTask,
    DeliveryList,
    Instant,
    JobRunning,
    ResumeTask,
    Running,
    StepList,
    StepView,
    TaskList,
)
from queuestore.http.service import Principal, Service, ServiceDep
from queuestore.store import UNSET

router = APIRouter(prefix="/tasks", tags=["tasks"], route_class=JsonRoute)

TaskId = Annotated[
    str,
    Path(
        description="The task's id.",
        min_length=1,
        max_length=64,
        pattern=TASK_ID_PATTERN.pattern,
    ),
]

MAX_DELIVERY_ID: Final = 2**63 - 1
"""The largest delivery id the store holds (a 64-bit integer)."""

DeliveryId = Annotated[
    int,
    Path(
        description="The delivery's id (``id`` in the task's deliveries).", ge=1, le=MAX_DELIVERY_ID
    ),
]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": TaskView, "description": "A retry: the task this key created before."},
        **responses(400, 401, 413, 415, 422, 503),
    },
)
async def create_task(
    *,
    body: CreateTask,
    request: Request,
    response: Response,
    principal: Principal,
    service: ServiceDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            description="Makes the create safe to retry: the same key returns the same task.",
            min_length=1,
            max_length=idempotency.MAX_KEY_LENGTH,
            pattern=idempotency.KEY_PATTERN,
        ),
    ] = None,
) -> TaskView:
    """Create a task and enqueue its job (201); a retried key returns the first task (200).

    With ``run_at`` or ``delay`` the job starts no earlier than that; the task
    waits ``submitted`` until then, and a cancel before it means it never runs.
    With ``unique_key``, while a live task of the caller holds that key, that
    task is returned (200, ``Unique-Key-Holder: true``) and nothing is created.
    With ``callback``, the task's status changes are sent to its URL; a URL
    refused is a 422 ``callback-refused``, and nothing is created.
    """
    check_job_name(service, body.name)
    key = idempotency_key
    task_id = (
        None
        if key is None
        else idempotency.task_id_for(principal, key, secret=service.idempotency_secret)
    )
    if task_id is None and body.unique_key is not None:
        task_id = new_task_id()  # to tell a new task from the key's holder
    try:
        task = await service.queue.submit(**submission(body, owner=principal, task_id=task_id))
        if task.id != task_id and task_id is not None:
            response.status_code = status.HTTP_200_OK
            response.headers["Unique-Key-Holder"] = "true"
    except TaskConflict:
        if key is None or task_id is None:
            raise
        task = await service.store.get(task_id, owner=principal)
        idempotency.check_replay(task, body)
        callbacks = await service.store.callbacks(task.id, owner=principal)
        idempotency.check_callback_replay(task, callbacks, body.callback)
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = str(request.url_for("get_task", task_id=task.id))
    return TaskView.of(task)


def submission(body: CreateTask, *, owner: str | None, task_id: str | None) -> dict[str, Any]:
    """The arguments of :meth:`~queuestore.TaskQueue.submit` for a create's ``body``."""
    return {
        "name": body.name,
        "input": body.input,
        "owner": owner,
        "context_id": body.context_id,
        "ttl": None if body.ttl is None else timedelta(seconds=body.ttl),
        "metadata": body.metadata,
        "task_id": task_id,
        "run_at": body.run_at,
        "delay": None if body.delay is None else timedelta(seconds=body.delay),
        "unique_key": body.unique_key,
        "priority": body.priority,
        "callback": None if body.callback is None else body.callback.request(),
        "start_by": body.start_by,
        "deadline": body.deadline,
        "timeout": None if body.timeout is None else timedelta(seconds=body.timeout),
    }


def jobs_of(service: Service) -> dict[str, Job]:
    """The jobs this process knows (``--app``), by name; none without."""
    return service.queue.sync.jobs


def check_job_name(service: Service, name: str) -> None:
    """Refuse a job no worker can run, when this process knows the app's jobs (``--app``).

    Raises:
        ProblemError: 422 ``unknown-job`` with the known names.
    """
    known = service.queue.sync.job_names
    if known and name not in known:
        names = sorted(known)
        raise ProblemError(
            422,
            "unknown-job",
            f"no job named {name!r}; known: {', '.join(names[:50])}"
            + (f" and {len(names) - 50} more" if len(names) > 50 else ""),
        )


@router.get("", responses=responses(400, 401, 403, 422, 503))
async def list_tasks(
    *,
    request: Request,
    response: Response,
    principal: Principal,
    service: ServiceDep,
    status: Annotated[
        list[TaskStatus] | None, Query(description="Only these statuses (repeat the parameter).")
    ] = None,
    context_id: Annotated[
        str | None, Query(min_length=1, max_length=256, pattern=NO_NUL_PATTERN)
    ] = None,
    name: Annotated[str | None, Query(min_length=1, max_length=200, pattern=NAME_PATTERN)] = None,
    updated_after: Annotated[
        Instant | None, Query(description="Only tasks written after this instant.")
    ] = None,
    created_after: Annotated[
        Instant | None, Query(description="Only tasks created after this instant.")
    ] = None,
    created_before: Annotated[
        Instant | None, Query(description="Only tasks created before this instant.")
    ] = None,
    owner: Annotated[
        str | None,
        Query(
            description="Only this owner's tasks: an admin's filter (another principal may "
            "name only itself).",
            min_length=1,
            max_length=256,
            pattern=NO_NUL_PATTERN,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[
        str | None,
        Query(
            description="``next_cursor`` of the previous page, same filters.",
            # Never empty; an empty one, as any the server did not make, is a 400.
            json_schema_extra={"minLength": 1},
        ),
    ] = None,
    total: Annotated[
        bool, Query(description="Also count the tasks the filters match (one more query).")
    ] = False,
    parent_id: Annotated[
        str | None,
        Query(
            description="Only the child tasks of this task.",
            min_length=1,
            max_length=64,
            pattern=TASK_ID_PATTERN.pattern,
        ),
    ] = None,
    root: Annotated[
        bool,
        Query(description="Only root tasks (no parent): with parent_id, none (filters add up)."),
    ] = False,
) -> TaskList:
    """The caller's tasks (an admin's: every owner's), newest first, one page at a time
    (keyset cursors); 401 anonymous, 403 ``forbidden`` for another owner's."""
    filters: dict[str, Any] = {
        "owner": listed_owner(service, named(principal, "listing tasks"), owner),
        "status": None if status is None else list[TaskStatus | str](status),
        "context_id": context_id,
        "name": name,
        "updated_after": updated_after,
        "created_after": created_after,
        "created_before": created_before,
        "parent_id": None if root else UNSET if parent_id is None else parent_id,
    }
    if root and parent_id is not None:  # no task is a root and a child
        return TaskList(tasks=[], next_cursor=None, total=0 if total else None)
    page = await service.store.list(**filters, limit=limit, cursor=cursor)
    if page.next_cursor is not None:
        following = request.url.include_query_params(cursor=page.next_cursor)
        response.headers["Link"] = f'<{following}>; rel="next"'
    return TaskList(
        tasks=[TaskView.of(task) for task in page.tasks],
        next_cursor=page.next_cursor,
        total=await service.store.count(**filters) if total else None,
    )


def listed_owner(service: Service, principal: str, owner: str | None) -> Owner:
    """The owner filter of a listing: ``owner`` if the caller may name it, else its own.

    Raises:
        ProblemError: 403 ``forbidden``: a principal that is not an admin named
            another owner.
    """
    if owner is None:
        return service.owner_for(principal)
    if owner != principal and not service.is_admin(principal):
        raise forbidden("only an operator (QUEUESTORE_HTTP_ADMINS) lists another owner's tasks")
    return owner


@router.get(":running", responses=responses(401, 503))
async def running_tasks(principal: Principal, service: ServiceDep) -> Running:
    """How many of the caller's tasks run now, beside the concurrency limits on them; 401
    anonymous. Tasks beyond a limit wait ``submitted`` until a slot is free."""
    owner = named(principal, "reading running tasks")
    limits = service.queue.sync.options.limits
    counts = await service.store.running_counts()
    mine = {name: count for (held_by, name), count in counts.items() if held_by == owner}
    names = sorted(set(mine) | set(limits.per_job))
    return Running(
        running=sum(mine.values()),
        limit=limits.per_owner,
        jobs={
            name: JobRunning(running=mine.get(name, 0), limit=limits.per_job.get(name))
            for name in names
        },
    )


@router.get(
    "/{task_id}",
    response_model=TaskView,
    responses={
        304: {"description": "Unchanged since the version in If-None-Match."},
        **responses(401, 404, 422, 503),
    },
)
async def get_task(
    task_id: TaskId, request: Request, principal: Principal, service: ServiceDep
) -> Response:
    """One task, as last committed; its ``ETag`` is its version, for ``If-None-Match``."""
    task = await service.store.get(task_id, owner=service.owner_for(principal))
    etag = f'"{task.version}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if _etags(request.headers.get("if-none-match")) & {etag, "*"}:
        return Response(status_code=304, headers=headers)
    body = TaskView.of(task).model_dump_json()
    return Response(body, media_type="application/json", headers=headers)


def _etags(header: str | None) -> set[str]:
    """The entity tags of an ``If-None-Match`` header (weak ones compare as strong)."""
    if not header:
        return set()
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}


@router.post("/{task_id}/cancel", responses=responses(400, 401, 404, 409, 413, 415, 422, 503))
async def cancel_task(
    task_id: TaskId,
    principal: Principal,
    service: ServiceDep,
    body: Annotated[CancelTask | None, Body()] = None,
) -> TaskView:
    """Cancel a live task and revoke its job; 409 when it has already finished."""
    reason = None if body is None else body.reason
    owner = service.owner_for(principal)
    task = await service.queue.cancel(task_id, owner=owner, reason=reason)
    service.audit(principal, "cancelled", task_id=task.id, owner=task.owner)
    return TaskView.of(task)


@router.post("/{task_id}/resume", responses=responses(400, 401, 404, 409, 413, 415, 422, 503))
async def resume_task(
    task_id: TaskId, body: ResumeTask, principal: Principal, service: ServiceDep
) -> TaskView:
    """Answer a task waiting for input; its job runs again. 409 when it is not waiting."""
    task = await service.queue.resume(task_id, body.answer, owner=service.owner_for(principal))
    service.audit(principal, "answered", task_id=task.id, owner=task.owner)
    return TaskView.of(task)


@router.post(
    "/{task_id}/resubmit",
    status_code=status.HTTP_201_CREATED,
    responses=responses(401, 404, 409, 422, 503),
)
async def resubmit_task(
    task_id: TaskId, request: Request, response: Response, principal: Principal, service: ServiceDep
) -> TaskView:
    """Submit a failed or cancelled task's job again, as a new task (201) with the same
    job, input, owner, context, ttl and priority, whose metadata names the old one
    (``queuestore.resubmitted_from``); the old task stays as it ended. 409 for a task
    that neither failed nor was cancelled."""
    task = await service.queue.resubmit(task_id, owner=service.owner_for(principal))
    service.audit(principal, "resubmitted", task_id=task_id, new_task_id=task.id, owner=task.owner)
    response.headers["Location"] = str(request.url_for("get_task", task_id=task.id))
    return TaskView.of(task)


@router.get("/{task_id}/steps", responses=responses(401, 404, 422, 503))
async def list_steps(task_id: TaskId, principal: Principal, service: ServiceDep) -> StepList:
    """The named steps and durable sleeps the task's runs recorded, oldest first."""
    found = await service.store.steps(task_id, owner=principal)
    return StepList(steps=[StepView.of(step) for step in found])


@router.get("/{task_id}/deliveries", responses=responses(401, 404, 422, 503))
async def list_deliveries(
    task_id: TaskId, principal: Principal, service: ServiceDep
) -> DeliveryList:
    """The task's callback deliveries, oldest first: pending, delivered and dead."""
    found = await service.store.deliveries(task_id, owner=service.owner_for(principal))
    return DeliveryList(deliveries=[DeliveryView.of(delivery) for delivery in found])


@router.post(
    "/{task_id}/deliveries/{delivery_id}/redeliver", responses=responses(401, 404, 422, 503)
)
async def redeliver(
    task_id: TaskId, delivery_id: DeliveryId, principal: Principal, service: ServiceDep
) -> DeliveryView:
    """Send a dead delivery again, now, as if just committed; 404 unless it is dead."""
    try:
        owner = service.owner_for(principal)
        revived = await service.store.redeliver(task_id, delivery_id, owner=owner)
    except TaskNotFound:
        # The same answer whether the task or the dead delivery is missing.
        raise ProblemError(
            404,
            "delivery-not-found",
            f"task {task_id!r} has no dead delivery {delivery_id} (or there is no such task)",
            task_id=task_id,
        ) from None
    service.audit(principal, "redelivered", task_id=task_id, delivery_id=delivery_id)
    return DeliveryView.of(revived)


@router.delete(
    "/{task_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=responses(401, 404, 409, 422, 503),
)
async def delete_task(task_id: TaskId, principal: Principal, service: ServiceDep) -> None:
    """Delete a finished task; 409 for a live one, which must be cancelled first."""
    owner = service.owner_for(principal)
    task = await service.store.get(task_id, owner=owner)
    if not task.is_terminal:
        raise ProblemError(
            409,
            "task-live",
            f"task {task.id!r} is {task.status}: cancel it before deleting it",
            task_id=task.id,
        )
    await service.store.delete(task_id, owner=owner)
    service.audit(principal, "deleted", task_id=task.id, owner=task.owner)
