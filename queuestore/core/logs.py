"""Log lines about tasks: each one carries the task's id and job, as text or as JSON.

A run sets its task in :func:`task_context` (``@job`` does it around every
run), and :class:`TaskFields`, a filter on the handlers, stamps every record
written meanwhile on that thread with ``task_id`` and ``job``. Records written
elsewhere about a task (the reaper, the heartbeat thread) pass ``extra=about(task)``;
Celery's own lines about a task (received, succeeded) carry the same fields,
taken from the task Celery is running or from the line's arguments.

:func:`install_celery_logging` applies this to a Celery worker's and beat's
handlers as Celery sets them up: text keeps Celery's format and appends the
task, ``json`` writes one object per line.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from queuestore.core.messages import is_job_request

LogFormat = Literal["text", "json"]

_CURRENT: ContextVar[tuple[str, str] | None] = ContextVar("queuestore_task", default=None)
_CONFIG: dict[str, str | None] = {"format": "text", "level": None}


@contextmanager
def task_context(task_id: str, job: str) -> Iterator[None]:
    """Stamp every record logged on this thread (or task) inside the block with the task."""
    token = _CURRENT.set((task_id, job))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def about(task: Any) -> dict[str, str]:
    """``extra`` for a record about ``task`` (anything with ``id`` and ``name``)."""
    return {"task_id": task.id, "job": task.name}


def _celery_task() -> tuple[str, str] | None:
    from celery._state import get_current_task

    current = get_current_task()
    # The janitor, the reaper and the sweep run as Celery tasks too, but are no task's job.
    if current is None or not is_job_request(current.request):
        return None
    return str(current.request.id), str(current.name)


class TaskFields(logging.Filter):
    """Sets ``record.task_id`` and ``record.job`` (None when the record is about no task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "task_id", None) is None or not hasattr(record, "job"):
            task = _CURRENT.get() or _from_arguments(record) or _celery_task()
            record.task_id, record.job = task if task is not None else (None, None)
        return True


def _from_arguments(record: logging.LogRecord) -> tuple[str, str] | None:
    """Celery's lines about a task pass it as a mapping with ``id`` and ``name``."""
    for source in (getattr(record, "data", None), record.args):
        if isinstance(source, Mapping) and "id" in source and "name" in source:
            return str(source["id"]), str(source["name"])
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, process, message, task_id, job."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "message": record.getMessage(),
            "task_id": getattr(record, "task_id", None),
            "job": getattr(record, "job", None),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """Another formatter's line, with `` [task <id> <job>]`` appended when about a task."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        task_id = getattr(record, "task_id", None)
        if task_id is None or task_id in text:
            return text
        first, newline, rest = text.partition("\n")  # after the message, before a traceback
        return f"{first} [task {task_id} {getattr(record, 'job', None)}]{newline}{rest}"


def formatter(log_format: LogFormat, inner: logging.Formatter | None = None) -> logging.Formatter:
    """The formatter of ``log_format``; text wraps ``inner`` (the handler's own)."""
    if log_format == "json":
        return JsonFormatter()
    if isinstance(inner, TextFormatter):
        return inner
    return TextFormatter(inner)


def apply(logger: logging.Logger, log_format: LogFormat, level: str | None = None) -> None:
    """Give every handler of ``logger`` the task fields and ``log_format``; set ``level``."""
    for handler in logger.handlers:
        if not any(isinstance(existing, TaskFields) for existing in handler.filters):
            handler.addFilter(TaskFields())
        handler.setFormatter(formatter(log_format, handler.formatter))
    if level is not None:
        logger.setLevel(level)


def setup(log_format: LogFormat, level: str | None = None) -> None:
    """Log to stderr as ``log_format`` in a process that is not a Celery worker."""
    logging.basicConfig(level=level or logging.WARNING)
    apply(logging.getLogger(), log_format, level)


def install_celery_logging(log_format: LogFormat, level: str | None) -> None:
    """Make Celery's worker and beat logs carry the task and use ``log_format``.

    The last call in a process wins; it takes effect when Celery sets up its
    logging (worker or beat start).
    """
    from celery.signals import after_setup_logger, after_setup_task_logger

    _CONFIG.update(format=log_format, level=level)
    after_setup_logger.connect(_celery_logger_ready, weak=False, dispatch_uid=__name__)
    after_setup_task_logger.connect(_celery_logger_ready, weak=False, dispatch_uid=f"{__name__}.t")


def _celery_logger_ready(logger: logging.Logger, **_: Any) -> None:
    log_format: LogFormat = "json" if _CONFIG["format"] == "json" else "text"
    apply(logger, log_format, _CONFIG["level"])
    if log_format == "json":
        logging.captureWarnings(True)  # warnings become JSON lines too, not raw stderr


class _NoRevokeBookkeepingWithoutBackend(logging.Filter):
    """Drops Celery's warning that a revoke could not be stored without a result backend.

    Since Celery 5.6 every worker that receives a revoke broadcast records it in
    the result backend (celery/celery#9869); with results disabled, as queuestore
    runs Celery, each cancel then logs a warning on every worker. The store is
    where a cancel is recorded, so that one warning (NotImplementedError from the
    disabled backend) is dropped; a real backend's failures are still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (
            record.msg == "Failed to mark task %s as revoked in backend: %s"
            and len(args) == 2
            and isinstance(args[1], NotImplementedError)
        )


_REVOKE_FILTER = _NoRevokeBookkeepingWithoutBackend()


class _CeleryLinesAtDebug(logging.Filter):
    """Lowers to DEBUG Celery's INFO lines that would say more than happened.

    Celery logs every task it sends from beat, receives and finishes at INFO.
    For the janitor, the reaper and the sweep that is several lines each
    interval, mostly about nothing: their own lines say at INFO what they did,
    when they did something. A run that claimed nothing (a refused claim: a
    duplicate message, a task at its concurrency limit) is not a task that
    "succeeded": its own line says what became of it. Lowered lines are
    written only where DEBUG is on.
    """

    _KEPT = 1000
    """How many refused requests wait for Celery's line at most (a run may end without one)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.refused: OrderedDict[str, None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._lowered(record):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True

    def _lowered(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return False
        args = record.args
        if isinstance(args, Mapping):  # the worker's received and succeeded lines
            if args.get("name") in self.names:
                return True
            if "return_value" in args and args.get("id") in self.refused:
                del self.refused[str(args["id"])]
                return True
            return False
        # beat's "Scheduler: Sending due task <entry> (<task>)"
        return isinstance(args, tuple) and len(args) == 2 and args[1] in self.names

    def refuse(self, request_id: str) -> None:
        self.refused[request_id] = None
        while len(self.refused) > self._KEPT:
            self.refused.popitem(last=False)


_CELERY_LINES = _CeleryLinesAtDebug()
_CELERY_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


def quiet_celery_lines_of(*task_names: str) -> None:
    """Log Celery's own lines about these tasks (sent, received, succeeded) at DEBUG.

    For tasks that say themselves at INFO what they did, when they did
    something (the janitor, the reaper, the sweep).
    """
    _CELERY_LINES.names.update(task_names)
    for name in _CELERY_LOGGERS:
        logging.getLogger(name).addFilter(_CELERY_LINES)  # a repeat is ignored


def ran_nothing(request_id: str) -> None:
    """Log Celery's coming "succeeded" line of this request at DEBUG: no run took place."""
    _CELERY_LINES.refuse(request_id)
    logging.getLogger("celery.app.trace").addFilter(_CELERY_LINES)


def quiet_revoke_bookkeeping() -> None:
    """Drop Celery's per-cancel warning about revokes it cannot store without a backend."""
    logging.getLogger("celery.worker.control").addFilter(_REVOKE_FILTER)  # a repeat is ignored
