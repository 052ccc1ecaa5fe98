"""Traces (extra ``otel``): one trace from a task's submit through each run to its end.

With a tracer provider set, the submit's context is kept in the task, each
message carries it in its ``traceparent`` header, and a run continues the
message's context (or, without one, the task's): claim, job and outcome write
in a ``queuestore.run`` span, a retry's message and run in the same trace.
With none set, nothing is traced: no context is kept and no header is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import Celery
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuestore import Retry, TaskContext, TaskQueue, TaskStatus
from queuestore.core import tracing
from queuestore.run.jobs import execute, job
from tests.celery_support import Published


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """This test's finished spans (the process's tracer provider is left alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_a_task_is_one_trace_from_submit_through_a_retry_to_its_end(
    app: Celery, queue: TaskQueue, published: Published, spans: InMemorySpanExporter
) -> None:
    @job(app, name="test.flaky", retry=Retry(max_runs=2, backoff=timedelta(0), on=(OSError,)))
    def flaky(ctx: TaskContext) -> str:
        if ctx.attempt == 1:
            raise OSError("upstream down")
        return "done"

    task = queue.submit("test.flaky", owner="alice")
    first = published.messages[-1]
    execute(queue.publisher, flaky, task.id, parent=first["headers"]["traceparent"])
    second = published.messages[-1]
    done = execute(queue.publisher, flaky, task.id, parent=second["headers"]["traceparent"])

    assert done is not None
    assert done.status is TaskStatus.COMPLETED
    (submit,) = named(spans, "queuestore.submit")
    publishes = named(spans, "queuestore.publish")
    runs = named(spans, "queuestore.run")
    assert len(publishes) == len(runs) == 2
    assert {span.context.trace_id for span in spans.get_finished_spans()} == {
        submit.context.trace_id
    }
    assert task.traceparent is not None
    assert task.traceparent.startswith(
        f"00-{submit.context.trace_id:032x}-{submit.context.span_id:016x}-"
    )
    assert [parent_of(span) for span in publishes] == [submit.context.span_id] * 2
    assert [parent_of(run) for run in runs] == [p.context.span_id for p in publishes]
    assert [run.attributes["queuestore.attempt"] for run in runs] == [1, 2]  # type: ignore[index]
    assert {run.attributes["queuestore.task_id"] for run in runs} == {task.id}  # type: ignore[index]
    for name in ("queuestore.claim", "queuestore.write"):
        assert [parent_of(span) for span in named(spans, name)] == [
            run.context.span_id for run in runs
        ]


def test_a_message_without_a_context_runs_in_the_trace_the_task_keeps(
    app: Celery, queue: TaskQueue, spans: InMemorySpanExporter
) -> None:
    @job(app, name="test.ok")
    def ok(ctx: TaskContext) -> int:
        return 1

    task = queue.submit("test.ok")
    execute(queue.publisher, ok, task.id)  # published by a process that traced nothing

    (submit,) = named(spans, "queuestore.submit")
    (run,) = named(spans, "queuestore.run")
    assert parent_of(run) == submit.context.span_id


def test_without_a_tracer_provider_nothing_is_traced(
    app: Celery, queue: TaskQueue, published: Published
) -> None:
    @job(app, name="test.ok")
    def ok(ctx: TaskContext) -> int:
        return 1

    task = queue.submit("test.ok")
    execute(queue.publisher, ok, task.id)

    assert not tracing.enabled()
    assert task.traceparent is None
    assert "headers" not in published.messages[-1]
