"""Child tasks of a job: spawned idempotently by key, waited for without holding a worker.

``ctx.spawn("pages.publish", {"url": u}, key=u)`` starts a child task: a task
of its own whose ``parent_id`` is this one, owned by this task's owner. A key
names it among this task's children (by default its job and input), so a run
that spawns again after a crash, a sleep or a wait starts nothing twice.

``ctx.wait(children)`` returns the children once every one has ended. Until
then it ends the run: the task is parked (``working``, no worker slot, no
broker message) and runs again, from the start, when the last of them ends;
that run's ``wait`` returns them at once. Cancelling or failing a task
cancels its live children.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import JsonValue

from queuestore.core import validation as check
from queuestore.core.errors import ChildFailed, InvalidTaskData
from queuestore.core.models import Task, TaskStatus
from queuestore.run.lease import Run
from queuestore.run.steps import StepLog
from queuestore.run.suspend import Suspended

__all__ = ["Children", "FindJob"]


class _Registered(Protocol):
    name: str

    def check_input(self, payload: Mapping[str, Any]) -> None: ...


FindJob = Callable[[str], _Registered | None]
"""Finds the job registered under a name in this process (to check a child's input)."""


class Children:
    """The child tasks of one job call: spawning them, and waiting for them.

    Args:
        run: the run the job is called in.
        steps: the call's step log (spawns and waits are refused inside a step).
        find_job: the app's job registry, to check a child's input before writing.
    """

    def __init__(self, run: Run, steps: StepLog, find_job: FindJob | None = None) -> None:
        self._run = run
        self._steps = steps
        self._find_job = find_job

    def spawn_many(self, children: Iterable[Mapping[str, Any]]) -> list[Task]:
        """Start child tasks, in one transaction; see :meth:`TaskContext.spawn_many
        <queuestore.TaskContext.spawn_many>`."""
        self._steps.refuse_inside_a_step("spawn")
        items = [self._item(index, child) for index, child in enumerate(children)]
        run = self._run
        store = run.publisher.store
        spawned = self._steps.stored(lambda: store.spawn(run.task_id, run.worker_id, items))
        publisher = run.publisher
        new = [task for task, created in spawned if created and publisher.starts_soon(task)]
        publisher.publish_many(publisher.admitted(new))
        return [task for task, _ in spawned]

    def _item(self, index: int, child: Mapping[str, Any]) -> dict[str, Any]:
        """A spawn's item with its job as a name, its input checked against the job here."""
        if not isinstance(child, Mapping) or "job" not in child:
            raise InvalidTaskData(
                "must be a mapping of spawn's arguments", field=f"children[{index}]"
            )
        item = {key: value for key, value in child.items() if key != "job"}
        job = child["job"]
        item["name"] = getattr(job, "name", job)
        registered = None if self._find_job is None else self._find_job(item["name"])
        if registered is not None:
            try:
                registered.check_input(item.get("input") or {})
            except InvalidTaskData as exc:
                message = str(exc).removeprefix(f"{exc.field}: ")
                raise InvalidTaskData(message, field=f"children[{index}].input") from None
        return item

    def all(self) -> list[Task]:
        """This task's children, oldest first."""
        run = self._run
        return self._steps.stored(lambda: run.publisher.store.children(run.task_id))

    def wait(self, children: Iterable[Task | str] | None) -> list[Task]:
        """The children once all have ended, else the run ends until they have; see
        :meth:`TaskContext.wait <queuestore.TaskContext.wait>`."""
        self._steps.refuse_inside_a_step("wait")
        ids = None if children is None else [_child_id(child) for child in children]
        known = {task.id: task for task in self.all()}
        if ids is None:
            waited = list(known.values())
        else:
            strangers = [task_id for task_id in ids if task_id not in known]
            if strangers:
                raise InvalidTaskData(
                    f"{strangers[0]!r} is not a child of this task", field="children"
                )
            waited = [known[task_id] for task_id in ids]
        live = sum(1 for task in waited if not task.is_terminal)
        if not live:
            return waited
        plural = "" if live == 1 else "s"
        raise Suspended(None, f"waiting for {live} child task{plural}", waits_on=ids or [])

    def results(self, children: Iterable[Task | str] | None) -> list[JsonValue]:
        """The children's results once all have ended; see :meth:`TaskContext.wait_results
        <queuestore.TaskContext.wait_results>`."""
        ended = self.wait(children)
        for task in ended:
            if task.status is not TaskStatus.COMPLETED:
                raise ChildFailed(task)
        return [task.result for task in ended]


def _child_id(child: Task | str) -> str:
    return child.id if isinstance(child, Task) else check.task_id(child, "children")


def spawn_arguments(
    job: Any,
    input: Mapping[str, Any] | None,
    *,
    key: str | None,
    timeout: timedelta | None,
    start_by: datetime | None,
    deadline: datetime | None,
    priority: int | None,
    context_id: str | None,
    ttl: timedelta | None,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One child's item for :meth:`Children.spawn_many`, the arguments not given left out."""
    given = {
        "input": input,
        "key": key,
        "timeout": timeout,
        "start_by": start_by,
        "deadline": deadline,
        "priority": priority,
        "context_id": context_id,
        "ttl": ttl,
        "metadata": metadata,
    }
    return {"job": job} | {name: value for name, value in given.items() if value is not None}
