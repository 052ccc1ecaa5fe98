"""The callers' verbs on schedules: the store's, with the job's checks, and the publish.

:class:`TaskQueue <queuestore.TaskQueue>` has these verbs. A schedule submits its
job at every tick, so its name and input are checked against the jobs this
process knows before anything is written (an unknown job, or input the job's
function cannot take, is refused); a trigger publishes its task as ``submit``
does; :meth:`ScheduleCalls.run_schedules` is what beat's ``queuestore.schedules``
task runs.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from queuestore.beat.schedules import run_schedules
from queuestore.broker.publisher import Publisher
from queuestore.core.errors import InvalidTaskData
from queuestore.core.models import Task
from queuestore.core.owner import ANY, Owner
from queuestore.core.schedules import CatchUp, Schedule
from queuestore.run.jobs import registered_job, registered_names
from queuestore.store.backend import UNSET, Unset
from queuestore.store.schedules import DEFAULT_GRACE


class ScheduleCalls:
    """Create, read, change, pause, resume, trigger and delete schedules; run their ticks."""

    publisher: Publisher

    def create_schedule(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        cron: str | None = None,
        every: timedelta | None = None,
        timezone: str = "UTC",
        catch_up: CatchUp | str = CatchUp.SKIP,
        catch_up_limit: int = 10,
        paused: bool = False,
        schedule_id: str | None = None,
    ) -> Schedule:
        """Keep a schedule that submits ``name`` with ``input`` on ``cron`` or ``every``.

        See :meth:`TaskStore.create_schedule <queuestore.TaskStore.create_schedule>`.

        Raises:
            InvalidTaskData: a job this process does not know (where it knows
                some), input its function cannot take, or a bad value; nothing
                is written.
            TaskConflict: ``schedule_id`` is taken.
        """
        self._check_job(name, input)
        return self.publisher.store.create_schedule(
            name,
            input,
            owner=owner,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
            catch_up_limit=catch_up_limit,
            paused=paused,
            schedule_id=schedule_id,
        )

    def get_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskStore.get_schedule <queuestore.TaskStore.get_schedule>`."""
        return self.publisher.store.get_schedule(schedule_id, owner=owner)

    def list_schedules(self, *, owner: Owner = ANY, limit: int = 100) -> builtins.list[Schedule]:
        """See :meth:`TaskStore.list_schedules <queuestore.TaskStore.list_schedules>`."""
        return self.publisher.store.list_schedules(owner=owner, limit=limit)

    def update_schedule(
        self,
        schedule_id: str,
        *,
        owner: Owner = ANY,
        input: Mapping[str, Any] | Unset = UNSET,
        cron: str | Unset | None = UNSET,
        every: timedelta | Unset | None = UNSET,
        timezone: str | Unset = UNSET,
        catch_up: CatchUp | str | Unset = UNSET,
        catch_up_limit: int | Unset = UNSET,
    ) -> Schedule:
        """Change a schedule; new input is checked against its job first.

        See :meth:`TaskStore.update_schedule <queuestore.TaskStore.update_schedule>`.
        """
        store = self.publisher.store
        if input is not UNSET:
            self._check_job(store.get_schedule(schedule_id, owner=owner).name, input)
        return store.update_schedule(
            schedule_id,
            owner=owner,
            input=input,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=catch_up,
            catch_up_limit=catch_up_limit,
        )

    def pause_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskStore.pause_schedule <queuestore.TaskStore.pause_schedule>`."""
        return self.publisher.store.pause_schedule(schedule_id, owner=owner)

    def resume_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """See :meth:`TaskStore.resume_schedule <queuestore.TaskStore.resume_schedule>`."""
        return self.publisher.store.resume_schedule(schedule_id, owner=owner)

    def delete_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> None:
        """See :meth:`TaskStore.delete_schedule <queuestore.TaskStore.delete_schedule>`."""
        self.publisher.store.delete_schedule(schedule_id, owner=owner)

    def trigger_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Task:
        """Submit the schedule's job now, as a tick would, and publish it.

        See :meth:`TaskStore.trigger_schedule <queuestore.TaskStore.trigger_schedule>`.
        """
        task = self.publisher.store.trigger_schedule(schedule_id, owner=owner)
        if self.publisher.admitted([task]):
            self.publisher.try_publish(task)
        return task

    def run_schedules(self, *, grace: timedelta = DEFAULT_GRACE) -> int:
        """Make and publish the tasks of the ticks that came, now; how many (see
        :func:`queuestore.beat.schedules.run_schedules`; beat runs it)."""
        return run_schedules(self.publisher, grace=grace)

    def _check_job(self, name: str, input: Mapping[str, Any] | None) -> None:
        """Refuse a job the app does not register here (where it registers some), and
        input its function cannot take."""
        app = self.publisher.app
        known = registered_names(app)
        if known and name not in known:
            shown = ", ".join(sorted(known)[:50])
            raise InvalidTaskData(f"no job named {name!r}; known: {shown}", field="name")
        if input is not None and not isinstance(input, Mapping):
            raise InvalidTaskData("must be a JSON object", field="input")
        job = registered_job(app, name)
        if job is not None:
            job.check_input(input or {})
