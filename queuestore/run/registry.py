"""The jobs of each Celery app in this process: :class:`Job`, and where they are found.

``@job`` (:mod:`queuestore.run.job`) registers a function here; a worker finds
the job a message names here, and the callers' side checks a task's input
against its job before anything is written.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from queuestore.core.errors import InvalidTaskData
from queuestore.core.retries import Retry


@dataclass
class Job:
    """A function registered as a queuestore job on a Celery app."""

    name: str
    function: Callable[..., Any]
    celery_task: Any = field(repr=False)
    retry: Retry | None = None
    """Its retry policy: which errors run it again (see :class:`queuestore.Retry`)."""

    def __call__(self, ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (in tests), with a context of your own."""
        return self.function(ctx, *args, **kwargs)

    def check_input(self, payload: Mapping[str, Any]) -> None:
        """Refuse input the function cannot take, before anything is written.

        Raises:
            InvalidTaskData: unknown or missing keyword arguments.
        """
        try:
            inspect.signature(self.function).bind(None, **payload)
        except TypeError as exc:
            raise InvalidTaskData(f"does not fit job {self.name!r}: {exc}", field="input") from exc


_JOBS: weakref.WeakKeyDictionary[Celery, dict[str, Job]] = weakref.WeakKeyDictionary()


def register_job(app: Celery, registered: Job) -> None:
    """Make ``registered`` the job named ``registered.name`` on ``app`` in this process."""
    _JOBS.setdefault(app, {})[registered.name] = registered


def registered_job(app: Celery, name: str) -> Job | None:
    """The job registered under ``name`` on ``app`` in this process, if any."""
    return _JOBS.get(app, {}).get(name)


def registered_names(app: Celery) -> frozenset[str]:
    """The names of the jobs registered on ``app`` in this process."""
    return frozenset(_JOBS.get(app, {}))
