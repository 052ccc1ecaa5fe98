"""What a store tells its observers as it works: the hook metrics are built on.

A :class:`StoreObserver` added with ``TaskStore.observe`` hears about every
task a store in this process creates, every status it writes, every task its
reaper recovers, every run its job's retry policy retries, every task a concurrency limit
makes wait, and every batch its
janitor removes, after the write committed. Observers run on the writer's
thread and must be cheap and must not raise; the store has no opinion about
what they do (see :mod:`queuestore.metrics.prometheus`).
"""

from __future__ import annotations

from queuestore.core.models import Step, Task


class StoreObserver:
    """Receives a store's committed writes; every method is a no-op by default."""

    def created(self, task: Task) -> None:
        """A task was inserted, in ``submitted``."""

    def status_written(self, task: Task, *, claimed: bool) -> None:
        """A write set the task's status (``task`` is the row after it).

        Args:
            claimed: the write was a worker's claim, the start of a run.
        """

    def reaped(self, task: Task) -> None:
        """The reaper recovered a lost run: ``task`` is terminal if it failed, else retried."""

    def retried(self, task: Task) -> None:
        """A run's job failed and its retry policy runs it again: ``task`` waits for it."""

    def waited_for_slot(self, task: Task) -> None:
        """A claim was refused at a concurrency limit: ``task`` waits for a slot."""

    def step_recorded(self, task_id: str, step: Step) -> None:
        """A run recorded how a named step (or a durable sleep) of its job ended."""

    def timed_out(self, task: Task) -> None:
        """A run passed its deadline and was failed: ``task`` is ``failed``, still held."""

    def removed(self, count: int) -> None:
        """The janitor deleted ``count`` expired tasks in one batch."""
