"""Beat's maintenance: the janitor, the reaper, the sweep and the schedules' tick, as Celery
tasks and a schedule.

``TaskQueue(store, app)`` registers the four tasks on its app (:func:`register`);
``TaskQueue.install_beat_schedule`` adds them to ``app.conf.beat_schedule``
(:func:`install`). Each is idempotent and safe to run twice, so two beats
do no harm; while the database is down each logs and waits for its next beat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from celery import Celery

from queuestore.beat.deadlines import enforce
from queuestore.beat.janitor import run_janitor
from queuestore.beat.reaper import reap
from queuestore.beat.schedules import run_schedules
from queuestore.beat.sweep import sweep
from queuestore.broker.publisher import Publisher
from queuestore.core.errors import StoreUnavailable
from queuestore.core.logs import quiet_celery_lines_of
from queuestore.core.options import QueueOptions

log = logging.getLogger(__name__)

JANITOR_TASK: Final = "queuestore.janitor"
"""Deletes terminal tasks older than their TTL."""

REAPER_TASK: Final = "queuestore.reaper"
"""Retries or fails the runs whose lease stopped being renewed, and fails the tasks past
their deadlines."""

SWEEP_TASK: Final = "queuestore.sweep"
"""Publishes the tasks whose message never went out, or was lost."""

SCHEDULES_TASK: Final = "queuestore.schedules"
"""Makes and publishes the tasks of the schedules whose tick came."""


def register(app: Celery) -> None:
    """Register the janitor, the reaper, the sweep and the schedules' tick as ``app``'s
    Celery tasks.

    Each finds the app's store and options through ``Publisher.of(app)`` when
    it runs, so the tasks follow the app's latest ``TaskQueue``.
    """

    def janitor(ttl_seconds: float, batch_size: int = 1000) -> int:
        store = Publisher.of(app).store
        ttl = timedelta(seconds=ttl_seconds)
        return _skipped_in_outage("janitor", lambda: run_janitor(store, ttl, batch_size=batch_size))

    def reaper() -> int:
        def lost_and_late() -> int:
            publisher = Publisher.of(app)
            return len(reap(publisher)) + sum(map(len, enforce(publisher)))

        return _skipped_in_outage("reaper", lost_and_late)

    def sweeper() -> int:
        return _skipped_in_outage("sweep", lambda: sweep(Publisher.of(app)))

    def ticker(grace_seconds: float) -> int:
        grace = timedelta(seconds=grace_seconds)
        return _skipped_in_outage(
            "schedules", lambda: run_schedules(Publisher.of(app), grace=grace)
        )

    app.task(name=JANITOR_TASK, ignore_result=True, shared=False)(janitor)
    app.task(name=REAPER_TASK, ignore_result=True, shared=False)(reaper)
    app.task(name=SWEEP_TASK, ignore_result=True, shared=False)(sweeper)
    app.task(name=SCHEDULES_TASK, ignore_result=True, shared=False)(ticker)
    # Each says at INFO what it did when it did something; Celery's lines, at DEBUG.
    quiet_celery_lines_of(JANITOR_TASK, REAPER_TASK, SWEEP_TASK, SCHEDULES_TASK)


def install(
    app: Celery,
    options: QueueOptions,
    *,
    janitor_ttl: timedelta,
    janitor_interval: timedelta,
    janitor_batch_size: int,
    reaper_interval: timedelta,
    sweep_interval: timedelta,
    schedules_interval: timedelta,
    schedules_grace: timedelta,
) -> None:
    """Add the janitor, the reaper, the sweep and the schedules' tick to
    ``app.conf.beat_schedule``.

    Each entry expires after its own interval, so beats that pile up while no
    worker runs are dropped instead of all running at once. A
    ``sweep_interval`` no shorter than the queue's ``schedule_ahead`` is
    logged as a warning: a scheduled task may then start up to the difference
    late.
    """
    if sweep_interval >= options.schedule_ahead:
        log.warning(
            "sweep_interval (%ss) is not shorter than the queue's schedule_ahead (%ss): "
            "scheduled tasks may start late",
            sweep_interval.total_seconds(),
            options.schedule_ahead.total_seconds(),
        )
    schedule = dict(app.conf.beat_schedule or {})
    schedule[JANITOR_TASK] = {
        "task": JANITOR_TASK,
        "schedule": janitor_interval,
        "kwargs": {"ttl_seconds": janitor_ttl.total_seconds(), "batch_size": janitor_batch_size},
        "options": {"expires": janitor_interval.total_seconds()},
    }
    schedule[REAPER_TASK] = _entry(REAPER_TASK, reaper_interval)
    schedule[SWEEP_TASK] = _entry(SWEEP_TASK, sweep_interval)
    schedule[SCHEDULES_TASK] = _entry(SCHEDULES_TASK, schedules_interval) | {
        "kwargs": {"grace_seconds": schedules_grace.total_seconds()}
    }
    app.conf.beat_schedule = schedule


def _entry(name: str, interval: timedelta) -> dict[str, Any]:
    return {
        "task": name,
        "schedule": interval,
        "options": {"expires": interval.total_seconds()},
    }


def _skipped_in_outage(name: str, run: Callable[[], int]) -> int:
    """Run a beat task; while the database is down, log and let the next beat try again."""
    try:
        return run()
    except StoreUnavailable as exc:
        log.warning("%s skipped this beat: %s", name, exc)
        return 0
