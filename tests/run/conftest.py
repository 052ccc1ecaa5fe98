"""Fixtures of the run side's tests: the queue of the test's app, on the in-memory store.

The tests of this folder check the run side's rules in process. They call the
worker's ``execute`` directly (no broker round trip) so each rule of a run --
claim, outcome, fencing, input, cancel -- is checked on its own;
tests/integration runs the same flow through real worker processes.
"""

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
