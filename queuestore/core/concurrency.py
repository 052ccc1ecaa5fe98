"""Concurrency limits: at most so many running tasks per owner, and per job.

``TaskQueue(store, app, limits=ConcurrencyLimits(per_owner=4))`` keeps one
tenant that submits a thousand tasks from holding every worker: a run is
claimed only while fewer than four of its owner's tasks are running, so the
others' tasks find free workers. A task refused at its limit waits in the
store, unclaimed and with no message in the broker, until a run of its owner
(or of its job) ends and hands its slot on; the sweep is the
backstop. The store decides each claim atomically, so the limit holds across
any number of workers.

A task is *running* while a worker holds it (``Task.worker_id`` is set): from
its claim until its run ends, or until the reaper takes it from a dead worker.
A task waiting for input, a retry waiting for its backoff, or a task not yet
claimed holds no slot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from queuestore.core.models import Task


class Caps(NamedTuple):
    """The limits that apply to one task: its owner's and its job's (None: no limit)."""

    owner: int | None
    job: int | None


@dataclass(frozen=True, repr=False, eq=False)
class ConcurrencyLimits:
    """The most running tasks per owner, and per job name.

    Args:
        per_owner: the most running tasks of any one owner; None: no limit.
            Tasks without an owner are not limited by it (only by ``per_job``).
        per_job: the most running tasks of a job, by job name, whatever their
            owners; a job not named here is not limited.

    Raises:
        ValueError: a limit below 1, or a job name that is not a text.
    """

    per_owner: int | None = None
    per_job: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.per_owner is not None:
            _check_limit(self.per_owner, "per_owner")
        jobs = dict(self.per_job)
        for name, limit in jobs.items():
            if not isinstance(name, str) or not name:
                raise ValueError("per_job names jobs by their names, non-empty texts")
            _check_limit(limit, f"per_job[{name!r}]")
        object.__setattr__(self, "per_job", MappingProxyType(jobs))

    def __repr__(self) -> str:
        given = []
        if self.per_owner is not None:
            given.append(f"per_owner={self.per_owner}")
        if self.per_job:
            given.append(f"per_job={dict(self.per_job)!r}")
        return f"ConcurrencyLimits({', '.join(given)})"

    def __bool__(self) -> bool:
        return self.per_owner is not None or bool(self.per_job)

    def __hash__(self) -> int:
        return hash((self.per_owner, tuple(sorted(self.per_job.items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConcurrencyLimits):
            return NotImplemented
        return (self.per_owner, dict(self.per_job)) == (other.per_owner, dict(other.per_job))

    def caps(self, owner: str | None, name: str) -> Caps:
        """The limits on a task of ``owner`` running job ``name``."""
        return Caps(
            owner=None if owner is None else self.per_owner,
            job=self.per_job.get(name),
        )

    def slots(self, running: Mapping[tuple[str | None, str], int]) -> Slots:
        """The slots in use, from the running tasks by ``(owner, name)``
        (``TaskStore.running_counts``)."""
        return Slots(self, running)

    def applies(self, task: Task) -> bool:
        """Whether ``task`` is limited at all: a run of it holds a slot someone may wait for."""
        return self.caps(task.owner, task.name) != (None, None)


class Slots:
    """The slots of each owner and job in use, as one decision over many tasks takes them."""

    def __init__(
        self, limits: ConcurrencyLimits, running: Mapping[tuple[str | None, str], int]
    ) -> None:
        self.limits = limits
        self.by_owner: Counter[str | None] = Counter()
        self.by_job: Counter[str] = Counter()
        for (owner, name), count in running.items():
            self.by_owner[owner] += count
            self.by_job[name] += count

    def full(self, task: Task) -> bool:
        """Whether ``task``'s owner or job has no free slot."""
        caps = self.limits.caps(task.owner, task.name)
        return (caps.owner is not None and self.by_owner[task.owner] >= caps.owner) or (
            caps.job is not None and self.by_job[task.name] >= caps.job
        )

    def take(self, task: Task) -> bool:
        """Take a slot of ``task``'s owner and job if both have one free; whether it did."""
        if self.full(task):
            return False
        self.by_owner[task.owner] += 1
        self.by_job[task.name] += 1
        return True

    def full_owners(self) -> tuple[str, ...]:
        """The owners with no free slot, sorted."""
        cap = self.limits.per_owner
        if cap is None:
            return ()
        return tuple(sorted(o for o, n in self.by_owner.items() if o is not None and n >= cap))

    def full_jobs(self) -> tuple[str, ...]:
        """The limited jobs with no free slot, sorted."""
        return tuple(
            sorted(name for name, cap in self.limits.per_job.items() if self.by_job[name] >= cap)
        )


def _check_limit(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of 1 or more")


NO_LIMITS = ConcurrencyLimits()
"""No limit on anyone: the default."""
