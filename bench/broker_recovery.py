"""Broker recovery benchmark: how soon a SIGKILLed worker's tasks run elsewhere, per broker.

    uv run python bench/broker_recovery.py [--kills 5] [--lease 10] [--deep 10000]
        [--brokers redis,rabbitmq]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust), Redis on 6379 and
RabbitMQ on 5672 (guest/guest). For each broker, ``--kills`` times: a worker
(prefork, concurrency 2, prefetch multiplier 4) takes six long tasks, two
running and four prefetched; a second worker (with beat) is started and
ready; the first is SIGKILLed with its pool. Each task's recovery is the time
from the kill to its first start on the second worker. The figures are printed
beside their bound: on Redis a prefetched message comes back after the
visibility timeout (the lease) plus kombu's restore interval, a claimed run
after the lease plus the reaper interval; on RabbitMQ a prefetched message
comes back when the killed connection closes. Without queuestore's settings
Redis's bound is its default visibility timeout, one hour.

Then ``--deep`` tasks wait on Redis behind two jobs that run for four leases
(past the visibility timeout), with beat's reaper and sweep running; every
publish and delivery is counted. The target is at most 1.05 of each per task.

Every scratch database, queue and process the script makes is removed or
stopped at the end, even on error.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from benchkit import HERE, process, scratch_database
from celery import Celery
from celery.signals import before_task_publish

from queuestore import Settings, TaskQueue
from queuestore.broker.transports import redis_transport_options

ROOT = HERE.parent
BROKERS = {
    "redis": "redis://127.0.0.1:6379/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672//",
}


class Deployment:
    """One scratch database, one queue name, one records folder, and its workers."""

    def __init__(self, stack: ExitStack, broker_url: str, lease: float, workdir: Path) -> None:
        self.stack = stack
        self.database_url = stack.enter_context(scratch_database("qs_recovery", migrate=True))
        self.broker_url = broker_url
        self.lease = lease
        self.queue_name = f"qs-bench-{uuid.uuid4().hex[:10]}"
        self.workdir = workdir
        self.records = workdir / "records"
        self.records.mkdir(parents=True)
        self.env = dict(os.environ) | {
            "QUEUESTORE_DATABASE_URL": self.database_url,
            "QUEUESTORE_BROKER_URL": broker_url,
            "QUEUESTORE_HOME": str(workdir / "home"),
            "QUEUESTORE_LEASE": str(lease),
            "QUEUESTORE_HEARTBEAT_INTERVAL": "0.5",
            "QUEUESTORE_REAPER_INTERVAL": "1",
            "QUEUESTORE_SWEEP_INTERVAL": "1",
            "QUEUESTORE_PUBLISH_GRACE": "2",
            "QUEUESTORE_AUTO_MIGRATE": "false",
            "BENCH_QUEUE": self.queue_name,
            "BENCH_RECORDS": str(self.records),
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        }
        settings = Settings(
            database_url=self.database_url,
            broker_url=broker_url,
            lease=timedelta(seconds=lease),
            heartbeat_interval=timedelta(seconds=0.5),
            home=workdir / "home",
            auto_migrate=False,
        )
        app = settings.configure(Celery(f"caller-{self.queue_name}", set_as_current=False))
        app.conf.task_default_queue = self.queue_name
        self.queue: TaskQueue = settings.make_queue(app, beat=False)
        stack.callback(self.queue.store.close)
        self._workers = 0

    def start_worker(self, *options: str) -> tuple[Any, Path]:
        self._workers += 1
        node = f"w{self._workers}-{self.queue_name}"
        log = self.workdir / f"{node}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "recovery_app", "worker", "--pool=prefork",
            "--without-heartbeat", "--without-gossip", "--without-mingle",
            f"--hostname={node}@%h", "--loglevel=INFO", *options,
        ]  # fmt: skip
        child = self.stack.enter_context(process(command, self.env, log, cwd=self.workdir))
        wait(lambda: log.exists() and "ready." in log.read_text(), 60, f"{node} to be ready")
        return child, log

    def starts(self, task_id: str) -> list[tuple[int, float]]:
        path = self.records / task_id
        if not path.exists():
            return []
        lines = [line.split() for line in path.read_text().splitlines()]
        return [(int(attempt), float(at)) for _, attempt, at in lines]

    def messages(self, task_id: str) -> list[str]:
        path = self.records / f"{task_id}.messages"
        return path.read_text().split() if path.exists() else []

    def completed(self) -> int:
        with psycopg.connect(self.database_url) as connection:
            row = connection.execute(
                "SELECT count(*) FROM queuestore_tasks WHERE status = 'completed'"
            ).fetchone()
        return int(row[0]) if row else 0


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@contextmanager
def publishes_recorded(deployment: Deployment) -> Iterator[None]:
    """Record this process's publishes as the workers record theirs."""

    def published(headers: dict[str, Any] | None = None, **_: Any) -> None:
        if (task_id := (headers or {}).get("id")) is not None:
            with open(deployment.records / f"{task_id}.messages", "a") as file:
                file.write("published\n")

    before_task_publish.connect(published, weak=False)
    try:
        yield
    finally:
        before_task_publish.disconnect(published)


def one_kill(broker_url: str, lease: float, workdir: Path) -> dict[str, list[float]]:
    """Kill a worker holding two running and four prefetched tasks; each task's recovery."""
    with ExitStack() as stack:
        deployment = Deployment(stack, broker_url, lease, workdir)
        first, _ = deployment.start_worker("--concurrency=2", "--prefetch-multiplier=4")
        tasks = [deployment.queue.submit("bench.sleep", {"seconds": 600}) for _ in range(6)]
        wait(
            lambda: (
                all("received" in deployment.messages(task.id) for task in tasks)
                and sum(bool(deployment.starts(task.id)) for task in tasks) == 2
            ),
            30,
            "the first worker to run two tasks and hold four",
        )
        running = {task.id for task in tasks if deployment.starts(task.id)}
        deployment.start_worker("--concurrency=6", "--beat", f"--schedule={workdir / 'beat'}")
        os.killpg(first.pid, signal.SIGKILL)
        killed_at = time.time()
        (deployment.records / "release").touch()  # the second worker's runs end at once

        def restarted(task_id: str) -> float | None:
            later = [at for _, at in deployment.starts(task_id) if at > killed_at]
            return min(later) - killed_at if later else None

        wait(lambda: all(restarted(task.id) is not None for task in tasks), 600, "recovery")
        result: dict[str, list[float]] = {"claimed": [], "prefetched": []}
        for task in tasks:
            seconds = restarted(task.id)
            assert seconds is not None
            result["claimed" if task.id in running else "prefetched"].append(seconds)
        return result


def deep_queue(count: int, lease: float, workdir: Path) -> tuple[float, float, float]:
    """Publishes and deliveries per task of ``count`` tasks waiting behind slow jobs on Redis."""
    with ExitStack() as stack:
        deployment = Deployment(stack, BROKERS["redis"], lease, workdir)
        with publishes_recorded(deployment):
            slow = [
                deployment.queue.submit("bench.sleep", {"seconds": 4 * lease}) for _ in range(2)
            ]
            deployment.start_worker("--concurrency=2", "--beat", f"--schedule={workdir / 'beat'}")
            wait(lambda: all(deployment.starts(task.id) for task in slow), 60, "the slow jobs")
            started = time.monotonic()
            waiting = [deployment.queue.submit("bench.sleep", {"seconds": 0}) for _ in range(count)]
            wait(lambda: deployment.completed() == count + 2, 3600, "the deep queue to drain")
            elapsed = time.monotonic() - started
        tasks = [*slow, *waiting]
        messages = [deployment.messages(task.id) for task in tasks]
        publishes = sum(lines.count("published") for lines in messages) / len(tasks)
        deliveries = sum(lines.count("received") for lines in messages) / len(tasks)
        return publishes, deliveries, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--deep", type=int, default=10_000, help="0: skip the deep queue")
    parser.add_argument("--brokers", default="redis,rabbitmq")
    args = parser.parse_args()
    restore = redis_transport_options(timedelta(seconds=args.lease))["unacked_restore_interval"]
    print(f"lease {args.lease:g} s, reaper interval 1 s, Redis restore interval {restore:g} s")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="qs-recovery-") as scratch:
        root = Path(scratch)
        for broker in args.brokers.split(","):
            found: dict[str, list[float]] = {"claimed": [], "prefetched": []}
            for kill in range(args.kills):
                for kind, seconds in one_kill(
                    BROKERS[broker], args.lease, root / f"{broker}-{kill}"
                ).items():
                    found[kind] += seconds
            bounds = {
                # The reaper runs every second and republishes a first lost run at once.
                "claimed": args.lease + 1,
                "prefetched": args.lease + restore if broker == "redis" else 0.0,
            }
            for kind, values in found.items():
                print(
                    f"{broker:8} {kind:10} recovery p50 {statistics.median(values):5.1f} s"
                    f"  max {max(values):5.1f} s  over {len(values)} tasks in {args.kills} kills"
                    f"  (lease {args.lease:g} s; bound {bounds[kind]:g} s + a run's start)"
                )
        if args.deep:
            publishes, deliveries, elapsed = deep_queue(args.deep, args.lease, root / "deep")
            print(
                f"deep queue {args.deep} behind 2 jobs of {4 * args.lease:g} s on Redis: "
                f"{publishes:.3f} publishes/task, {deliveries:.3f} deliveries/task "
                f"(target <= 1.05), drained in {elapsed:.0f} s"
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
