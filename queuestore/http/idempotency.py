"""``Idempotency-Key``: a retried create returns the task the first attempt created.

The key does not need a table of its own: the task's id is derived from the
caller's principal and the key, so the store's unique id does the rest. An
anonymous caller's task is readable by its id alone, so its id is an HMAC of
the key under the server's secret: knowing the key does not give the id. Of
several concurrent attempts exactly one inserts; the others find its task and
return it. A key reused with a different request is refused, as the IETF
draft (draft-ietf-httpapi-idempotency-key-header) asks. A key is remembered
as long as its task is: once the task is deleted, the key is free again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import timedelta
from typing import Final

from queuestore.core.callbacks import DEFAULT_CALLBACK_ID, Callback
from queuestore.core.models import Task
from queuestore.http.problems import ProblemError
from queuestore.http.schemas import CreateCallback, CreateTask

HEADER: Final = "Idempotency-Key"
MAX_KEY_LENGTH: Final = 255
KEY_PATTERN: Final = r"^[!-~]([ -~]*[!-~])?$"
"""Printable ASCII, no space at either end (HTTP strips them from a header's value)."""


def task_id_for(owner: str | None, key: str, *, secret: bytes) -> str:
    """The id of the task created by ``owner`` with ``key``: 16 bytes of a SHA-256.

    The principal is part of the digest, so two callers using the same key
    get two tasks, and neither can learn anything about the other's (another
    owner's task is not found). An anonymous caller's id is an HMAC-SHA256
    under ``secret``, since anyone may read an anonymous task by its id.

    Raises:
        ProblemError: 400 for an empty, too long or non-printable key.
    """
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise ProblemError(
            400,
            "invalid-idempotency-key",
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable characters",
        )
    if owner is None:
        material = "\0".join(("queuestore.http idempotency v2", "-", key)).encode()
        digest = hmac.new(secret, material, hashlib.sha256).digest()[:16]
    else:
        material = "\0".join(("queuestore.http idempotency v1", "=" + owner, key)).encode()
        digest = hashlib.sha256(material).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def check_replay(task: Task, request: CreateTask) -> None:
    """Refuse a key reused for a different task than the one it created.

    Raises:
        ProblemError: 422 when the stored task does not match ``request``.
    """
    if not is_replay(task, request):
        raise ProblemError(
            422,
            "idempotency-key-reused",
            f"this {HEADER} was used for a different request",
            task_id=task.id,
        )


def is_replay(task: Task, request: CreateTask) -> bool:
    """Whether ``request`` asks for ``task``, the task its key created: a retry of it."""
    return (
        task.name == request.name
        and task.input == request.input
        and task.context_id == request.context_id
        and task.metadata == request.metadata
        and _same_ttl(task.ttl, request.ttl)
        and _same_start(task, request)
        and task.unique_key == request.unique_key
        and task.priority == request.priority
        and task.start_by == request.start_by
        and task.deadline_at == request.deadline
        and _same_ttl(task.run_timeout, request.timeout)
    )


def check_callback_replay(
    task: Task, callbacks: list[Callback], asked: CreateCallback | None
) -> None:
    """Refuse a key reused with another callback than the one its create registered.

    ``callbacks`` are the task's. A create registers its callback after the
    task's row, so a concurrent retry may find the task without it yet: a
    retry asking for a callback the task lacks is taken as a replay. One
    asking for another URL or events, or for none where the task has one, is
    refused.

    Raises:
        ProblemError: 422 ``idempotency-key-reused``.
    """
    registered = next((c for c in callbacks if c.id == DEFAULT_CALLBACK_ID), None)
    if registered is None:
        return
    if asked is None or (registered.url, registered.events) != (asked.url, asked.events):
        raise ProblemError(
            422,
            "idempotency-key-reused",
            f"this {HEADER} was used for a request with another callback",
            task_id=task.id,
        )


def _same_ttl(stored: timedelta | None, asked: float | None) -> bool:
    if stored is None or asked is None:
        return stored is None and asked is None
    # timedelta keeps microseconds: compare at that precision.
    return abs(stored.total_seconds() - asked) < 1e-6


def _same_start(task: Task, request: CreateTask) -> bool:
    """Whether the task's start is the one ``request`` asks for.

    A ``run_at`` must be the same instant. A ``delay`` counts from the moment
    the first attempt reached the server, which a retry cannot know; and a
    retry comes when something was slow, so the time between that moment and
    the task's ``created_at`` has no bound a tolerance could be set from: a
    ``delay`` asks only that the task was scheduled, not when. Once the job
    has started, ``run_at`` may be a retry's backoff rather than the create's
    start, so it is no longer compared.
    """
    if task.started_at is not None:
        return True
    if request.run_at is not None:
        return task.run_at == request.run_at
    return (task.run_at is not None) == (request.delay is not None)
