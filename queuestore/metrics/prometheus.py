"""Prometheus metrics of a queuestore deployment (extra ``metrics``).

Two kinds of numbers:

- **the store's state, read at scrape**: ``queuestore_tasks{status}`` (one
  ``GROUP BY`` over every owner's tasks) and ``queuestore_unpublished_tasks``
  (live tasks never published) and ``queuestore_deliveries_in_store{state}``
  (callback deliveries pending, delivered, dead), by :class:`StoreCollector`. Any process that
  can reach the database reports the same values; alert on them from one.
- **what this process did**, counted as its store writes (a
  :class:`~queuestore.store.observer.StoreObserver`): status transitions by
  job and new status, start delay (submit to the first claim, on the
  database's clock), janitor removals, reaper retries and failures; the
  duration of each job run, from Celery's ``task_prerun``/``task_postrun``;
  and a deliverer's callback tries by outcome, and their delay.
  Sum them across processes (``sum by (job, status)``).

Workers serve them on ``Settings.metrics_port`` (see :func:`serve_worker_metrics`);
on the prefork pool the children's counters are gathered with prometheus-client's
multiprocess mode, in the folder ``PROMETHEUS_MULTIPROC_DIR`` names. The HTTP API
mounts :func:`metrics_app` at ``/metrics``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    make_asgi_app,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from queuestore.core.callbacks import Delivery
from queuestore.core.errors import StoreUnavailable
from queuestore.core.models import TERMINAL, Task, TaskStatus
from queuestore.metrics import multiprocess_dir
from queuestore.store.observer import StoreObserver

if TYPE_CHECKING:
    from celery import Celery

    from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)


TRANSITIONS = Counter(
    "queuestore_task_transitions",
    "Status writes made by this process, by job and the status written (creation: submitted).",
    ["job", "status"],
    registry=None,
)
JOB_DURATION = Histogram(
    "queuestore_job_duration_seconds",
    "Wall time of one job run in a worker, claim to outcome, by job.",
    ["job"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    registry=None,
)
START_DELAY = Histogram(
    "queuestore_start_delay_seconds",
    "Submit (or a scheduled start) to first claim, on the database's clock, by job.",
    ["job"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=None,
)
JANITOR_REMOVED = Counter(
    "queuestore_janitor_removed_tasks", "Expired tasks deleted by the janitor.", registry=None
)
REAPER_RETRIES = Counter(
    "queuestore_reaper_retries",
    "Runs lost by their worker and given another attempt by the reaper.",
    registry=None,
)
JOB_RETRIES = Counter(
    "queuestore_job_retries",
    "Runs whose job raised an error its retry policy retries, by job.",
    ["job"],
    registry=None,
)
SLOT_WAITS = Counter(
    "queuestore_slot_waits",
    "Claims refused at a concurrency limit (the task waits for a slot), by job.",
    ["job"],
    registry=None,
)
REAPER_FAILURES = Counter(
    "queuestore_reaper_failures",
    "Tasks failed by the reaper after too many lost runs.",
    registry=None,
)
DELIVERIES = Counter(
    "queuestore_deliveries",
    "Callback tries settled by this process, by outcome: delivered, retried or failed (dead).",
    ["outcome"],
    registry=None,
)
DELIVERY_DELAY = Histogram(
    "queuestore_delivery_delay_seconds",
    "A task's status change to its callback's 2xx answer, retries included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
    registry=None,
)
PROCESS_METRICS: Final = (
    TRANSITIONS,
    JOB_DURATION,
    START_DELAY,
    JANITOR_REMOVED,
    REAPER_RETRIES,
    REAPER_FAILURES,
    JOB_RETRIES,
    SLOT_WAITS,
    DELIVERIES,
    DELIVERY_DELAY,
)
"""What this process counts (gathered across prefork children in multiprocess mode)."""


class MetricsObserver(StoreObserver):
    """Counts a store's writes into this module's metrics."""

    def created(self, task: Task) -> None:
        TRANSITIONS.labels(task.name, TaskStatus.SUBMITTED.value).inc()

    def status_written(self, task: Task, *, claimed: bool) -> None:
        TRANSITIONS.labels(task.name, task.status.value).inc()
        if claimed and task.attempt == 1 and task.started_at is not None:
            due = task.created_at if task.run_at is None else max(task.created_at, task.run_at)
            lag = (task.started_at - due).total_seconds()
            START_DELAY.labels(task.name).observe(max(lag, 0.0))

    def reaped(self, task: Task) -> None:
        (REAPER_FAILURES if task.status in TERMINAL else REAPER_RETRIES).inc()

    def retried(self, task: Task) -> None:
        JOB_RETRIES.labels(task.name).inc()

    def waited_for_slot(self, task: Task) -> None:
        SLOT_WAITS.labels(task.name).inc()

    def removed(self, count: int) -> None:
        JANITOR_REMOVED.inc(count)


OBSERVER: Final = MetricsObserver()


class DeliveryMetrics:
    """Counts a deliverer's outcomes (a :class:`~queuestore.push.deliverer.DeliveryObserver`)."""

    def delivered(self, delivery: Delivery, delay: float) -> None:
        DELIVERIES.labels("delivered").inc()
        DELIVERY_DELAY.observe(delay)

    def retried(self, delivery: Delivery, error: str) -> None:
        DELIVERIES.labels("retried").inc()

    def failed(self, delivery: Delivery, error: str) -> None:
        DELIVERIES.labels("failed").inc()


def instrument(store: TaskStore) -> TaskStore:
    """Count ``store``'s writes in this process's metrics (idempotent); return it."""
    store.observe(OBSERVER)
    return store


class StoreCollector(Collector):
    """Reads the tasks per status and the unpublished tasks from the store at each scrape.

    The backlog counts tasks never published and last written ``backlog_after``
    (the queue's ``publish_grace``) ago or earlier: what the sweep
    would publish. Younger ones may be published already, their mark not yet written.

    Two aggregate queries per scrape, over every owner's tasks. When the
    database is unreachable only ``queuestore_store_up 0`` is reported.
    """

    def __init__(self, store: TaskStore, *, backlog_after: timedelta = timedelta(0)) -> None:
        self.store = store
        self.backlog_after = backlog_after

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("queuestore_store_up", "Whether the task store answered.")
        try:
            counts = self.store.status_counts()
            backlog = self.store.unpublished_count(self.backlog_after)
            deliveries = self.store.delivery_counts()
        except StoreUnavailable as exc:
            log.warning("metrics: store unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        tasks = GaugeMetricFamily(
            "queuestore_tasks", "Tasks in the store, by status.", labels=["status"]
        )
        for status, count in counts.items():
            tasks.add_metric([status.value], count)
        yield tasks
        yield GaugeMetricFamily(
            "queuestore_unpublished_tasks",
            "Live tasks never published, older than publish_grace (the sweep's work).",
            value=backlog,
        )
        states = GaugeMetricFamily(
            "queuestore_deliveries_in_store",
            "Callback deliveries in the store, by state: pending, delivered, dead.",
            labels=["state"],
        )
        for state, count in deliveries.items():
            states.add_metric([state.value], count)
        yield states


def make_registry(
    store: TaskStore, *, backlog_after: timedelta = timedelta(0)
) -> CollectorRegistry:
    """A registry of the store's state and this process's (or its children's) counts.

    ``backlog_after``: the queue's ``publish_grace`` (see :class:`StoreCollector`).
    """
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StoreCollector(store, backlog_after=backlog_after))
    if multiprocess_dir() is not None:
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        for collector in (*PROCESS_METRICS, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(collector)
    return registry


def metrics_app(store: TaskStore, *, backlog_after: timedelta = timedelta(0)) -> Callable[..., Any]:
    """An ASGI app that serves the metrics of ``store`` (mount it at ``/metrics``).

    ``backlog_after``: the queue's ``publish_grace`` (see :class:`StoreCollector`).
    """
    return make_asgi_app(make_registry(instrument(store), backlog_after=backlog_after))


def serve_delivery_metrics(store: TaskStore, port: int, host: str = "0.0.0.0") -> DeliveryMetrics:
    """Serve ``/metrics`` on ``port`` for a ``queuestore deliver`` process; its observer."""
    start_http_server(port, host, registry=make_registry(store))
    return DeliveryMetrics()


def serve_worker_metrics(app: Celery, port: int, host: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``port`` from ``app``'s worker once it starts.

    The worker's main process serves; every process that runs jobs counts
    (Celery's ``worker_init`` and ``worker_process_init`` hooks). On the prefork
    pool set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder before the worker
    starts (``queuestore worker`` does), or the children's counts are not seen.
    """
    from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init

    from queuestore.broker.publisher import Publisher
    from queuestore.run.jobs import registered_job

    started: dict[str, float] = {}

    def on_worker_init(sender: Any = None, **_: Any) -> None:
        if sender is None or getattr(sender, "app", None) is not app:
            return
        publisher = Publisher.of(app)
        store = instrument(publisher.store)
        folder = multiprocess_dir()
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            for stale in folder.glob("*.db"):  # counts of an earlier run of this worker
                stale.unlink()
        registry = make_registry(store, backlog_after=publisher.options.publish_grace)
        server, _thread = start_http_server(port, host, registry=registry)
        log.info("metrics on http://%s:%d/metrics", host, server.server_port)

    def on_process_init(**_: Any) -> None:
        instrument(Publisher.of(app).store)

    def on_prerun(task_id: str = "", task: Any = None, **_: Any) -> None:
        if task is not None and task.app is app and registered_job(app, task.name) is not None:
            started[task_id] = time.monotonic()

    def on_postrun(task_id: str = "", task: Any = None, **_: Any) -> None:
        begun = started.pop(task_id, None)
        if begun is not None and task is not None:
            JOB_DURATION.labels(task.name).observe(time.monotonic() - begun)

    worker_init.connect(on_worker_init, weak=False)
    worker_process_init.connect(on_process_init, weak=False)
    task_prerun.connect(on_prerun, weak=False)
    task_postrun.connect(on_postrun, weak=False)
