"""The rollup: what the store counts as its tasks change, for the operator's overview.

Every store keeps, beside its tasks, two kinds of counts, written with each
change so that the overview never scans the tasks:

- **current counts**: how many tasks are in each status, by job and owner
  (:class:`CurrentCount`);
- **series**: per minute, how many tasks were submitted, started (first
  claimed), ended in each terminal status, retried by their job's policy,
  given another run after a lost one (the reaper), and how many callback
  deliveries died; and two histograms of durations: :data:`WAIT`, from submit
  (or the scheduled start) to the first claim, and :data:`RUN`, from the first
  claim to the end (:class:`SeriesCount`).

The stores keep the counts of every job together per minute and per quarter
hour, the histograms of every job together per five minutes and per hour (for
the charts), and each job's per hour (for the table of jobs): a read never
touches more rows than a window has steps, jobs and buckets, however many
tasks there are.

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
"""Tasks claimed for the first time."""
RETRIED: Final = "retried"
"""Runs whose job failed and whose retry policy runs it again."""
LOST: Final = "lost"
"""Lost runs the reaper gave another run (a lost run that failed the task counts as failed)."""
DEAD: Final = "dead"
"""Callback deliveries given up."""
BACKLOG: Final = "backlog"
"""The tasks waiting to start (``submitted``), sampled: the last count each step saw (a SQL
store samples it at each fold: the janitor's, every minute, and each read's)."""
WAIT: Final = "wait"
"""The histogram of the waits from submit (or the scheduled start) to the first claim."""
RUN: Final = "run"
"""The histogram of the run times, from the first claim to the end, of the tasks that ended."""
COUNTED: Final = (SUBMITTED, STARTED, *(s.value for s in sorted(TERMINAL)), RETRIED, LOST, DEAD)
"""The metrics of the series that count (their bucket is :data:`NO_DURATION`)."""
TIMED: Final = (WAIT, RUN)
"""The metrics of the series that are histograms of durations."""
ALL_JOBS: Final = ""
"""The job name of the series of every job together."""
UNKNOWN_JOB: Final = " "
"""The job name of a dead delivery whose task is gone (no job has this name)."""

MINUTE: Final = timedelta(minutes=1)
FIVE_MINUTES: Final = timedelta(minutes=5)
QUARTER: Final = timedelta(minutes=15)
HOUR: Final = timedelta(hours=1)
SHORT_STEPS: Final = (MINUTE, FIVE_MINUTES)
"""The steps of a window up to two hours: counts per minute, histograms per five minutes."""
LONG_STEPS: Final = (QUARTER, HOUR)
"""The steps of a longer window: counts per quarter hour, histograms per hour."""
JOB_STEP: Final = HOUR
"""The step a store keeps each job's series in."""
SHORT_KEPT: Final = timedelta(hours=3)
"""How long the series in :data:`SHORT_STEPS` are kept."""
KEPT: Final = timedelta(days=2)
"""How long the other series are kept: the longest window a rollup reads."""


def bucket_of(milliseconds: float) -> int:
    """The bucket of a duration of ``milliseconds`` (see :data:`BOUNDS_MS`)."""
    return bisect_right(BOUNDS_MS, milliseconds)


def bucket_between(start: datetime, end: datetime) -> int:
    """The bucket of the time from ``start`` to ``end``."""
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


def window_start(now: datetime, window: timedelta, step: timedelta) -> datetime:
    """The start of the first of the steps of ``step`` that make ``window``, the last
    one holding ``now``."""
    return floor_to(now, step) - window + step


def steps_for(window: timedelta) -> tuple[timedelta, timedelta]:
    """The steps a window is read in: its counts' and its histograms'."""
    return SHORT_STEPS if window <= timedelta(hours=2) else LONG_STEPS


class CurrentCount(NamedTuple):
    """How many tasks of a job and owner are in a status now."""

    status: TaskStatus
    name: str
    owner: str | None
    value: int


class SeriesCount(NamedTuple):
    """A count of the series: ``metric`` of job ``name`` (:data:`ALL_JOBS`: every job) in
    the step from ``start``, with durations in ``bucket`` (:data:`NO_DURATION` for a count)."""

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
        window: how far back the series go (whole steps of ``timed_step``).
        step: the width of each point of the counts' series.
        timed_step: the width of each point of the histograms' series.
        counts: the current counts, by status, job and owner.
        series: every job's counts together (name :data:`ALL_JOBS`), one per step
            and metric.
        timings: every job's histograms together, one count per timed step,
            metric and bucket.
        jobs: each job's counts and histograms, summed over the hours the
            window touches (each at the first of them).
        oldest_waiting: the submitted task due to start that has waited longest
            (by its last write), if any.
    """

    now: datetime
    window: timedelta
    step: timedelta
    timed_step: timedelta
    counts: list[CurrentCount]
    series: list[SeriesCount]
    timings: list[SeriesCount]
    jobs: list[SeriesCount]
    oldest_waiting: Task | None = None
    _by_step: dict[tuple[datetime, str], Counter[int]] = field(default_factory=dict, repr=False)
    _by_job: dict[tuple[str, str], Counter[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for count in (*self.series, *self.timings):
            at = (count.start, count.metric)
            self._by_step.setdefault(at, Counter())[count.bucket] += count.value
        for count in self.jobs:
            of = (count.name, count.metric)
            self._by_job.setdefault(of, Counter())[count.bucket] += count.value

    @property
    def since(self) -> datetime:
        """The start of the window's first step."""
        return window_start(self.now, self.window, self.step)

    def steps(self, step: timedelta | None = None) -> list[datetime]:
        """The start of each step (of :attr:`step`, or ``step``) of the window, oldest
        first; the last one is under way."""
        width = self.step if step is None else step
        first = window_start(self.now, self.window, width)
        return [first + index * width for index in range(round(self.window / width))]

    def per_step(self, metric: str) -> list[int]:
        """How many ``metric`` counted in each step of :meth:`steps`."""
        empty: Counter[int] = Counter()
        return [self._by_step.get((s, metric), empty)[NO_DURATION] for s in self.steps()]

    def samples(self, metric: str) -> list[int | None]:
        """A sampled metric (:data:`BACKLOG`) in each step of :meth:`steps`; None unsampled."""
        found = [self._by_step.get((start, metric)) for start in self.steps()]
        return [None if counted is None else counted[NO_DURATION] for counted in found]

    def total(self, metric: str) -> int:
        """How many ``metric`` counted over the whole window, every job's."""
        return sum(self.per_step(metric))

    def histogram(self, metric: str, *, start: datetime | None = None) -> dict[int, int]:
        """Every job's durations of ``metric`` by bucket, over the window or in step ``start``."""
        buckets: Counter[int] = Counter()
        for (at, named), counted in self._by_step.items():
            if named == metric and start in (None, at):
                buckets.update(counted)
        return {bucket: value for bucket, value in buckets.items() if bucket >= 0 and value}

    def percentiles(self, metric: str, quantile: float) -> list[float | None]:
        """The ``quantile`` of every job's durations of ``metric`` in each timed step
        (``steps(timed_step)``), in seconds."""
        empty: Counter[int] = Counter()
        steps = self.steps(self.timed_step)
        return [percentile(self._by_step.get((s, metric), empty), quantile) for s in steps]

    def job_total(self, name: str, metric: str) -> int:
        """How many ``metric`` job ``name`` counted in the hours the window touches."""
        return self._by_job.get((name, metric), Counter())[NO_DURATION]

    def job_histogram(self, name: str, metric: str) -> dict[int, int]:
        """Job ``name``'s durations of ``metric`` by bucket, in the hours the window touches."""
        counted = self._by_job.get((name, metric), Counter())
        return {bucket: value for bucket, value in counted.items() if bucket >= 0 and value}

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
        return sorted({c.name for c in self.jobs} | {c.name for c in self.counts if c.value})


CountChange = tuple[tuple[TaskStatus, str, str | None], int]
"""A change of a current count: ``(status, job, owner)`` and by how much."""


def changes_of(
    before: Task | None, after: Task | None
) -> tuple[list[CountChange], list[SeriesCount]]:
    """What one committed write of a task changes in the rollup: the rule every store keeps.

    ``before`` is the row before the write (None for an insert), ``after`` the
    row after it (None for a delete). The series are by minute and job. The
    SQL stores keep the same rule in triggers (migration 0012); the contract
    suite holds them to each other.
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
            series += _started(after, minute)
        if after.status in TERMINAL:
            series += _ended(after, minute)
        return counts, series
    if before.worker_id is None or after.worker_id is not None:
        return [], []
    if after.status is not TaskStatus.WORKING or after.suspends > before.suspends:
        return [], []
    metric = RETRIED if len(after.errors) > len(before.errors) else LOST
    return [], [SeriesCount(minute, metric, after.name, NO_DURATION, 1)]


def _key(task: Task) -> tuple[TaskStatus, str, str | None]:
    return task.status, task.name, task.owner


def _started(task: Task, minute: datetime) -> list[SeriesCount]:
    """The first start of ``task``, and its wait from submit or from its scheduled start."""
    series = [SeriesCount(minute, STARTED, task.name, NO_DURATION, 1)]
    if task.started_at is not None:
        due = task.created_at if task.run_at is None else max(task.created_at, task.run_at)
        series.append(SeriesCount(minute, WAIT, task.name, bucket_between(due, task.started_at), 1))
    return series


def _ended(task: Task, minute: datetime) -> list[SeriesCount]:
    """The end of ``task`` in its status, and its run time if it started."""
    series = [SeriesCount(minute, task.status.value, task.name, NO_DURATION, 1)]
    if task.started_at is not None and task.finished_at is not None:
        bucket = bucket_between(task.started_at, task.finished_at)
        series.append(SeriesCount(minute, RUN, task.name, bucket, 1))
    return series


def _inserted(task: Task) -> list[SeriesCount]:
    """The series of a row inserted as it is: a new task, or one loaded whole (a backfill)."""
    series = [SeriesCount(floor_to(task.created_at, MINUTE), SUBMITTED, task.name, NO_DURATION, 1)]
    if task.started_at is not None:
        series += _started(task, floor_to(task.started_at, MINUTE))
    if task.status in TERMINAL and task.finished_at is not None:
        series += _ended(task, floor_to(task.finished_at, MINUTE))
    return series


def in_steps(
    counts: Iterable[SeriesCount],
    step: timedelta,
    *,
    by_job: bool = False,
    since: datetime | None = None,
) -> list[SeriesCount]:
    """``counts`` summed into steps of ``step`` (each start floored to its step, or all
    at ``since`` when given), every job's together (:data:`ALL_JOBS`) unless ``by_job``."""
    totals: Counter[tuple[datetime, str, str, int]] = Counter()
    for count in counts:
        name = count.name if by_job else ALL_JOBS
        start = floor_to(count.start, step) if since is None else since
        totals[(start, count.metric, name, count.bucket)] += count.value
    return [SeriesCount(*key, total) for key, total in sorted(totals.items()) if total]


__all__ = [
    "ALL_JOBS",
    "BACKLOG",
    "BOUNDS_MS",
    "COUNTED",
    "DEAD",
    "FIVE_MINUTES",
    "HOUR",
    "JOB_STEP",
    "KEPT",
    "LONG_STEPS",
    "LOST",
    "MINUTE",
    "NO_DURATION",
    "QUARTER",
    "RETRIED",
    "RUN",
    "SHORT_KEPT",
    "SHORT_STEPS",
    "STARTED",
    "SUBMITTED",
    "TIMED",
    "UNKNOWN_JOB",
    "WAIT",
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
    "steps_for",
    "window_start",
]
