"""The job registry: each Celery app has its own jobs, whatever its ``id``."""

from __future__ import annotations

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, TaskContext, TaskQueue, job
from queuestore.run import jobs as registry


def _app(name: str) -> Celery:
    app = Celery(name, set_as_current=False)
    TaskQueue(InMemoryTaskStore(), app)
    return app


def test_an_app_never_sees_the_jobs_of_another_app_with_the_same_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython reuses the id of a collected object: make every app's id collide at once.
    monkeypatch.setattr(registry, "id", lambda _: 1, raising=False)
    first, second = _app("first"), _app("second")

    @job(first, name="reports.build")
    def build(ctx: TaskContext) -> None:
        return None

    assert registry.registered_job(first, "reports.build") is not None
    assert registry.registered_job(second, "reports.build") is None
