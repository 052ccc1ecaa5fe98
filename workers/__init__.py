"""A ready Celery app for queuestore, configured from ``QUEUESTORE_*`` variables.

    celery -A workers worker --loglevel=INFO
    celery -A workers beat --loglevel=INFO

With nothing configured it uses the embedded default: an SQLite file and
Celery's filesystem broker under ``.queuestore/``.
"""

from celery import Celery

from queuestore import Settings

settings = Settings()
app = settings.configure(Celery("workers"))
store = settings.make_store()
queue = settings.make_queue(app, store)

from workers import jobs  # noqa: E402, F401 - registers the example jobs on the app

__all__ = ["app", "queue", "settings", "store"]
