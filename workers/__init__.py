"""A ready Celery app for queuestore, configured from ``QUEUESTORE_*`` variables.

    celery -A workers worker --loglevel=INFO
    celery -A workers beat --loglevel=INFO

With nothing configured it uses the embedded default: an SQLite file and
Celery's filesystem broker under ``.queuestore/``.
"""

from celery import Celery

from queuestore import Settings, TaskQueue

settings = Settings()

app = Celery("workers")
app.conf.update(settings.celery_config())
app.conf.beat_schedule_filename = str(settings.home / "celerybeat-schedule")

store = settings.make_store()
queue = TaskQueue(
    store,
    app,
    lease=settings.lease,
    heartbeat_interval=settings.heartbeat_interval,
    max_attempts=settings.max_attempts,
    terminate_on_cancel=settings.terminate_on_cancel,
    dispatch_grace=settings.dispatch_grace,
    redispatch_after=settings.redispatch_after,
)
queue.install_beat_schedule(
    janitor_ttl=settings.janitor_ttl,
    janitor_interval=settings.janitor_interval,
    janitor_batch_size=settings.janitor_batch_size,
    reaper_interval=settings.reaper_interval,
    dispatch_interval=settings.dispatch_interval,
)

from workers import jobs  # noqa: E402, F401 - registers the example jobs on the app

__all__ = ["app", "queue", "settings", "store"]
