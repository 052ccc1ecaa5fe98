"""Helpers the worker tests share: a broker stand-in, job registration, polling."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from queuestore import TaskQueue, job
from queuestore.run.jobs import Job

T = TypeVar("T")


class Published:
    """Records what the queue publishes and revokes instead of talking to a broker."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.revoked: list[tuple[str, dict[str, Any]]] = []
        self.broker_down = False

    def send_task(self, name: str, **options: Any) -> None:
        if self.broker_down:
            raise OperationalError("connection refused")
        self.messages.append({"name": name, **options})

    def revoke(self, task_id: str, **options: Any) -> None:
        self.revoked.append((task_id, options))

    @classmethod
    def on(cls, app: Celery, monkeypatch: pytest.MonkeyPatch) -> Published:
        """A record that stands in for ``app``'s publishes and revokes for one test."""
        record = cls()
        monkeypatch.setattr(app, "send_task", record.send_task)
        monkeypatch.setattr(app.control, "revoke", record.revoke)
        return record


def register(app: Celery, function: Any, name: str = "test.job") -> Job:
    return job(app, name=name)(function)


def eventually(condition: Callable[[], T], timeout: float = 5.0) -> T:
    """Poll ``condition`` until it returns something truthy, or return its last value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def reconfigure(queue: TaskQueue, **changes: Any) -> None:
    """Change ``queue``'s options for the rest of a test (its runs read them as they start)."""
    queue.publisher.options = dataclasses.replace(queue.publisher.options, **changes)
