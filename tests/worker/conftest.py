"""Fixtures of the worker tests: a Celery app with a recorder for a broker, and its queue.

The tests of this folder check the Celery layer's rules in process, on the in-memory
store. They call the worker's ``execute`` directly (no broker round trip) so each
rule of a run -- claim, outcome, fencing, input, cancel -- is checked on its
own; tests/integration runs the same flow through real worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import Celery

from queuestore import InMemoryTaskStore, TaskQueue

from .support import Published


@pytest.fixture
def app() -> Celery:
    return Celery("test_worker", broker="memory://", set_as_current=False)


@pytest.fixture
def published(app: Celery, monkeypatch: pytest.MonkeyPatch) -> Published:
    return Published.on(app, monkeypatch)


@pytest.fixture
def queue(app: Celery, published: Published) -> Iterator[TaskQueue]:
    return TaskQueue(
        InMemoryTaskStore(),
        app,
        lease=timedelta(seconds=5),
        heartbeat_interval=timedelta(seconds=0.05),
    )
