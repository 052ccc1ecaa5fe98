"""``POST /tasks:batch``: many creates in one request, all or none, each safe to retry.

The items a batch creates are one
:meth:`~queuestore.aio.AsyncTaskQueue.submit_many` call: their rows commit in
one transaction, then their messages go out on one broker connection, with
``submit``'s guarantee (committed first, published after). Each item may carry
its own ``idempotency_key``, under the rules of the ``Idempotency-Key`` header
(:mod:`queuestore.http.idempotency`): its task id is derived from the caller and
the key, an item whose task exists is a replay of it, and a key reused with
another item is refused. So a batch retried as it was sent creates nothing and
answers the same tasks, and a batch that failed part way cannot have: either
every new item was written or none.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Header, Response, status
from pydantic import BaseModel, ConfigDict, Field

from queuestore import TaskStore
from queuestore.core.errors import CallbackRefused, InvalidTaskData, TaskConflict, TaskNotFound
from queuestore.core.models import Task, new_task_id
from queuestore.core.views import TaskView
from queuestore.http import idempotency
from queuestore.http.bodies import JsonRoute
from queuestore.http.problems import FieldError, ProblemError, responses
from queuestore.http.schemas import CreateTask
from queuestore.http.service import Principal, Service, ServiceDep
from queuestore.http.tasks import check_job_name, submission

router = APIRouter(prefix="/tasks", tags=["tasks"], route_class=JsonRoute)

MAX_ITEMS: Final = 1000
"""The most items one batch holds (the body's byte cap applies as well)."""


class CreateTaskItem(CreateTask):
    """One task of a batch: a create's body, and the key that makes it safe to retry."""

    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=idempotency.MAX_KEY_LENGTH,
        pattern=idempotency.KEY_PATTERN,
        description="As the Idempotency-Key header of a single create: the same key "
        "returns the same task. An item repeating an earlier item's key must be that "
        "item again, and gets its task.",
    )


class CreateTasks(BaseModel):
    """Tasks to create together: all of them or, when one is refused, none."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[CreateTaskItem] = Field(
        min_length=1, max_length=MAX_ITEMS, description=f"1 to {MAX_ITEMS} tasks, in order."
    )


class ItemResult(BaseModel):
    """What became of one item: created, or which task it gave back instead."""

    status: Literal[200, 201] = Field(
        description="201: this item created its task; 200: it gave back an existing one."
    )
    replayed: bool = Field(description="The task an earlier request (or item) with its key made.")
    unique_key_holder: bool = Field(description="The live task holding the item's unique_key.")


class TaskBatch(BaseModel):
    """The tasks of a batch, in the order of its items, and what became of each item."""

    tasks: list[TaskView]
    results: list[ItemResult] = Field(description="One for each task, in the same order.")


@dataclass(frozen=True)
class _Outcome:
    task: Task
    result: ItemResult


_CREATED: Final = ItemResult(status=201, replayed=False, unique_key_holder=False)
_REPLAYED: Final = ItemResult(status=200, replayed=True, unique_key_holder=False)
_HOLDER: Final = ItemResult(status=200, replayed=False, unique_key_holder=True)
_ITEM_FIELD: Final = re.compile(r"tasks\[(\d+)\](?:\.(.+))?")
"""The ``field`` of an :class:`InvalidTaskData` from ``submit_many``: ``tasks[3].input``."""


@router.post(
    ":batch",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "model": TaskBatch,
            "description": "Nothing was created: each item gave back an existing task.",
        },
        **responses(400, 401, 413, 415, 422, 503),
    },
)
async def create_tasks(
    *,
    body: CreateTasks,
    response: Response,
    principal: Principal,
    service: ServiceDep,
    idempotency_key: Annotated[
        str | None,
        Header(include_in_schema=False),
    ] = None,
) -> TaskBatch:
    """Create tasks and enqueue their jobs, all or none (201); 200 when none was new.

    Every item is a ``POST /tasks`` body, created as the caller, plus an
    optional ``idempotency_key``: an item whose key made a task already gives
    that task back (``replayed``), and so does an item whose ``unique_key`` a
    live task holds (``unique_key_holder``). When any item is refused, nothing
    is written and the problem's ``errors`` name the item.
    """
    if idempotency_key is not None:
        raise ProblemError(
            400,
            "invalid-idempotency-key",
            f"a batch takes no {idempotency.HEADER} header: give each item an idempotency_key",
        )
    items = body.tasks
    for index, item in enumerate(items):
        try:
            check_job_name(service, item.name)
        except ProblemError as error:
            raise _item_problem(error.status, error.kind, index, "name", error.detail) from None
    ids = [
        new_task_id()  # to tell a new task from its unique key's holder
        if item.idempotency_key is None
        else idempotency.task_id_for(
            principal, item.idempotency_key, secret=service.idempotency_secret
        )
        for item in items
    ]
    repeats = _repeats(items)
    try:
        outcomes = await _submit(service, principal, items, ids, repeats)
    except TaskConflict as conflict:
        keyed = {ids[index] for index, item in enumerate(items) if item.idempotency_key is not None}
        if conflict.task_id not in keyed:
            raise
        # A concurrent create with one of the keys won the race: its task is a replay now.
        outcomes = await _submit(service, principal, items, ids, repeats)
    if all(outcome.result.status == 200 for outcome in outcomes):
        response.status_code = status.HTTP_200_OK
    return TaskBatch(
        tasks=[TaskView.of(outcome.task) for outcome in outcomes],
        results=[outcome.result for outcome in outcomes],
    )


def _repeats(items: Sequence[CreateTaskItem]) -> dict[int, int]:
    """Each item repeating an earlier item's key, mapped to the first item with that key.

    Raises:
        ProblemError: 422 ``idempotency-key-reused`` for a repeat that is another item.
    """
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    for index, item in enumerate(items):
        if item.idempotency_key is None:
            continue
        earlier = first.setdefault(item.idempotency_key, index)
        if earlier == index:
            continue
        if item.model_dump() != items[earlier].model_dump():
            raise _key_reused(index, f"tasks[{earlier}] has this idempotency_key")
        repeats[index] = earlier
    return repeats


async def _submit(
    service: Service,
    owner: str | None,
    items: Sequence[CreateTaskItem],
    ids: Sequence[str],
    repeats: dict[int, int],
) -> list[_Outcome]:
    """Replay the items whose task exists, and submit the others in one ``submit_many``.

    Raises:
        ProblemError: 422 when a key is reused for another item, or the store
            refuses an item; nothing is written.
        TaskConflict: the id of an item was taken between the read and the insert.
    """
    keyed = {ids[index] for index, item in enumerate(items) if item.idempotency_key is not None}
    store = service.store.sync
    existing = await store.run_async(_existing, store, keyed, owner)
    outcomes: dict[int, _Outcome] = {}
    fresh: list[int] = []
    for index, item in enumerate(items):
        if index in repeats:
            continue
        task = existing.get(ids[index])
        if task is None:
            fresh.append(index)
        elif not idempotency.is_replay(task, item):
            raise _key_reused(index, "it was used for a different request", task_id=task.id)
        else:
            outcomes[index] = _Outcome(task, _REPLAYED)
    if fresh:
        try:
            created = await service.queue.submit_many(
                [submission(items[index], owner=owner, task_id=ids[index]) for index in fresh]
            )
        except InvalidTaskData as error:
            raise _refused(error, fresh) from None
        for index, task in zip(fresh, created, strict=True):
            outcomes[index] = _Outcome(task, _CREATED if task.id == ids[index] else _HOLDER)
    for index, earlier in sorted(repeats.items()):
        first = outcomes[earlier]
        held = first.result.unique_key_holder
        outcomes[index] = _Outcome(
            first.task, _REPLAYED.model_copy(update={"unique_key_holder": held})
        )
    return [outcomes[index] for index in range(len(items))]


def _existing(store: TaskStore, task_ids: Collection[str], owner: str | None) -> dict[str, Task]:
    """The tasks of ``task_ids`` that ``owner`` has, by id (sync: one ``run_async`` for all)."""
    found: dict[str, Task] = {}
    for task_id in task_ids:
        try:
            found[task_id] = store.get(task_id, owner=owner)
        except TaskNotFound:
            continue
    return found


def _refused(error: InvalidTaskData, fresh: Sequence[int]) -> Exception:
    """The store's refusal of an item, naming it by its place in the batch, not in ``fresh``.

    A refused callback URL is ``callback-refused``, anything else ``invalid-task-data``.
    """
    match = _ITEM_FIELD.fullmatch(error.field or "")
    if match is None:
        return error
    index, field = fresh[int(match[1])], match[2]
    message = str(error).removeprefix(f"{error.field}: ")
    # The kinds a single create answers, so that a client handles both alike.
    kind = "callback-refused" if isinstance(error, CallbackRefused) else "invalid-task-data"
    return _item_problem(422, kind, index, field, message, task_id=error.task_id)


def _key_reused(index: int, why: str, *, task_id: str | None = None) -> ProblemError:
    return _item_problem(
        422, "idempotency-key-reused", index, "idempotency_key", why, task_id=task_id
    )


def _item_problem(
    status: int,
    kind: str,
    index: int,
    field: str | None,
    message: str,
    *,
    task_id: str | None = None,
) -> ProblemError:
    """A problem with item ``index``, whose ``errors`` locate it as FastAPI's would."""
    where = f"tasks[{index}]" + ("" if field is None else f".{field}")
    loc: list[str | int] = ["body", "tasks", index, *([] if field is None else field.split("."))]
    return ProblemError(
        status,
        kind,
        f"{where}: {message}",
        task_id=task_id,
        errors=[FieldError(loc=loc, msg=message, type=kind)],
    )
