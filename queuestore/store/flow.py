"""Flow control's verbs: pauses of a job, an owner or a key, and a refused task's wait.

These verbs (:class:`FlowVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`. The rules they keep live in
:mod:`queuestore.core.flow`; the claim applies the pauses and the rate limits
in its own atomic decision (:meth:`RunVerbs.claim <queuestore.store.runs.RunVerbs.claim>`
with ``flow``), and these verbs set and lift the pauses, and give a task the
claim refused the time it may try again.
"""

from __future__ import annotations

import builtins
from abc import abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from queuestore.core import validation as check
from queuestore.core.errors import InvalidTaskData
from queuestore.core.flow import FlowControl, Pause, PauseKind, RateUse, target
from queuestore.core.models import Task
from queuestore.core.owner import OwnerScope
from queuestore.store.backend import StoreBackend, Write
from queuestore.store.pending import PENDING_STATUSES, is_pending

_MAX_VALUE = 512


class FlowVerbs(StoreBackend):
    """Pause, resume and list pauses; leave a task the flow control refused waiting."""

    def pause(
        self,
        kind: PauseKind | str,
        value: str,
        *,
        until: datetime | None = None,
        reason: str | None = None,
    ) -> Pause:
        """Stop every start of a job name, an owner or a key, until ``until`` or a resume.

        Running tasks finish; no task of the target is claimed meanwhile, on
        any worker. A pause already in force is extended, never shortened: it
        keeps the later of the two times (and no time, if either has none).

        Raises:
            InvalidTaskData: an unknown kind, an empty or oversize value, a
                time without a zone; nothing is written.
        """
        kind = _kind(kind)
        value = _value(value)
        until = None if until is None else check.aware(until, "until").astimezone(UTC)
        reason = check.message(reason)
        return self._pause(target(kind, value), kind, value, until, reason)

    def resume(self, kind: PauseKind | str, value: str) -> bool:
        """Lift the pause of a job name, an owner or a key; whether one was in force.

        Its tasks start again as they come due: those waiting are tried again
        within ``pause_recheck`` (or at the time the pause had).
        """
        return self._resume(target(_kind(kind), _value(value)))

    def pauses(self) -> builtins.list[Pause]:
        """The pauses in force, by kind and value."""
        return self._pauses()

    def rate_use(self, flow: FlowControl) -> builtins.list[RateUse]:
        """How much of each of ``flow``'s rate limits its current period uses.

        One entry for a job's one limit, one per key in use (or with tasks
        waiting for a turn) for a keyed limit; by job, then key. Read from the
        log the claims keep, so it counts the starts of every worker.
        """
        return flow.use(self._rate_use()) if flow.rates else []

    def wait_for_flow(
        self, task_id: str, *, version: int, flow: FlowControl, recheck: timedelta
    ) -> Task | None:
        """Leave a task the claim refused under ``flow`` waiting until it may start.

        A paused task waits until its pause ends, or ``recheck`` when the
        pause has no end (a resume is heard within it). A task over its rate
        limit waits until a start of its bucket frees, each waiting task one
        share of the period after the one before, so that they come back one
        by one. The task stays unclaimed and live with ``run_at`` set and no
        publish mark: the sweep publishes it near that time, as a scheduled
        start. A task of a rated job always gets a time (its turn, if its rate
        has room by now). None when neither holds it back, or it moved on from
        ``version``.
        """
        task = self._fetch(check.task_id(task_id), OwnerScope(unscoped=True))
        if task is None or task.version != version or not is_pending(task):
            return None
        wake = self._flow_wake(task, flow, recheck)
        if wake is None:
            return None
        write = Write(
            scope=OwnerScope(unscoped=True),
            from_statuses=PENDING_STATUSES,
            expected_version=version,
            fence=None,
            values={"run_at": wake},
            release=True,
        )
        return self._write(task.id, write)

    def prune_flow(self) -> int:
        """Forget the starts that no longer count, and the pauses that ended; how many."""
        return self._prune_flow()

    def _flow_wake(self, task: Task, flow: FlowControl, recheck: timedelta) -> datetime | None:
        """When ``task`` may try again, or None when nothing holds it back."""
        targets = [target(PauseKind.JOB, task.name)]
        if task.owner is not None:
            targets.append(target(PauseKind.OWNER, task.owner))
        key = flow.key_of(task)
        if key is not None:
            targets.append(target(PauseKind.KEY, key))
        paused, until = self._paused_until(targets)
        now = datetime.now(UTC)
        if paused:
            return until if until is not None else now + recheck
        bucket = flow.bucket_of(task)
        if bucket is None:
            return None
        rate = flow.rates[task.name]
        cost = flow.cost_of(task)
        free_at = _frees_at(self._rate_starts(bucket), cost, rate.limit, now)
        if task.run_at is not None and task.run_at <= now:
            # Its turn came a little before the start it follows left the period:
            # it tries again when that start leaves, keeping its place in the line.
            return free_at or now
        # Room now (a start expired since the claim): try again at its turn.
        return self._reserve_wake(bucket, free_at or now, rate.per * cost / rate.limit)

    @abstractmethod
    def _pause(
        self,
        key: str,
        kind: PauseKind,
        value: str,
        until: datetime | None,
        reason: str | None,
    ) -> Pause:
        """Insert or extend the pause ``key``; the pause as it stands."""

    @abstractmethod
    def _resume(self, key: str) -> bool:
        """Delete the pause ``key``; whether there was one."""

    @abstractmethod
    def _pauses(self) -> builtins.list[Pause]:
        """The pauses in force (no end, or an end to come), by target."""

    @abstractmethod
    def _paused_until(self, keys: Sequence[str]) -> tuple[bool, datetime | None]:
        """Whether a pause among ``keys`` is in force, and when the last ends (None: never)."""

    @abstractmethod
    def _rate_starts(self, bucket: str) -> builtins.list[tuple[datetime, int]]:
        """The starts of ``bucket`` that still count: ``(until, cost)``, soonest first."""

    @abstractmethod
    def _rate_use(self) -> dict[str, tuple[int, datetime | None]]:
        """By bucket with starts still counting or a turn to come: the units the starts
        cost, and the latest turn given to a waiting task (None: none to come)."""

    @abstractmethod
    def _reserve_wake(self, bucket: str, free_at: datetime, step: timedelta) -> datetime:
        """The next waiter's time in ``bucket``: the later of ``free_at`` and the last
        given plus ``step``, kept as the last given; atomically."""

    @abstractmethod
    def _prune_flow(self) -> int:
        """Delete the starts past their period, the turns past, and the ended pauses."""


def _frees_at(
    starts: Sequence[tuple[datetime, int]], cost: int, limit: int, now: datetime
) -> datetime | None:
    """The first time the starts still counting leave room for ``cost``; None: now."""
    used = sum(counted for _, counted in starts)
    if used + cost <= limit:
        return None
    for until, counted in starts:
        used -= counted
        if used + cost <= limit:
            return until
    return now


def _kind(kind: PauseKind | str) -> PauseKind:
    try:
        return PauseKind(kind)
    except ValueError:
        raise InvalidTaskData("must be job, owner or key", field="kind") from None


def _value(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_VALUE:
        raise InvalidTaskData(f"must be a text of 1 to {_MAX_VALUE} characters", field="value")
    return value
