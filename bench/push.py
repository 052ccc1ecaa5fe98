"""Push: how soon a status change reaches its callback, and what the delivery trigger costs.

Three measurements on PostgreSQL, each beside its baseline in the same run:

- **latency**: one task at a time is completed (``TaskStore.update``) and its
  callback's request arrives at a real receiver process, sent by a real
  ``queuestore deliver`` process (woken by the trigger's NOTIFY). The time is
  from just before the update to the receiver's arrival stamp. Baseline (the
  floor): the same status ``UPDATE`` committed with raw psycopg, then the same
  body POSTed to the receiver at once from this process -- what an in-process,
  best-effort sender gets, with nothing durable between the change and the call.
- **burst**: ``--burst`` tasks completed one after the other, then the time
  until the receiver has every delivery. Baseline: the same number of POSTs
  from this process on as many threads as the deliverer has (``--concurrency``).
- **trigger**: the cost of the delivery trigger on a status write of a task
  *without* callbacks (every task's path): ``TaskStore.update(status=...)`` on
  fresh tasks, with the trigger enabled and disabled, alternating rounds.

    uv run python bench/push.py [--tasks 200] [--burst 500] [--writes 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from benchkit import HERE, free_port, process, scratch_database

from queuestore import SqlTaskStore, UrlPolicy
from queuestore.push.sender import post

RECEIVER = HERE.parent / "tests" / "integration" / "receiver.py"
LOCAL = UrlPolicy.allowing("127.0.0.1")
BODY = json.dumps({"type": "task.completed", "data": {"id": "x" * 22, "status": "completed"}})


class Arrivals:
    """The receiver's log: one JSON line per request, with its arrival time."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.offset = 0
        self.seen: list[float] = []

    def wait(self, count: int, timeout: float = 60.0) -> list[float]:
        """Arrival times, once ``count`` requests arrived in all."""
        deadline = time.monotonic() + timeout
        while len(self.seen) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(self.seen)} of {count} requests arrived")
            if self.log.exists():
                with self.log.open() as lines:
                    lines.seek(self.offset)
                    for line in lines:
                        if line.endswith("\n"):
                            self.seen.append(json.loads(line)["received_at"])
                            self.offset += len(line.encode())
            time.sleep(0.0005)
        return self.seen


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return f"p50 {pick(0.5):7.2f}  p90 {pick(0.9):7.2f}  p99 {pick(0.99):7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=200, help="latency samples per way")
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--writes", type=int, default=2000, help="status writes per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with (
        scratch_database("queuestore_bench_push", migrate=True) as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        folder = Path(tmp)
        port = free_port()
        hook = f"http://127.0.0.1:{port}/hook"
        store = SqlTaskStore(url, url_policy=LOCAL)
        raw = psycopg.connect(url, autocommit=True)
        env = {
            **os.environ,
            "QUEUESTORE_DATABASE_URL": url,
            "QUEUESTORE_CALLBACK_ALLOW_NETWORKS": '["127.0.0.1"]',
            "QUEUESTORE_DELIVERY_CONCURRENCY": str(args.concurrency),
            "QUEUESTORE_LOG_LEVEL": "WARNING",
        }
        receiver_log = folder / "received.jsonl"
        receiving = [sys.executable, str(RECEIVER), str(receiver_log), "--port", str(port)]
        delivering = [sys.executable, "-m", "queuestore", "deliver"]
        with (
            process(receiving, env, folder / "receiver.log"),
            process(delivering, env, folder / "deliver.log"),
        ):
            arrivals = Arrivals(receiver_log)
            wait_listening(port)
            # Warm both paths: the deliverer's connection and LISTEN, the receiver.
            warm = store.create("bench.push")
            store.add_callback(warm.id, hook)
            store.update(warm.id, status="working")
            store.update(warm.id, status="completed")
            post(hook, BODY.encode(), {}, policy=LOCAL)
            arrivals.wait(2)

            latency(store, raw, hook, arrivals, args.tasks)
            burst(store, hook, arrivals, args.burst, args.concurrency)

        trigger_cost(store, raw, args.writes, args.rounds)


def latency(
    store: SqlTaskStore, raw: psycopg.Connection, hook: str, arrivals: Arrivals, count: int
) -> None:
    """Change to arrival, one task at a time: through the deliveries, and the raw floor."""
    times: dict[str, list[float]] = {"queuestore": [], "raw": []}
    for _ in range(count):
        task = store.create("bench.push")
        store.add_callback(task.id, hook)
        store.update(task.id, status="working")
        started = time.time()
        store.update(task.id, status="completed", result={"ok": True})
        times["queuestore"].append(arrivals.wait(len(arrivals.seen) + 1)[-1] - started)

        other = store.create("bench.push")
        store.update(other.id, status="working")
        started = time.time()
        raw.execute(
            "UPDATE queuestore_tasks SET status = 'completed', result = '{\"ok\": true}',"
            " finished_at = now(), updated_at = now(), version = version + 1"
            " WHERE id = %s AND status = 'working'",
            (other.id,),
        )
        post(hook, BODY.encode(), {}, policy=LOCAL)
        times["raw"].append(arrivals.wait(len(arrivals.seen) + 1)[-1] - started)

    print(f"latency, change to arrival ({count} each, one at a time):")
    for name, values in times.items():
        print(f"  {name:10} {percentiles(values)}")
    ratio = statistics.median(times["queuestore"]) / statistics.median(times["raw"])
    print(f"  p50 ratio queuestore/raw: {ratio:.2f}x")


def burst(store: SqlTaskStore, hook: str, arrivals: Arrivals, count: int, concurrency: int) -> None:
    """``count`` changes at once, to the last arrival; the floor: as many POSTs on threads."""
    tasks = [store.create("bench.push") for _ in range(count)]
    for task in tasks:
        store.add_callback(task.id, hook)
        store.update(task.id, status="working")
    before = len(arrivals.seen)
    started = time.time()
    for task in tasks:
        store.update(task.id, status="completed")
    taken = arrivals.wait(before + count, timeout=300)[-1] - started
    before = len(arrivals.seen)
    started = time.time()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: post(hook, BODY.encode(), {}, policy=LOCAL), tasks))
    floor = arrivals.wait(before + count, timeout=300)[-1] - started
    print(f"burst of {count}, first change to last arrival:")
    print(f"  queuestore {taken:6.2f} s  ({count / taken:7.0f} deliveries/s)")
    print(f"  raw        {floor:6.2f} s  ({count / floor:7.0f} posts/s)")
    print(f"  ratio queuestore/raw: {taken / floor:.2f}x")


def trigger_cost(store: SqlTaskStore, raw: psycopg.Connection, writes: int, rounds: int) -> None:
    """Median ms per ``update(status=working)`` of a task without callbacks, trigger on and off."""
    times: dict[str, list[float]] = {"trigger on": [], "trigger off": []}
    for _ in range(rounds):
        for name, samples in times.items():
            enable = "ENABLE" if name == "trigger on" else "DISABLE"
            raw.execute(f"ALTER TABLE queuestore_tasks {enable} TRIGGER queuestore_push_status")
            task_ids = [task.id for task in store.create_many([{"name": "bench.w"}] * writes)]
            started = time.perf_counter()
            for task_id in task_ids:
                store.update(task_id, status="working")
            samples.append((time.perf_counter() - started) / writes * 1000)
            raw.execute("DELETE FROM queuestore_tasks WHERE name = 'bench.w'")
            raw.execute("VACUUM queuestore_tasks")
    raw.execute("ALTER TABLE queuestore_tasks ENABLE TRIGGER queuestore_push_status")
    print(f"status write of a task without callbacks ({writes} x {rounds} rounds, median):")
    for name, values in times.items():
        print(
            f"  {name:11} {statistics.median(values):.3f} ms  (rounds: "
            + ", ".join(f"{v:.3f}" for v in values)
            + ")"
        )
    ratio = statistics.median(times["trigger on"]) / statistics.median(times["trigger off"])
    print(f"  ratio on/off: {ratio:.2f}x")


def wait_listening(port: int, timeout: float = 10.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    main()
