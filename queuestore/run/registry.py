"""What the callers' side and the run side share: the job registry and the run's settings.

:mod:`queuestore.submit.queue` (the callers' verbs) and the run side
(:mod:`queuestore.run.job`, :mod:`queuestore.run.lease`, :mod:`queuestore.run.context`,
:mod:`queuestore.run.heartbeat`) both import this module, and never each other:
a ``TaskQueue`` binds itself to its Celery app here, and a worker finds the
settings of its runs here.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from celery import Celery

from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.models import Task
from queuestore.store.base import TaskStore


class RunSettings(Protocol):
    """Where a worker's runs keep their tasks, and how long and how often they write.

    A :class:`~queuestore.submit.queue.TaskQueue` is one; see it for each duration.
    """

    store: TaskStore
    lease: timedelta
    heartbeat_interval: timedelta
    report_interval: timedelta
    ack_after: timedelta
    schedule_ahead: timedelta
    limits: ConcurrencyLimits

    def try_publish(self, task: Task, *, countdown: float | None = None) -> bool:
        """Publish the message of the task's next run (a job's retry); False if it could not."""
        ...

    def hand_off(self, ended: Task) -> int:
        """Publish the tasks waiting for the slot ``ended``'s run held; how many."""
        ...


class RegisteredJob(Protocol):
    """A job as the registry keeps it; :class:`queuestore.run.job.Job` is the one kind."""

    @property
    def name(self) -> str:
        """The name the job is registered and published under."""
        ...

    @property
    def function(self) -> Callable[..., Any]:
        """The job's body, called as ``function(ctx, **input)``."""
        ...

    def check_input(self, payload: Mapping[str, Any]) -> None:
        """Refuse input the function cannot take, before anything is written."""
        ...


_JOBS: weakref.WeakKeyDictionary[Celery, dict[str, RegisteredJob]] = weakref.WeakKeyDictionary()
_SETTINGS: weakref.WeakKeyDictionary[Celery, RunSettings] = weakref.WeakKeyDictionary()
_SETTINGS_LOCK = threading.Lock()


def register_job(app: Celery, registered: RegisteredJob) -> None:
    """Make ``registered`` the job named ``registered.name`` on ``app`` in this process."""
    _JOBS.setdefault(app, {})[registered.name] = registered


def registered_job(app: Celery, name: str) -> RegisteredJob | None:
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
