"""Fixtures of the tests of beat's maintenance: the test app's queue, on the in-memory store."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, TaskQueue
from tests.celery_support import Published


@pytest.fixture
def queue(app: Celery, published: Published) -> TaskQueue:
    """A queue with a short lease and a quick heartbeat, publishing to the recorder."""
    return TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
    )
