"""Fixtures of the queue's tests: a Celery app with a recorder for a broker, and its queue.

In process on the in-memory store (tests/integration runs the same through
real workers and brokers).
"""

from __future__ import annotations

import pytest
from celery import Celery
from worker.support import Published

from queuestore import InMemoryTaskStore, TaskQueue


@pytest.fixture
def app() -> Celery:
    return Celery("test_queue_features", broker="memory://", set_as_current=False)


@pytest.fixture
def published(app: Celery, monkeypatch: pytest.MonkeyPatch) -> Published:
    return Published.on(app, monkeypatch)


@pytest.fixture
def queue(app: Celery, published: Published) -> TaskQueue:
    """The queue on its defaults (``schedule_ahead`` 12 s), publishing to the recorder."""
    return TaskQueue(InMemoryTaskStore(), app)
