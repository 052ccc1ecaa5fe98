"""The schedules' verbs: cron and interval schedules kept in the store, and their ticks.

These verbs (:class:`ScheduleVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`. A schedule's row holds its next tick;
:meth:`ScheduleVerbs.run_schedules` (beat's ``queuestore.schedules`` task) makes the
tasks of the ticks that came, and moves the next tick on, in one transaction that
compares and sets the schedule's version: of any number of beats running it at
once, one makes a tick's tasks and the others make none. Each tick's task has an id
derived from the schedule and the tick as well (:func:`tick_task_id`).
"""

from __future__ import annotations

import builtins
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from queuestore.core import validation as check
from queuestore.core.errors import InvalidTaskData, ScheduleNotFound, TaskConflict
from queuestore.core.models import Task, new_task_id
from queuestore.core.owner import ANY, Owner, OwnerScope
from queuestore.core.schedules import (
    SCHEDULE_KEY,
    TICK_KEY,
    CatchUp,
    Schedule,
    Timing,
    check_catch_up,
    check_timing,
    due_ticks,
    next_tick,
    tick_task_id,
)
from queuestore.store.backend import UNSET, NewTask, StoreBackend, Unset

DEFAULT_GRACE: Final = timedelta(seconds=30)
"""How late a tick may be seen and still run under the ``skip`` policy."""

_RACES: Final = 20
"""How many times a change retries when a tick moved the schedule in between."""


class ScheduleVerbs(StoreBackend):
    """Schedules: create, read, change, pause, resume, trigger, delete, and run their ticks."""

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _insert_schedule(self, schedule: Schedule) -> bool:
        """Insert ``schedule`` as given; False (and nothing written) if its id is taken."""

    @abstractmethod
    def _fetch_schedule(self, schedule_id: str, scope: OwnerScope) -> Schedule | None:
        """The schedule, if visible in ``scope``."""

    @abstractmethod
    def _schedules(self, scope: OwnerScope, limit: int) -> builtins.list[Schedule]:
        """Up to ``limit`` schedules visible in ``scope``, oldest first, by ``(created_at, id)``."""

    @abstractmethod
    def _due_schedules(self, now: datetime, limit: int) -> builtins.list[Schedule]:
        """Up to ``limit`` schedules not paused whose ``next_run_at`` is at or before ``now``."""

    @abstractmethod
    def _write_schedule(
        self,
        schedule_id: str,
        version: int,
        values: Mapping[str, Any],
        news: Sequence[NewTask],
    ) -> tuple[Schedule, builtins.list[Task]] | None:
        """Set ``values`` (by field name) and insert ``news`` in one transaction, only if the
        schedule is at ``version``; the schedule and the tasks as written, or None (nothing
        written).

        The write stamps ``updated_at`` and adds one to ``version``. A task id of
        ``news`` already taken rolls it all back: None.
        """

    @abstractmethod
    def _new_task(
        self,
        name: str,
        input: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
    ) -> NewTask:
        """The checked row :meth:`TaskStore.create <queuestore.TaskStore.create>` inserts."""

    @abstractmethod
    def _announce_created(self, results: Iterable[tuple[Task, bool]]) -> None:
        """Tell the store's observers of the tasks created."""

    @abstractmethod
    def _delete_schedule(self, schedule_id: str, scope: OwnerScope) -> None:
        """Delete the schedule if visible in ``scope``; nothing when absent."""

    # -- verbs ----------------------------------------------------------------

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
        """Keep a new schedule: the job ``name`` with ``input``, on ``cron`` or ``every``.

        Its first tick is the first after now. ``catch_up`` says what becomes of
        ticks no beat saw in time (:class:`~queuestore.core.schedules.CatchUp`).

        Raises:
            InvalidTaskData: a bad name, input, owner, cron expression, interval,
                timezone, catch-up policy or id; nothing is written.
            TaskConflict: ``schedule_id`` is taken.
        """
        owner = check.label(owner, "owner")
        if owner is None and self.require_owner:
            raise InvalidTaskData("is required by this store", field="owner")
        cron, every, timezone = check_timing(cron, every, timezone)
        policy, limit = check_catch_up(catch_up, catch_up_limit)
        now = self._now()
        timing = Timing(cron, every, timezone, now)
        schedule = Schedule(
            id=new_task_id() if schedule_id is None else check.task_id(schedule_id, "schedule_id"),
            name=check.name(name),
            input=check.json_object(input, "input", self.max_payload_bytes),
            owner=owner,
            cron=cron,
            every=every,
            timezone=timezone,
            catch_up=policy,
            catch_up_limit=limit,
            paused=check.flag(paused, "paused"),
            next_run_at=None if paused else next_tick(timing, now),
            anchor_at=now,
            created_at=now,
            updated_at=now,
        )
        if not self._insert_schedule(schedule):
            raise TaskConflict(f"schedule id {schedule.id!r} is taken")
        return schedule

    def get_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """The schedule, with its last task's status.

        Raises:
            ScheduleNotFound: no such schedule, or it belongs to another owner.
        """
        return self._with_outcome(self._visible(schedule_id, owner))

    def list_schedules(self, *, owner: Owner = ANY, limit: int = 100) -> builtins.list[Schedule]:
        """The schedules ``owner`` sees, oldest first, each with its last task's status.

        Raises:
            InvalidTaskData: ``limit`` outside 1..1000.
        """
        limit = check.limit(limit)
        scope = self._scope(owner)
        if scope.nobody:
            return []
        return [self._with_outcome(schedule) for schedule in self._schedules(scope, limit)]

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
        """Change a schedule; the arguments not given keep their values.

        Giving ``cron`` sets ``every`` to None and the other way round. A change
        of timing counts the ticks from now: the next tick is the first after now.

        Raises:
            ScheduleNotFound: no such schedule, or another owner's.
            InvalidTaskData: a bad value; nothing is written.
        """
        checked_input = (
            None if input is UNSET else check.json_object(input, "input", self.max_payload_bytes)
        )

        def change(current: Schedule, now: datetime) -> dict[str, Any]:
            values: dict[str, Any] = {} if checked_input is None else {"input": checked_input}
            if cron is not UNSET or every is not UNSET or timezone is not UNSET:
                new_cron = None if cron is UNSET and every is not UNSET else cron
                new_every = None if every is UNSET and cron is not UNSET else every
                timing = check_timing(
                    current.cron if new_cron is UNSET else new_cron,
                    current.every if new_every is UNSET else new_every,
                    current.timezone if timezone is UNSET else timezone,
                )
                values |= dict(zip(("cron", "every", "timezone"), timing, strict=True))
                values["anchor_at"] = now
                if not current.paused:
                    values["next_run_at"] = next_tick(Timing(*timing, now), now)
            if catch_up is not UNSET or catch_up_limit is not UNSET:
                policy, limit = check_catch_up(
                    current.catch_up if catch_up is UNSET else catch_up,
                    current.catch_up_limit if catch_up_limit is UNSET else catch_up_limit,
                )
                values |= {"catch_up": policy, "catch_up_limit": limit}
            return values

        return self._with_outcome(self._change(schedule_id, owner, change))

    def pause_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """Stop a schedule's ticks until :meth:`resume_schedule`; a paused one stays paused.

        Raises:
            ScheduleNotFound: no such schedule, or another owner's.
        """

        def pause(current: Schedule, now: datetime) -> dict[str, Any]:
            return {} if current.paused else {"paused": True, "next_run_at": None}

        return self._with_outcome(self._change(schedule_id, owner, pause))

    def resume_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Schedule:
        """Let a paused schedule tick again, from its first tick after now: the ticks
        it missed while paused are not caught up.

        Raises:
            ScheduleNotFound: no such schedule, or another owner's.
        """

        def resume(current: Schedule, now: datetime) -> dict[str, Any]:
            if not current.paused:
                return {}
            timing = Timing(current.cron, current.every, current.timezone, now)
            return {"paused": False, "anchor_at": now, "next_run_at": next_tick(timing, now)}

        return self._with_outcome(self._change(schedule_id, owner, resume))

    def trigger_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> Task:
        """Make one task of the schedule now, paused or not; its ticks stay as they were.

        Raises:
            ScheduleNotFound: no such schedule, or another owner's.
        """
        for _ in range(_RACES):
            current = self._visible(schedule_id, owner)
            now = self._now()
            new = self._tick_task(current, new_task_id(), now)
            values = {"last_run_at": now, "last_task_id": new.id}
            written = self._write_schedule(current.id, current.version, values, [new])
            if written is not None:
                return self._announced(written[1])[0]
        raise TaskConflict(f"schedule {schedule_id!r} kept changing")

    def delete_schedule(self, schedule_id: str, *, owner: Owner = ANY) -> None:
        """Delete a schedule; its tasks stay. Nothing happens when it is absent or not visible."""
        self._delete_schedule(check.task_id(schedule_id, "schedule_id"), self._scope(owner))

    def run_schedules(
        self,
        *,
        now: datetime | None = None,
        grace: timedelta = DEFAULT_GRACE,
        limit: int = 100,
    ) -> builtins.list[Task]:
        """Make the tasks of every schedule's ticks that came by ``now``; the tasks made.

        Beat's ``queuestore.schedules`` task runs it. Each due schedule is
        written in one transaction that makes its ticks' tasks (per its
        catch-up policy, ``grace`` telling a late tick from a missed one) and
        sets its next tick, only if no one else wrote it since it was read: run
        anywhere, any number of times at once, a tick makes one task.
        """
        at = self._now() if now is None else check.instant(now, "now")
        assert at is not None
        made: builtins.list[Task] = []
        for schedule in self._due_schedules(at, limit):
            made += self._tick(schedule, at, grace)
        return made

    # -- rules ------------------------------------------------------------------

    def _tick(self, schedule: Schedule, now: datetime, grace: timedelta) -> builtins.list[Task]:
        """Write one due schedule's ticks; the tasks made (none when another beat won)."""
        assert schedule.next_run_at is not None
        ticks, following = due_ticks(
            Timing.of(schedule),
            policy=schedule.catch_up,
            limit=schedule.catch_up_limit,
            first=schedule.next_run_at,
            now=now,
            grace=grace,
        )
        news = [self._tick_task(schedule, tick_task_id(schedule.id, tick), tick) for tick in ticks]
        values: dict[str, Any] = {"next_run_at": following}
        if news:
            values |= {"last_run_at": ticks[-1], "last_task_id": news[-1].id}
        written = self._write_schedule(schedule.id, schedule.version, values, news)
        return [] if written is None else self._announced(written[1])

    def _tick_task(self, schedule: Schedule, task_id: str, tick: datetime) -> NewTask:
        metadata = {SCHEDULE_KEY: schedule.id, TICK_KEY: tick.isoformat()}
        return self._new_task(
            schedule.name, schedule.input, owner=schedule.owner, metadata=metadata, task_id=task_id
        )

    def _announced(self, tasks: builtins.list[Task]) -> builtins.list[Task]:
        """``tasks``, told to the store's observers as created."""
        self._announce_created([(task, True) for task in tasks])
        return tasks

    def _visible(self, schedule_id: str, owner: Owner) -> Schedule:
        scope = self._scope(owner)
        found = self._fetch_schedule(check.task_id(schedule_id, "schedule_id"), scope)
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    def _change(
        self,
        schedule_id: str,
        owner: Owner,
        decide: Callable[[Schedule, datetime], dict[str, Any]],
    ) -> Schedule:
        """Write what ``decide`` makes of the schedule as read, retrying when a tick
        wrote it in between."""
        for _ in range(_RACES):
            current = self._visible(schedule_id, owner)
            values = decide(current, self._now())
            if not values:
                return current
            written = self._write_schedule(current.id, current.version, values, [])
            if written is not None:
                return written[0]
        raise TaskConflict(f"schedule {schedule_id!r} kept changing")

    def _with_outcome(self, schedule: Schedule) -> Schedule:
        """The schedule with its last task's status, as the task is now."""
        if schedule.last_task_id is None:
            return schedule
        task = self._fetch(schedule.last_task_id, OwnerScope(unscoped=True))
        return schedule.model_copy(update={"last_status": None if task is None else task.status})
