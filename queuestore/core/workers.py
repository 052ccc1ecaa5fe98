"""The worker processes as their heartbeats describe them, for the operator's view."""

from __future__ import annotations

from datetime import timedelta

from pydantic import AwareDatetime, Field

from queuestore.core.models import Record


class Worker(Record):
    """A worker process as its heartbeat last wrote it to the store.

    Each process that runs jobs writes its row every heartbeat, busy or idle
    (``TaskStore.beat_worker``), and removes it when it shuts down cleanly; a
    row whose beats stopped is a process that died, with the tasks it ran then.
    """

    id: str
    """The process's own id: host, pid and a random part, fixed for its life."""
    host: str
    pid: int
    node: str | None = None
    """The Celery worker's node name (``celery@host``) the process belongs to."""
    pool: str | None = None
    """The Celery pool it runs in: prefork, solo, threads..."""
    concurrency: int | None = None
    """The Celery worker's concurrency."""
    started_at: AwareDatetime
    beat_at: AwareDatetime
    """Its last heartbeat, on the store's clock."""
    running: list[str] = Field(default_factory=list)
    """The ids of the tasks it ran at its last beat."""
    silent_for: timedelta = timedelta(0)
    """How long before the read its last beat was, on the store's clock."""

    def alive(self, stale_after: timedelta) -> bool:
        """Whether it beat within ``stale_after`` of the read (a lease, say)."""
        return self.silent_for <= stale_after


__all__ = ["Worker"]
