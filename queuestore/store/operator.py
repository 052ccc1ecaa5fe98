"""The operator's verbs: the rollup the overview reads, and the workers' heartbeats.

These verbs (:class:`OperatorVerbs`) are part of every
:class:`~queuestore.store.base.TaskStore`. They read every owner's numbers:
only an operator's surface calls them, never a caller's.
"""

from __future__ import annotations

import builtins
from abc import abstractmethod
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from queuestore.core import validation as check
from queuestore.core.errors import InvalidTaskData
from queuestore.core.models import Task
from queuestore.core.rollup import (
    JOB_STEP,
    KEPT,
    LONG_STEPS,
    MINUTE,
    SHORT_KEPT,
    CurrentCount,
    Rollup,
    SeriesCount,
    floor_to,
    steps_for,
    window_start,
)
from queuestore.core.workers import Worker
from queuestore.store.backend import StoreBackend

HOUR: Final = timedelta(hours=1)

_MAX_RUNNING: Final = 1000
"""The most task ids a worker's beat lists."""


class OperatorVerbs(StoreBackend):
    """The rollup (current counts and series) and the workers' rows."""

    # -- backend primitives -------------------------------------------------

    @abstractmethod
    def _fold_rollup(self) -> int:
        """Move the rollup's fresh entries into its counts and series; how many moved.

        Two folds at once must not count an entry twice (one may do nothing).
        """

    @abstractmethod
    def _prune_rollup(self, short_before: datetime, long_before: datetime) -> None:
        """Drop the series in short steps (minutes, five minutes) before ``short_before``,
        the others before ``long_before``, and the current counts that are zero."""

    @abstractmethod
    def _current_counts(self) -> builtins.list[CurrentCount]:
        """The current counts that are not zero, fresh entries included."""

    @abstractmethod
    def _series_counts(
        self, step: timedelta, since: datetime, *, timed: bool
    ) -> builtins.list[SeriesCount]:
        """Every job's counts (or, ``timed``, histograms) together
        (:data:`~queuestore.core.rollup.ALL_JOBS`) from ``since`` on, summed per ``step``."""

    @abstractmethod
    def _job_counts(self, since: datetime) -> builtins.list[SeriesCount]:
        """Each job's series from the hour ``since`` on, summed (each count at ``since``)."""

    @abstractmethod
    def _oldest_waiting(self, now: datetime) -> Task | None:
        """The submitted task due by ``now`` (no start time, or one past) written longest ago."""

    @abstractmethod
    def _beat_worker(self, worker: Worker) -> None:
        """Insert or update the worker's row: ``started_at`` only when inserted, ``beat_at``
        from the store's clock (``worker``'s are placeholders)."""

    @abstractmethod
    def _workers(self) -> builtins.list[tuple[Worker, datetime]]:
        """Every worker row, with the store's clock at the read."""

    @abstractmethod
    def _forget_workers(self, worker_id: str | None, beat_before: datetime | None) -> int:
        """Delete the row of ``worker_id``, or the rows last beaten before ``beat_before``."""

    # -- verbs ----------------------------------------------------------------

    def rollup(self, window: timedelta = HOUR) -> Rollup:
        """Every owner's counts now, and the series over the last ``window``.

        The fresh entries are folded first (see :meth:`fold_rollup`). Every
        job's counts come together per minute for a window up to two hours,
        per quarter hour beyond, and their durations per five minutes, or per
        hour (``window`` is rounded up to whole steps of these); each job's are
        summed over the hours the window touches.

        Raises:
            InvalidTaskData: ``window`` is not between a minute and 47 hours.
        """
        if not isinstance(window, timedelta) or not MINUTE <= window <= KEPT - LONG_STEPS[1]:
            raise InvalidTaskData("must be a timedelta from a minute to two days", field="window")
        step, timed_step = steps_for(window)
        window = timed_step * -(-window // timed_step)
        self._fold_rollup()
        now = self._now()
        since = window_start(now, window, timed_step)
        return Rollup(
            now=now,
            window=window,
            step=step,
            timed_step=timed_step,
            counts=self._current_counts(),
            series=self._series_counts(step, window_start(now, window, step), timed=False),
            timings=self._series_counts(timed_step, since, timed=True),
            jobs=self._job_counts(floor_to(since, JOB_STEP)),
            oldest_waiting=self._oldest_waiting(now),
        )

    def fold_rollup(self) -> int:
        """Fold the rollup's fresh entries into its counts and series, and drop old series.

        The janitor calls it; :meth:`rollup` folds too. Safe to run anywhere at
        any time: a fold running elsewhere makes this one return 0.

        Returns:
            How many entries were folded.
        """
        folded = self._fold_rollup()
        now = self._now()
        self._prune_rollup(now - SHORT_KEPT, now - KEPT)
        return folded

    def beat_worker(
        self,
        worker_id: str,
        *,
        host: str,
        pid: int,
        node: str | None = None,
        pool: str | None = None,
        concurrency: int | None = None,
        running: Iterable[str] = (),
    ) -> None:
        """Record a worker process's heartbeat: what it is and which tasks it runs now.

        Raises:
            InvalidTaskData: a bad value; nothing is written.
        """
        ids = [check.task_id(task_id) for task_id in running]
        if len(ids) > _MAX_RUNNING:
            raise InvalidTaskData(f"must list at most {_MAX_RUNNING} tasks", field="running")
        worker = Worker(
            id=check.worker_id(worker_id),
            host=_text(host, "host"),
            pid=check.positive_int(pid, "pid"),
            node=None if node is None else _text(node, "node"),
            pool=None if pool is None else _text(pool, "pool"),
            concurrency=None
            if concurrency is None
            else check.positive_int(concurrency, "concurrency"),
            started_at=self._now(),
            beat_at=self._now(),
            running=ids,
        )
        self._beat_worker(worker)

    def workers(self) -> builtins.list[Worker]:
        """Every worker process whose row is kept, alive or silent, by host and pid."""
        rows = self._workers()
        found = [
            worker.model_copy(update={"silent_for": now - worker.beat_at}) for worker, now in rows
        ]
        return sorted(found, key=lambda worker: (worker.host, worker.pid, worker.id))

    def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row (a process that shuts down cleanly)."""
        self._forget_workers(check.worker_id(worker_id), None)

    def forget_workers(self, silent_for: timedelta) -> int:
        """Remove the rows of workers whose last beat is older than ``silent_for``; how many."""
        age = check.ttl(silent_for)
        if age is None:
            raise InvalidTaskData("is required", field="silent_for")
        return self._forget_workers(None, self._now() - age)


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 256 or "\x00" in value:
        raise InvalidTaskData("must be a non-empty string of at most 256 characters", field=field)
    return value
