"""Traces across real processes: a task's spans form one trace whoever makes them.

The caller (this process, the SDK's in-memory exporter) submits; a worker
process starts the run and is killed (SIGKILL); beat's reaper gives the lost
run another one; a second worker runs it to the end; a deliverer sends the
callback. The workers and beat record their spans to a file (the SDK's
console exporter). Every span is in the trace of the submit, and each run
continues the message that started it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queuestore import CallbackRequest, Deliverer, TaskStatus
from queuestore.core import tracing
from tests.integration.harness import PUSH, DeploymentFactory, Receiver, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """This process's finished spans (its global tracer provider is left alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def recorded(path: Path) -> list[dict[str, Any]]:
    """The spans the other processes wrote, as the SDK's JSON."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_submit_runs_a_reaper_rerun_and_a_delivery_are_one_trace(
    deployment: DeploymentFactory,
    receiver: Callable[..., Receiver],
    spans: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    file = tmp_path / "spans.jsonl"
    stack = deployment(
        "redis",
        "postgres",
        QUEUESTORE_TEST_SPANS=str(file),
        QUEUESTORE_CALLBACK_ALLOW_NETWORKS=PUSH["QUEUESTORE_CALLBACK_ALLOW_NETWORKS"],
    )
    hook = receiver()
    first = stack.start_worker(concurrency=1)
    stack.start_beat()
    task = stack.queue.submit(
        "tests.sleep",
        {"seconds": 0.2, "first_attempt_seconds": 60},
        callback=CallbackRequest(url=hook.url),
    )
    wait_for(lambda: stack.records_of(task.id), timeout=30, what="the first run", logs=[first])
    first.kill()
    stack.start_worker(concurrency=1)
    done = stack.wait_status(task.id, TaskStatus.COMPLETED)
    deliverer = Deliverer(stack.queue.store)
    wait_for(
        lambda: deliverer.run_once() or hook.events(),
        timeout=30,
        what="the callback's delivery",
        logs=stack.processes,
    )

    mine = {span.name: span for span in spans.get_finished_spans()}
    submit, deliver = mine["queuestore.submit"], mine["queuestore.deliver"]
    trace_id = f"0x{submit.context.trace_id:032x}"
    root = f"0x{submit.context.span_id:016x}"
    theirs = wait_for(
        lambda: (
            (found := recorded(file))
            and any(s["name"] == "queuestore.reap" for s in found)
            and found
        ),
        timeout=10,
        what="the other processes' spans",
    )
    assert done.attempt == 2
    assert {span["context"]["trace_id"] for span in theirs} == {trace_id}
    assert {f"0x{span.context.trace_id:032x}" for span in spans.get_finished_spans()} == {trace_id}
    assert deliver.parent is not None
    assert f"0x{deliver.parent.span_id:016x}" == root
    (reap,) = [span for span in theirs if span["name"] == "queuestore.reap"]
    assert reap["parent_id"] == root
    assert reap["attributes"]["queuestore.lost_runs"] == 1
    # The run that ended is the one the reaper's message started.
    runs = [span for span in theirs if span["name"] == "queuestore.run"]
    (rerun,) = [span for span in runs if span["attributes"].get("queuestore.attempt") == 2]
    # A redelivery of the first message (its worker died holding it) claims nothing.
    assert all("queuestore.attempt" not in span["attributes"] for span in runs if span != rerun)
    (republished,) = [span for span in theirs if span["context"]["span_id"] == rerun["parent_id"]]
    assert (republished["name"], republished["parent_id"]) == ("queuestore.publish", root)
    # The killed run left its claim (its own span never ended), in the same trace.
    claims = [span for span in theirs if span["name"] == "queuestore.claim"]
    assert len(claims) >= 2
    assert {span["name"] for span in theirs} >= {"queuestore.write", "queuestore.publish"}
