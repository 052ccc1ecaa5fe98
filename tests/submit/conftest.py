"""Fixtures of the callers' verbs' tests: the queue of the test's app, on the in-memory store.

In process, with the broker replaced by a recorder (tests/integration runs the
same through real workers and brokers).
"""

from __future__ import annotations

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, TaskQueue
from tests.celery_support import Published


@pytest.fixture
def queue(app: Celery, published: Published) -> TaskQueue:
    """The queue on its defaults (``schedule_ahead`` 12 s), publishing to the recorder."""
    return TaskQueue(InMemoryTaskStore(), app)
