"""The overview's numbers are the store's, after a mixed run of 1,000 tasks on a real worker.

A fresh deployment (its own database, worker and API) runs 600 tasks that
complete, 200 that fail, 100 that fail once, are retried by their policy and
fail again, and 100 that are cancelled (most before they start). Then every
number of ``GET /operator/overview`` is checked against the tasks themselves:
the counts by status now, the tasks submitted, started and ended in each
status and the retries over the hour, each job's counts, an empty backlog,
and the wait and run percentiles within a bucket of the exact ones.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from queuestore import Task, TaskStatus
from tests.http.http_deployment import Api, HttpDeployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

MIX = {"http.add": 600, "http.fail": 200, "http.flaky": 100, "http.steps": 100}
BUCKET = 2**0.25
"""How far a percentile read from the rollup's buckets may be from the exact one."""


@pytest.fixture
def fresh(make_deployment: Callable[[], HttpDeployment]) -> tuple[HttpDeployment, Api]:
    """A deployment of this test's own (stopped with the session): no other test's tasks."""
    deployment = make_deployment()
    deployment.start_worker()
    return deployment, deployment.start_api()


def submit(api: Api) -> list[dict[str, Any]]:
    items = []
    for name, count in MIX.items():
        for index in range(count):
            body: dict[str, Any] = {"name": name}
            if name == "http.add":
                body["input"] = {"a": index, "b": 1}
            elif name == "http.steps":
                body["input"] = {"count": 100, "pause": 0.2}
            items.append(body)
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        made = []
        for start in range(0, len(items), 250):
            client = alice if start % 500 == 0 else bob
            response = client.post("/tasks:batch", json={"tasks": items[start : start + 250]})
            assert response.status_code == 201, response.text
            made += response.json()["tasks"]
        for task in made:
            if task["name"] == "http.steps":
                client = alice if task["owner"] == "alice" else bob
                client.post(f"/tasks/{task['id']}/cancel", json={})
    return made


def settled(deployment: HttpDeployment, count: int) -> list[Task]:
    store = deployment.deployment.queue.store
    deadline = time.monotonic() + 240
    while True:
        tasks = list(store.iterate(limit=1000))
        if len(tasks) == count and all(task.is_terminal for task in tasks):
            return tasks
        assert time.monotonic() < deadline, Counter(task.status for task in tasks)
        time.sleep(0.5)


def exact(durations: list[float], quantile: float) -> float:
    return statistics.quantiles(durations, n=100, method="inclusive")[round(quantile * 100) - 1]


def near(read: float | None, true: float) -> bool:
    return read is not None and true / BUCKET - 0.002 <= read <= true * BUCKET + 0.002


def test_the_overview_equals_the_stores_counts_after_a_mixed_run(
    fresh: tuple[HttpDeployment, Api],
) -> None:
    deployment, api = fresh
    submit(api)
    tasks = settled(deployment, sum(MIX.values()))
    store = deployment.deployment.queue.store

    with api.client("token-ops") as ops:
        overview = ops.get("/operator/overview").json()

    since = datetime.fromisoformat(overview["series"]["starts"][0])
    assert all(task.created_at >= since for task in tasks)  # the run fits the hour
    assert overview["counts"] == {str(k): v for k, v in store.status_counts().items()}
    by_status = Counter(task.status for task in tasks)
    assert by_status[TaskStatus.COMPLETED] == 600
    assert by_status[TaskStatus.FAILED] == 300
    assert by_status[TaskStatus.CANCELLED] == 100
    series = {key: sum(values) for key, values in overview["series"]["counts"].items()}
    assert series["submitted"] == 1000
    assert series["started"] == sum(task.started_at is not None for task in tasks)
    for status in ("completed", "failed", "cancelled", "rejected"):
        assert series[status] == by_status[TaskStatus(status)], status
    assert series["retried"] == sum(len(task.errors) for task in tasks) == 100
    assert series["lost"] == series["dead"] == 0
    assert overview["backlog"]["total"] == 0
    assert overview["backlog"]["oldest"] is None
    assert overview["series"]["backlog"][-1] == 0

    jobs = {job["name"]: job for job in overview["jobs"]}
    for name in MIX:
        mine = [task for task in tasks if task.name == name]
        for status in ("completed", "failed", "cancelled"):
            assert jobs[name][status] == sum(t.status == status for t in mine), (name, status)
        assert jobs[name]["started"] == sum(t.started_at is not None for t in mine), name

    started = [t for t in tasks if t.started_at is not None]
    waits = [(t.started_at - t.created_at).total_seconds() for t in started]  # type: ignore[operator]
    runs = [
        (t.finished_at - t.started_at).total_seconds()  # type: ignore[operator]
        for t in started
    ]
    adds = [t for t in started if t.name == "http.add"]
    add_waits = [(t.started_at - t.created_at).total_seconds() for t in adds]  # type: ignore[operator]
    add_runs = [(t.finished_at - t.started_at).total_seconds() for t in adds]  # type: ignore[operator]
    for key, durations in (("wait", add_waits), ("run", add_runs)):
        for quantile in (0.5, 0.95):
            read = jobs["http.add"][f"{key}_p{round(quantile * 100)}"]
            assert near(read, exact(durations, quantile)), (key, quantile, read)
    latency = overview["latency"]
    assert max(v for v in latency["wait_p95"] if v is not None) <= max(waits) * BUCKET
    assert max(v for v in latency["run_p95"] if v is not None) <= max(runs) * BUCKET
