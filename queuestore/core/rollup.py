"""The rollup: what the store counts as its tasks change, for the operator's overview.

Every store keeps, beside its tasks, two kinds of counts, written with each
change so that the overview never scans the tasks:

- **current counts**: how many tasks are in each status, by job and owner
  (:class:`CurrentCount`);
- **series**: per minute, how many tasks were submitted, started, ended in
  each terminal status, retried by their job's policy, given another run
  after a lost one (the reaper), and how many callback deliveries died, with
  the durations of the starts and of the runs as histograms
  (:class:`SeriesCount`): ``started`` by the wait from submit (or the
  scheduled start) to the first claim, and each terminal status by the run
  time from the first claim to the end (:data:`NO_DURATION` for a task that
  never started).

A duration falls in one of :data:`BOUNDS_MS`' buckets, each 19% (a quarter of
a doubling) wider than the one before, from 1 ms to 37 hours: a percentile
read from them (:func:`percentile`) is within about 10% of the true one.
:class:`Rollup` is what :meth:`TaskStore.rollup <queuestore.TaskStore.rollup>`
returns over a window, and how the overview reads it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple

from queuestore.core.models import TERMINAL, Task, TaskStatus

BOUNDS_MS: Final[tuple[float, ...]] = tuple(2.0 ** (index / 4) for index in range(109))
"""The bucket bounds of a duration, in milliseconds: bucket ``i`` holds
``BOUNDS_MS[i - 1] <= d < BOUNDS_MS[i]``; bucket 0 is under 1 ms, the last one
37 hours and more."""

NO_DURATION: Final = -1
"""The bucket of a count that has no duration (a submit, a task cancelled before it started)."""

SUBMITTED: Final = "submitted"
"""Tasks created."""
STARTED: Final = "started"
"""Tasks claimed for the first time, by the wait from submit (or the scheduled start)."""
RETRIED: Final = "retried"
"""Runs whose job failed and whose retry policy runs it again."""
LOST: Final = "lost"
"""Lost runs the reaper gave another run (a lost run that failed the task counts as failed)."""
DEAD: Final = "dead"
"""Callback deliveries given up."""
SERIES: Final = (SUBMITTED, STARTED, *(s.value for s in sorted(TERMINAL)), RETRIED, LOST, DEAD)
"""Every metric of the series."""

MINUTE: Final = timedelta(minutes=1)
QUARTER: Final = timedelta(minutes=15)
STEPS: Final = (MINUTE, QUARTER)
"""The steps a store keeps its series in: per minute, and per quarter of an hour."""
MINUTES_KEPT: Final = timedelta(hours=3)
"""How long the per-minute series are kept."""
KEPT: Final = timedelta(days=2)
"""How long the per-quarter series are kept: the longest window a rollup reads."""


def bucket_of(milliseconds: float) -> int:
    """The bucket of a duration of ``milliseconds`` (see :data:`BOUNDS_MS`)."""
    return bisect_right(BOUNDS_MS, milliseconds)


def bucket_between(start: datetime | None, end: datetime | None) -> int:
    """The bucket of the time from ``start`` to ``end``; :data:`NO_DURATION` without both."""
    if start is None or end is None:
        return NO_DURATION
    return bucket_of((end - start).total_seconds() * 1000)


def bucket_range(bucket: int) -> tuple[float, float]:
    """The durations, in seconds, that ``bucket`` holds: ``[low, high)``."""
    low = 0.0 if bucket <= 0 else BOUNDS_MS[bucket - 1]
    high = BOUNDS_MS[min(bucket, len(BOUNDS_MS) - 1)]
    return low / 1000, high / 1000


def percentile(histogram: Mapping[int, int], quantile: float) -> float | None:
    """The ``quantile`` (0..1) of the durations in ``histogram`` (bucket -> count), in seconds.

    Interpolated within the bucket it falls in, geometrically (linearly in the
    first); None when the histogram holds no duration.
    """
    counted = sorted((bucket, count) for bucket, count in histogram.items() if bucket >= 0)
    total = sum(count for _, count in counted)
    if total <= 0:
        return None
    rank = quantile * total
    seen = 0
    for bucket, count in counted:
        if count > 0 and seen + count >= rank:
            low, high = bucket_range(bucket)
            share = min(max((rank - seen) / count, 0.0), 1.0)
            if low <= 0:
                return high * share
            return low * math.exp(math.log(high / low) * share)
        seen += count
    return bucket_range(counted[-1][0])[1]


def floor_to(instant: datetime, step: timedelta) -> datetime:
    """The start of the ``step`` (aligned on the epoch) that ``instant`` falls in."""
    seconds = step.total_seconds()
    epoch = instant.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, UTC)


def step_for(window: timedelta) -> timedelta:
    """The step a window is read in: minutes up to two hours, quarters beyond."""
    return MINUTE if window <= timedelta(hours=2) else QUARTER


class CurrentCount(NamedTuple):
    """How many tasks of a job and owner are in a status now."""

    status: TaskStatus
    name: str
    owner: str | None
    value: int


class SeriesCount(NamedTuple):
    """A count of the series: ``metric`` of job ``name`` in the step from ``start``,
    with durations in ``bucket`` (:data:`NO_DURATION` for none)."""

    start: datetime
    metric: str
    name: str
    bucket: int
    value: int


@dataclass(frozen=True)
class Rollup:
    """The store's counts over a window that ends now, and how the overview reads them.

    Attributes:
        now: the store's clock when it was read.
        window: how far back the series go.
        step: the width of each point of the series.
        counts: the current counts, by status, job and owner.
        series: the series' counts of the window, one per step, metric, job and bucket.
        oldest_waiting: the submitted task due to start that has waited longest
            (by its last write), if any.
    """

    now: datetime
    window: timedelta
    step: timedelta
    counts: list[CurrentCount]
    series: list[SeriesCount]
    oldest_waiting: Task | None = None
    _by_step: dict[tuple[datetime, str], int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        totals: Counter[tuple[datetime, str]] = Counter()
        for count in self.series:
            totals[(count.start, count.metric)] += count.value
        self._by_step.update(totals)

    @property
    def since(self) -> datetime:
        """The start of the first step of the window."""
        return floor_to(self.now, self.step) - self.window + self.step

    def steps(self) -> list[datetime]:
        """The start of each step of the window, oldest first; the last one is under way."""
        count = round(self.window / self.step)
        return [self.since + index * self.step for index in range(count)]

    def per_step(self, metric: str) -> list[int]:
        """How many ``metric`` counted in each step of :meth:`steps`."""
        return [self._by_step.get((start, metric), 0) for start in self.steps()]

    def total(self, metric: str, *, name: str | None = None) -> int:
        """How many ``metric`` counted over the whole window (of job ``name`` only, if given)."""
        return sum(
            count.value
            for count in self.series
            if count.metric == metric and (name is None or count.name == name)
        )

    def histogram(
        self,
        metrics: Iterable[str],
        *,
        name: str | None = None,
        start: datetime | None = None,
    ) -> dict[int, int]:
        """The durations of ``metrics`` by bucket, over the window or in the step ``start``."""
        wanted = set(metrics)
        buckets: Counter[int] = Counter()
        for count in self.series:
            if (
                count.metric in wanted
                and count.bucket >= 0
                and (name is None or count.name == name)
                and (start is None or count.start == start)
            ):
                buckets[count.bucket] += count.value
        return dict(buckets)

    def status_counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status now (zero for an empty one)."""
        totals = dict.fromkeys(TaskStatus, 0)
        for count in self.counts:
            totals[count.status] += count.value
        return totals

    def current(self, status: TaskStatus, *, by: str) -> dict[str | None, int]:
        """How many tasks are in ``status`` now, by ``name`` (job) or ``owner``, largest first."""
        if by not in ("name", "owner"):
            raise ValueError(f"by must be 'name' or 'owner', not {by!r}")
        totals: Counter[str | None] = Counter()
        for count in self.counts:
            if count.status == status and count.value:
                totals[count.name if by == "name" else count.owner] += count.value
        return dict(sorted(totals.items(), key=lambda item: (-item[1], str(item[0]))))

    def names(self) -> list[str]:
        """The jobs the window's series or the current counts name, sorted."""
        return sorted({c.name for c in self.series} | {c.name for c in self.counts if c.value})


CountChange = tuple[tuple[TaskStatus, str, str | None], int]
"""A change of a current count: ``(status, job, owner)`` and by how much."""


def changes_of(
    before: Task | None, after: Task | None
) -> tuple[list[CountChange], list[SeriesCount]]:
    """What one committed write of a task changes in the rollup: the rule every store keeps.

    ``before`` is the row before the write (None for an insert), ``after`` the
    row after it (None for a delete). The SQL stores keep the same rule in
    triggers (migration 0014); the contract suite holds them to each other.
    """
    if after is None:
        return ([] if before is None else [(_key(before), -1)]), []
    if before is None:
        return [(_key(after), 1)], _inserted(after)
    minute = floor_to(after.updated_at, MINUTE)
    if before.status != after.status:
        counts = [(_key(before), -1), (_key(after), 1)]
        series = []
        if before.status is TaskStatus.SUBMITTED and after.status is TaskStatus.WORKING:
            series.append(_started(after, minute))
        if after.status in TERMINAL:
            bucket = bucket_between(after.started_at, after.finished_at)
            series.append(SeriesCount(minute, after.status.value, after.name, bucket, 1))
        return counts, series
    if before.worker_id is None or after.worker_id is not None:
        return [], []
    if after.status is not TaskStatus.WORKING or after.suspends > before.suspends:
        return [], []
    metric = RETRIED if len(after.errors) > len(before.errors) else LOST
    return [], [SeriesCount(minute, metric, after.name, NO_DURATION, 1)]


def _key(task: Task) -> tuple[TaskStatus, str, str | None]:
    return task.status, task.name, task.owner


def _started(task: Task, minute: datetime) -> SeriesCount:
    """The first start of ``task``, by its wait from submit or from its scheduled start."""
    due = task.created_at if task.run_at is None else max(task.created_at, task.run_at)
    return SeriesCount(minute, STARTED, task.name, bucket_between(due, task.started_at), 1)


def _inserted(task: Task) -> list[SeriesCount]:
    """The series of a row inserted as it is: a new task, or one loaded whole (a backfill)."""
    series = [SeriesCount(floor_to(task.created_at, MINUTE), SUBMITTED, task.name, NO_DURATION, 1)]
    if task.started_at is not None:
        series.append(_started(task, floor_to(task.started_at, MINUTE)))
    if task.status in TERMINAL and task.finished_at is not None:
        bucket = bucket_between(task.started_at, task.finished_at)
        minute = floor_to(task.finished_at, MINUTE)
        series.append(SeriesCount(minute, task.status.value, task.name, bucket, 1))
    return series


def in_steps(counts: Iterable[SeriesCount], step: timedelta) -> list[SeriesCount]:
    """``counts`` summed into steps of ``step`` (each start floored to its step)."""
    totals: Counter[tuple[datetime, str, str, int]] = Counter()
    for count in counts:
        key = (floor_to(count.start, step), count.metric, count.name, count.bucket)
        totals[key] += count.value
    return [SeriesCount(*key, total) for key, total in sorted(totals.items()) if total]


__all__ = [
    "BOUNDS_MS",
    "DEAD",
    "KEPT",
    "LOST",
    "MINUTE",
    "MINUTES_KEPT",
    "NO_DURATION",
    "QUARTER",
    "RETRIED",
    "SERIES",
    "STARTED",
    "STEPS",
    "SUBMITTED",
    "CurrentCount",
    "Rollup",
    "SeriesCount",
    "bucket_between",
    "bucket_of",
    "bucket_range",
    "changes_of",
    "floor_to",
    "in_steps",
    "percentile",
    "step_for",
]
