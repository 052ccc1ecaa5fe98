"""What the callers' side and the run side share: the job registry and the run's settings.

:mod:`queuestore.queue` (the callers' verbs) and the run side
(:mod:`queuestore.worker`, :mod:`queuestore.run`, :mod:`queuestore.context`,
:mod:`queuestore.heartbeat`) both import this module, and never each other:
a ``TaskQueue`` binds itself to its Celery app here, and a worker finds the
settings of its runs here.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from celery import Celery

from queuestore.errors import InvalidTaskData
from queuestore.store.base import TaskStore

if TYPE_CHECKING:
    from queuestore.context import TaskContext

JANITOR_TASK = "queuestore.janitor"
REAPER_TASK = "queuestore.reaper"
DISPATCHER_TASK = "queuestore.dispatcher"
"""The maintenance tasks a ``TaskQueue`` registers and beat runs (named here, for both sides)."""


class RunSettings(Protocol):
    """Where a worker's runs keep their tasks, and how long and how often they write.

    A :class:`~queuestore.queue.TaskQueue` is one; see it for each duration.
    """

    store: TaskStore
    lease: timedelta
    heartbeat_interval: timedelta
    report_interval: timedelta
    ack_after: timedelta


@dataclass
class Job:
    """A function registered as a queuestore job on a Celery app."""

    name: str
    function: Callable[..., Any]
    celery_task: Any = field(repr=False)

    def __call__(self, ctx: TaskContext, *args: Any, **kwargs: Any) -> Any:
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
_SETTINGS: weakref.WeakKeyDictionary[Celery, RunSettings] = weakref.WeakKeyDictionary()
_SETTINGS_LOCK = threading.Lock()


def register_job(app: Celery, registered: Job) -> None:
    """Make ``registered`` the job named ``registered.name`` on ``app`` in this process."""
    _JOBS.setdefault(app, {})[registered.name] = registered


def registered_job(app: Celery, name: str) -> Job | None:
    """The job registered under ``name`` on ``app`` in this process, if any."""
    return _JOBS.get(app, {}).get(name)


def registered_names(app: Celery) -> frozenset[str]:
    """The names of the jobs registered on ``app`` in this process."""
    return frozenset(_JOBS.get(app, {}))


def bind_settings(app: Celery, settings: RunSettings) -> bool:
    """Let ``app``'s runs use ``settings``; True the first time ``app`` is bound."""
    with _SETTINGS_LOCK:
        first = app not in _SETTINGS
        _SETTINGS[app] = settings
    return first


def settings_of(app: Celery) -> RunSettings:
    """The settings bound to ``app`` in this process.

    Raises:
        RuntimeError: no ``TaskQueue(store, app)`` was created; create it in
            the module that Celery loads with ``-A``.
    """
    try:
        return _SETTINGS[app]
    except KeyError:
        raise RuntimeError(
            "no TaskQueue for this Celery app: create TaskQueue(store, app) "
            "in the module the worker loads"
        ) from None
