"""The Celery message of a queuestore job: its task id, as the Celery id and only argument.

A job's message carries nothing but the id of the task to run (the input is
read from the store): the publisher writes it so (:func:`job_message`), and the
worker's message hold and the log fields tell a job's message from any other
Celery task's by it (:func:`is_job_request`), the janitor, the reaper and the
sweep included.
"""

from __future__ import annotations

from typing import Any


def job_message(task_id: str) -> dict[str, Any]:
    """The ``send_task`` arguments that make the message of ``task_id``'s job."""
    return {"args": (task_id,), "task_id": task_id}


def is_job_request(request: Any) -> bool:
    """Whether a Celery request (or a task's ``request``) is the message of a job."""
    return request.id is not None and list(request.args or ()) == [request.id]
