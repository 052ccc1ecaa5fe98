"""Between queuestore's :class:`~queuestore.Task` and A2A's protobuf ``Task``: one mapping.

A queuestore row is the record; the A2A task is a view of it, built fresh on
every read. What A2A has and queuestore does not (the message history, the
full status message, the task's own metadata) rides in the row's ``metadata``
under :data:`ENVELOPE`; what queuestore has and A2A does not becomes A2A's
closest field:

- ``status`` maps one to one (``cancelled`` is ``TASK_STATE_CANCELED``);
  ``updated_at`` is the status timestamp.
- ``status_message`` is the text of the status message (an agent message);
  ``progress`` rides in that message's metadata as ``progress``.
- a job's ``result`` is the artifact ``result`` of a completed task (text for
  a string, data otherwise), its ``error`` the text of a failed task's message.
- artifact parts are stored as the proto JSON of a ``Part`` (``{"text": ...}``,
  ``{"data": ...}``, ``{"url": ...}``, ``{"raw": ...}``); a job's plain string
  part reads as text and any other JSON value as data.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, cast

from a2a.types import Artifact as A2AArtifact
from a2a.types import Message, Part, Role, TaskState, TaskStatus
from a2a.types import Task as A2ATask
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.struct_pb2 import Value
from pydantic import JsonValue

from queuestore.core.models import Artifact, Task
from queuestore.core.models import TaskStatus as Status

ENVELOPE: Final = "a2a"
"""The key of a row's ``metadata`` that holds what only A2A has: ``history`` and
``status_message`` (messages, each its protobuf encoding in base64) and the
task's own ``metadata`` (JSON)."""

RESULT_ARTIFACT: Final = "result"
"""The id of the artifact that carries a completed job's return value."""

STATES: Final[dict[Status, TaskState]] = {
    Status.SUBMITTED: TaskState.TASK_STATE_SUBMITTED,
    Status.WORKING: TaskState.TASK_STATE_WORKING,
    Status.INPUT_REQUIRED: TaskState.TASK_STATE_INPUT_REQUIRED,
    Status.AUTH_REQUIRED: TaskState.TASK_STATE_AUTH_REQUIRED,
    Status.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    Status.FAILED: TaskState.TASK_STATE_FAILED,
    Status.CANCELLED: TaskState.TASK_STATE_CANCELED,
    Status.REJECTED: TaskState.TASK_STATE_REJECTED,
}
"""queuestore status -> A2A state; a bijection on the states that mean something."""

STATUSES: Final[dict[TaskState, Status]] = {state: status for status, state in STATES.items()}

_CONTENT_KEYS: Final = frozenset({"text", "raw", "url", "data"})
_PART_KEYS: Final = _CONTENT_KEYS | {"metadata", "filename", "mediaType"}


def status_of(state: TaskState) -> Status:
    """The queuestore status of an A2A state.

    Raises:
        ValueError: ``TASK_STATE_UNSPECIFIED`` or an unknown number.
    """
    try:
        return STATUSES[state]
    except KeyError:
        raise ValueError(f"task state {state} has no queuestore status") from None


def timestamp_ns(moment: datetime) -> int:
    """Nanoseconds since the epoch of an aware datetime, exactly (microsecond precision)."""
    epoch = datetime(1970, 1, 1, tzinfo=moment.tzinfo)
    delta = moment - epoch
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


# -- parts and artifacts ------------------------------------------------------


def part_to_json(part: Part) -> dict[str, Any]:
    """A part as stored in a queuestore artifact: its proto JSON."""
    return cast(dict[str, Any], MessageToDict(part))


def part_from_json(value: JsonValue) -> Part:
    """A stored part back as a ``Part``: proto JSON as is, a string as text, else data."""
    if isinstance(value, str):
        return Part(text=value)
    if (
        isinstance(value, dict)
        and value.keys() <= _PART_KEYS
        and len(value.keys() & _CONTENT_KEYS) == 1
    ):
        try:
            return cast(Part, ParseDict(value, Part()))
        except ParseError:
            pass
    return Part(data=_value(value))


def _value(value: JsonValue) -> Value:
    proto = Value()
    ParseDict(value, proto)
    return proto


def artifact_to_queuestore(artifact: A2AArtifact) -> Artifact:
    """An A2A artifact as a queuestore one; description and extensions ride in metadata."""
    metadata: dict[str, JsonValue] = {}
    if artifact.HasField("metadata"):
        metadata["metadata"] = MessageToDict(artifact.metadata)
    if artifact.description:
        metadata["description"] = artifact.description
    if artifact.extensions:
        metadata["extensions"] = list(artifact.extensions)
    return Artifact(
        artifact_id=artifact.artifact_id,
        name=artifact.name or None,
        parts=[part_to_json(part) for part in artifact.parts],
        metadata=metadata,
    )


def artifact_to_a2a(artifact: Artifact) -> A2AArtifact:
    """A queuestore artifact as A2A's (see :func:`artifact_to_queuestore`)."""
    proto = A2AArtifact(
        artifact_id=artifact.artifact_id,
        name=artifact.name or "",
        parts=[part_from_json(part) for part in artifact.parts],
    )
    described = artifact.metadata.get("description")
    if isinstance(described, str):
        proto.description = described
    extensions = artifact.metadata.get("extensions")
    if isinstance(extensions, list):
        proto.extensions.extend(str(item) for item in extensions)
    own = artifact.metadata.get("metadata")
    if isinstance(own, dict):  # written from an A2A artifact
        extra = own
    else:  # a job's artifact: its metadata and media type
        extra = {
            key: value
            for key, value in artifact.metadata.items()
            if key not in ("description", "extensions")
        }
        if artifact.media_type is not None:
            extra["mediaType"] = artifact.media_type
    if extra:
        ParseDict(extra, proto.metadata)
    return proto


def result_artifact(result: JsonValue) -> A2AArtifact:
    """The artifact that carries a completed job's return value."""
    part = Part(text=result) if isinstance(result, str) else Part(data=_value(result))
    return A2AArtifact(artifact_id=RESULT_ARTIFACT, name=RESULT_ARTIFACT, parts=[part])


def artifacts_of(task: Task) -> list[A2AArtifact]:
    """Every artifact of the A2A view of ``task``, the job's result last."""
    artifacts = [artifact_to_a2a(artifact) for artifact in task.artifacts]
    if (
        task.status is Status.COMPLETED
        and task.result is not None
        and all(artifact.artifact_id != RESULT_ARTIFACT for artifact in task.artifacts)
    ):
        artifacts.append(result_artifact(task.result))
    return artifacts


# -- messages and status ------------------------------------------------------


def text_of(message: Message) -> str | None:
    """The text parts of a message, joined by newlines; None when it has none."""
    texts = [part.text for part in message.parts if part.WhichOneof("content") == "text"]
    return "\n".join(texts) if texts else None


def a2a_status_text(task: A2ATask) -> str | None:
    """The text of an A2A task's status message, if it has one."""
    return text_of(task.status.message) if task.status.HasField("message") else None


def message_to_stored(message: Message) -> str:
    """A message as the envelope keeps it: its protobuf encoding, in url-safe base64.

    The binary form parses in C, many times faster than proto JSON, which is
    what keeps listing a page of tasks with their histories cheap.
    """
    return base64.urlsafe_b64encode(message.SerializeToString(deterministic=True)).decode()


def message_from_stored(value: str) -> Message:
    """A message the envelope keeps, back as a ``Message``."""
    return cast(Message, Message.FromString(base64.urlsafe_b64decode(value)))


def status_text(task: Task) -> str | None:
    """What the status message of ``task`` says: the job's message, or why it failed."""
    if task.status_message is not None:
        return task.status_message
    if task.status is Status.FAILED and task.error is not None:
        return f"{task.error.type}: {task.error.message}" if task.error.message else task.error.type
    return None


def status_message_id(task: Task) -> str:
    """The id of the status message made from a version of ``task`` (its id and version)."""
    return f"{task.id}-{task.version}"


def is_status_message(message: Message, task_id: str) -> bool:
    """Whether ``message`` is a status message made for a version of ``task_id``.

    The SDK moves the previous status message into the history on every status
    update; such a message is a report of the job (progress, a status text), not
    part of the conversation.
    """
    prefix = f"{task_id}-"
    return (
        message.role == Role.ROLE_AGENT
        and message.message_id.startswith(prefix)
        and message.message_id[len(prefix) :].isdigit()
    )


def status_of_task(task: Task) -> TaskStatus:
    """The A2A status of ``task``: state, timestamp, and the message.

    The envelope's message is used while its text is the row's status message
    (it keeps the message id, role and parts the SDK wrote); otherwise the
    message is the agent's, made from the row's text and progress.
    """
    status = TaskStatus(state=STATES[task.status])
    status.timestamp.FromDatetime(task.updated_at)
    text = status_text(task)
    stored = envelope_of(task).get("status_message")
    if isinstance(stored, str):
        message = message_from_stored(stored)
        if text_of(message) == text:
            status.message.CopyFrom(message)
            return status
    if text is None and task.progress is None:
        return status
    message = Message(
        message_id=status_message_id(task),
        role=Role.ROLE_AGENT,
        task_id=task.id,
        context_id=task.context_id or "",
    )
    if text is not None:
        message.parts.append(Part(text=text))
    if task.progress is not None:
        message.metadata.update({"progress": task.progress})
    status.message.CopyFrom(message)
    return status


# -- envelope and task --------------------------------------------------------


def envelope_of(task: Task) -> dict[str, Any]:
    """What only A2A has of ``task``: ``history``, ``metadata``, ``status_message``."""
    envelope = task.metadata.get(ENVELOPE)
    return envelope if isinstance(envelope, dict) else {}


def envelope_content(
    history: Iterable[Message], metadata: Mapping[str, Any], status_message: Message | None
) -> dict[str, Any]:
    """What the envelope holds of an A2A task's history, metadata and status message."""
    content: dict[str, Any] = {"history": [message_to_stored(item) for item in history]}
    if metadata:
        content["metadata"] = dict(metadata)
    if status_message is not None:
        content["status_message"] = message_to_stored(status_message)
    return content


def content_for(task: A2ATask) -> dict[str, Any]:
    """The envelope's content for an A2A task (see :func:`envelope_content`)."""
    metadata = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    message = task.status.message if task.status.HasField("message") else None
    return envelope_content(task.history, metadata, message)


def envelope_for(task: A2ATask) -> dict[str, JsonValue]:
    """The row metadata that keeps an A2A task's history, metadata and status message."""
    return {ENVELOPE: content_for(task)}


def to_a2a(
    task: Task, *, history_length: int | None = None, include_artifacts: bool = True
) -> A2ATask:
    """A fresh A2A view of ``task``.

    Args:
        history_length: keep only this many of the latest messages (all when None).
        include_artifacts: leave the artifacts out when False, without building them.
    """
    content = envelope_of(task)
    proto = A2ATask(id=task.id, context_id=task.context_id or "", status=status_of_task(task))
    history = content.get("history")
    if isinstance(history, list) and history_length != 0:
        kept = history if history_length is None else history[-history_length:]
        proto.history.extend(message_from_stored(item) for item in kept if isinstance(item, str))
    metadata = content.get("metadata")
    if isinstance(metadata, dict) and metadata:
        proto.metadata.update(metadata)
    if include_artifacts:
        proto.artifacts.extend(artifacts_of(task))
    return proto


__all__ = [
    "ENVELOPE",
    "RESULT_ARTIFACT",
    "STATES",
    "STATUSES",
    "artifact_to_a2a",
    "artifact_to_queuestore",
    "artifacts_of",
    "content_for",
    "envelope_content",
    "envelope_for",
    "envelope_of",
    "is_status_message",
    "message_from_stored",
    "message_to_stored",
    "part_from_json",
    "part_to_json",
    "result_artifact",
    "status_message_id",
    "status_of",
    "status_of_task",
    "text_of",
    "timestamp_ns",
    "to_a2a",
]
