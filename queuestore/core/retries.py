"""A job's own retry policy: which errors run it again, how many runs, and the wait between.

``@job(app, retry=Retry(on=(TimeoutError,), max_runs=5))`` makes a run whose
job raises one of ``on`` end as a retry instead of a failure: the task stays
live (``working``, unclaimed), the error is kept in ``Task.errors``, and the
next run starts after the backoff, published as a scheduled start is
(``Task.run_at``). A cancel while it waits ends it. After ``max_runs`` runs the
last error fails the task as any error does.

These are not the reaper's retries, which run again a job whose worker died
(a lost lease, counted against ``TaskQueue.max_lost_runs``): a job's retries
answer errors its code raised, and only those its policy names.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

_ZERO: Final = timedelta(0)


@dataclass(frozen=True, slots=True)
class Retry:
    """Run a job again when it raises one of ``on``, up to ``max_runs`` runs in all.

    The wait before the n-th retry is ``backoff * factor ** (n - 1)``, at most
    ``max_backoff``; with ``jitter`` it is drawn uniformly from its upper half
    (so retries of many tasks that failed together spread out, and none comes
    sooner than half the wait).

    Args:
        on: the exception classes that retry; any other error fails the task.
        max_runs: runs in all, the first included (1: never retry).
        backoff: the wait before the first retry.
        factor: how much each wait grows over the one before (1: constant).
        max_backoff: the longest wait.
        jitter: draw each wait from its upper half at random.

    Raises:
        TypeError: ``on`` names something that is not an exception class.
        ValueError: a count or duration out of range.
    """

    on: tuple[type[BaseException], ...]
    max_runs: int = 3
    backoff: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    max_backoff: timedelta = timedelta(minutes=10)
    jitter: bool = True

    def __post_init__(self) -> None:
        on = self.on if isinstance(self.on, tuple) else (self.on,)
        if not on or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in on
        ):
            raise TypeError("on must name one or more exception classes")
        object.__setattr__(self, "on", on)
        if (
            isinstance(self.max_runs, bool)
            or not isinstance(self.max_runs, int)
            or self.max_runs < 1
        ):
            raise ValueError("max_runs must be a positive integer")
        if not _ZERO <= self.backoff <= self.max_backoff:
            raise ValueError("backoff must be zero or more, and no longer than max_backoff")
        if not self.factor >= 1:
            raise ValueError("factor must be 1 or more")

    def retries(self, error: BaseException, runs: int) -> bool:
        """Whether a run that raised ``error``, the ``runs``-th of its task, runs again."""
        return runs < self.max_runs and isinstance(error, self.on)

    def wait(self, retry: int) -> timedelta:
        """The wait before the ``retry``-th retry (1: the first)."""
        longest = self.max_backoff.total_seconds()
        try:
            ceiling = min(self.backoff.total_seconds() * self.factor ** (retry - 1), longest)
        except OverflowError:  # a factor to a large power: the cap, long before
            ceiling = longest
        if self.jitter:
            ceiling = random.uniform(ceiling / 2, ceiling)  # spreading load, not a secret
        return timedelta(seconds=ceiling)


def _is_exception_class(kind: object) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseException)
