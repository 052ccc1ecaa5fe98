"""OpenTelemetry traces of a task's life (extra ``otel``): one trace from submit to the end.

Each task keeps the W3C trace context of the submit that created it
(``Task.traceparent``), so every later span of the task continues that trace,
whichever process makes it: a run on another host, a run after a retry or a
lost one, a webhook delivery. The spans:

- ``queuestore.submit`` (producer): ``TaskQueue.submit`` (or ``submit_many``),
  a child of the caller's current span; its context is the task's;
- ``queuestore.publish`` (producer): each message published for the task (by
  the submit, the sweep, the reaper, a retry), with the context in the
  message's ``traceparent`` header;
- ``queuestore.run`` (consumer): one run in a worker, a child of the publish
  that sent its message, with ``queuestore.claim`` and ``queuestore.write``
  (the outcome's write) in it;
- ``queuestore.reap``: the reaper retrying or failing a lost run;
- ``queuestore.deliver`` (client): one try of a callback delivery.

Every span carries ``queuestore.task_id`` and ``queuestore.job``. Traces are on
when the OpenTelemetry API is installed and the process set a tracer provider
(the SDK's: ``trace.set_tracer_provider``); otherwise each hook is one check.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

TRACER_NAME: Final = "queuestore"
HEADER: Final = "traceparent"
"""The message header (and carrier key) of the W3C trace context."""

TASK_ID: Final = "queuestore.task_id"
JOB: Final = "queuestore.job"
ATTEMPT: Final = "queuestore.attempt"


@cache
def installed() -> bool:
    """Whether the OpenTelemetry API is importable (the ``otel`` extra)."""
    return importlib.util.find_spec("opentelemetry") is not None


def tracer_provider() -> TracerProvider | None:
    """The process's tracer provider, or None while it has none that records."""
    if not installed():
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def enabled() -> bool:
    """Whether spans are made: the API is installed and a tracer provider is set."""
    return tracer_provider() is not None


@contextmanager
def span(
    name: str,
    *,
    parent: str | None = None,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span | None]:
    """A span named ``name`` while the block runs, or None when traces are off.

    Args:
        parent: a W3C ``traceparent`` to continue; None: the current context.
        kind: ``internal``, ``producer``, ``consumer``, ``client`` or ``server``.
        attributes: the span's attributes; None values are left out.

    An exception leaving the block is recorded on the span, which is marked
    an error, and raised on.
    """
    provider = tracer_provider()
    if provider is None:
        yield None
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = None if parent is None else TraceContextTextMapPropagator().extract({HEADER: parent})
    tracer = provider.get_tracer(TRACER_NAME)
    kept = {key: value for key, value in (attributes or {}).items() if value is not None}
    with tracer.start_as_current_span(
        name, context=context, kind=trace.SpanKind[kind.upper()], attributes=kept
    ) as made:
        yield made


@contextmanager
def continuing(
    name: str,
    parent: str | None,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span | None]:
    """A span named ``name`` continuing ``parent`` (a ``traceparent``); None when traces
    are off or there is no parent (a task that keeps no trace context)."""
    if parent is None or tracer_provider() is None:
        yield None
        return
    with span(name, parent=parent, kind=kind, attributes=attributes) as made:
        yield made


@contextmanager
def of_task(
    name: str, task: Any, *, kind: str = "internal", attributes: Mapping[str, Any] | None = None
) -> Iterator[Span | None]:
    """A span named ``name`` in the trace ``task`` keeps (its ``traceparent``), naming it;
    None when traces are off or the task keeps no trace context."""
    named = {TASK_ID: task.id, JOB: task.name, **(attributes or {})}
    with continuing(name, task.traceparent, kind=kind, attributes=named) as made:
        yield made


@contextmanager
def child(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Span | None]:
    """A span named ``name`` inside the current one, only while a recording span is current."""
    if tracer_provider() is None:
        yield None
        return
    from opentelemetry import trace

    if not trace.get_current_span().is_recording():
        yield None
        return
    with span(name, attributes=attributes) as made:
        yield made


def traceparent() -> str | None:
    """The current span's context as a W3C ``traceparent``; None when traces are off."""
    if tracer_provider() is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get(HEADER)


def annotate(task: Any, *, attempt: bool = False) -> None:
    """Name ``task`` (a :class:`~queuestore.core.models.Task`) on the current span, if any."""
    if tracer_provider() is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    current.set_attribute(TASK_ID, task.id)
    current.set_attribute(JOB, task.name)
    if attempt:
        current.set_attribute(ATTEMPT, task.attempt)


def header_of(request: Any) -> str | None:
    """The ``traceparent`` header of a Celery task's ``request``, if its message had one."""
    found = getattr(request, HEADER, None)
    if found is None:
        found = (getattr(request, "headers", None) or {}).get(HEADER)
    return found if isinstance(found, str) else None


def headers(parent: str | None) -> dict[str, str]:
    """The message headers that carry ``parent`` (none without one)."""
    return {} if parent is None else {HEADER: parent}


__all__ = [
    "ATTEMPT",
    "HEADER",
    "JOB",
    "TASK_ID",
    "annotate",
    "child",
    "continuing",
    "enabled",
    "header_of",
    "headers",
    "installed",
    "of_task",
    "span",
    "traceparent",
    "tracer_provider",
]
