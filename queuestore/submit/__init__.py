"""The callers' side: :class:`TaskQueue` submits, cancels, resumes and waits for tasks,
and keeps schedules (:mod:`~queuestore.submit.schedules`).

It joins a store to a Celery app, registers the app's beat tasks and hands
publishing to the broker side. Above it sit only the asyncio twins
(:mod:`queuestore.aio`), the configuration and the protocol surfaces.
"""

from queuestore.submit.queue import TaskQueue

__all__ = ["TaskQueue"]
