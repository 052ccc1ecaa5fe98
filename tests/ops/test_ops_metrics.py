"""Prometheus metrics: a real worker's endpoint checked against the store, and the ASGI app."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from queuestore import Settings, SqlTaskStore, TaskStatus
from queuestore.metrics.prometheus import metrics_app
from tests.ops.ops_support import Ops, wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return parse(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_worker_counts_match_what_it_ran(ops: Ops) -> None:
    queue = ops.deployment.queue
    before = scrape(ops.metrics_port)
    steps = [queue.submit("ops.steps", {"count": 1, "pause": 0.0}) for _ in range(3)]
    boom = queue.submit("ops.boom")
    for task in steps:
        ops.deployment.wait_status(task.id, TaskStatus.COMPLETED)
    ops.deployment.wait_status(boom.id, TaskStatus.FAILED)

    def counted() -> Samples | None:
        # The prefork child counts after its last write; give the scrape a moment.
        after = scrape(ops.metrics_port)
        done = delta(after, before, "queuestore_job_duration_seconds_count", job="ops.boom")
        return after if done == 1 else None

    after = wait_for(counted, timeout=10, what="the runs to be counted", logs=[ops.worker])
    transitions = "queuestore_task_transitions_total"
    assert delta(after, before, transitions, job="ops.steps", status="working") == 3
    assert delta(after, before, transitions, job="ops.steps", status="completed") == 3
    assert delta(after, before, transitions, job="ops.boom", status="failed") == 1
    assert delta(after, before, "queuestore_job_duration_seconds_count", job="ops.steps") == 3
    assert delta(after, before, "queuestore_start_delay_seconds_count", job="ops.steps") == 3
    lag = delta(after, before, "queuestore_start_delay_seconds_sum", job="ops.steps")
    assert 0 < lag < 3 * 30


def test_tasks_by_status_and_backlog_are_read_from_the_store_at_scrape(ops: Ops) -> None:
    store, grace = ops.deployment.queue.store, ops.deployment.queue.options.publish_grace
    store.create("ops.parked")  # never published: in the backlog once older than the grace

    def agrees() -> bool:
        counts, backlog = store.status_counts(), store.unpublished_count(grace)
        samples = scrape(ops.metrics_port)
        again = store.status_counts(), store.unpublished_count(grace)
        if again != (counts, backlog):
            return False  # the store moved during the scrape: try again
        assert value(samples, "queuestore_store_up") == 1
        assert value(samples, "queuestore_unpublished_tasks") == backlog
        return all(
            value(samples, "queuestore_tasks", status=status.value) == count
            for status, count in counts.items()
        )

    wait_for(agrees, timeout=20, what="a scrape that matches the store", interval=0.3)


def test_reaper_retries_and_failures_are_counted_apart(ops: Ops) -> None:
    store = ops.deployment.queue.store
    before = scrape(ops.metrics_port)
    task = store.create("ops.ghost")  # no worker runs it: the test plays a worker that dies
    lease = timedelta(milliseconds=300)
    assert store.claim(task.id, "ghost:1", lease) is not None

    def retried() -> bool:
        current = store.get(task.id)
        return current.worker_id is None and current.status is TaskStatus.WORKING

    wait_for(retried, timeout=20, what="the reaper to retry the lost run", logs=[ops.worker])
    assert store.claim(task.id, "ghost:2", lease) is not None
    failed = ops.deployment.wait_status(task.id, TaskStatus.FAILED)
    assert failed.error is not None
    assert failed.error.type == "WorkerLost"

    after = scrape(ops.metrics_port)
    assert delta(after, before, "queuestore_reaper_retries_total") == 1
    assert delta(after, before, "queuestore_reaper_failures_total") == 1


def test_janitor_removals_are_counted(ops: Ops) -> None:
    store = ops.deployment.queue.store
    before = scrape(ops.metrics_port)
    task = store.cancel(store.create("ops.parked", ttl=timedelta(milliseconds=10)).id)

    def removed() -> Samples | None:
        after = scrape(ops.metrics_port)
        gone = task.id not in {t.id for t in store.iterate(status=TaskStatus.CANCELLED)}
        counted = delta(after, before, "queuestore_janitor_removed_tasks_total") >= 1
        return after if gone and counted else None

    wait_for(removed, timeout=30, what="the janitor's removal", logs=[ops.worker, ops.beat])


async def asgi_get(app: Any) -> tuple[int, dict[bytes, bytes], bytes]:
    """One ``GET /`` through an ASGI app, as a server would call it."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"api")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(message for message in sent if message["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.lower(): v for k, v in start["headers"]}, body


def test_metrics_app_serves_the_store_and_this_process(tmp_path: Path) -> None:
    store = SqlTaskStore(f"sqlite:///{tmp_path / 'metrics.db'}")
    store.migrate()
    app = metrics_app(store)
    first = store.create("asgi.job")
    store.cancel(first.id)
    store.create("asgi.job")

    status, headers, body = asyncio.run(asgi_get(app))
    store.close()
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/plain")
    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float] = parse(body.decode())
    assert value(samples, "queuestore_tasks", status="submitted") == 1
    assert value(samples, "queuestore_tasks", status="cancelled") == 1
    assert value(samples, "queuestore_tasks", status="working") == 0
    assert value(samples, "queuestore_unpublished_tasks") == 1  # the live one, never published
    transitions = "queuestore_task_transitions_total"
    assert value(samples, transitions, job="asgi.job", status="submitted") == 2
    assert value(samples, transitions, job="asgi.job", status="cancelled") == 1


def test_http_api_serves_metrics_counting_its_own_writes(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from queuestore.http import create_app

    settings = Settings(home=tmp_path, broker_url="memory://")
    with TestClient(create_app(settings)) as http:
        created = http.post("/tasks", json={"name": "api.metrics.job"})
        assert created.status_code == 201, created.text
        http.post(f"/tasks/{created.json()['id']}/cancel")
        scraped = http.get("/metrics")
    assert scraped.status_code == 200
    samples = parse(scraped.text)
    transitions = "queuestore_task_transitions_total"
    assert value(samples, transitions, job="api.metrics.job", status="submitted") == 1
    assert value(samples, transitions, job="api.metrics.job", status="cancelled") == 1
    assert value(samples, "queuestore_tasks", status="cancelled") == 1
    assert "/metrics" not in http.get("/openapi.json").json()["paths"]
