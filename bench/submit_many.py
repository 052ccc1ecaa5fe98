"""Bulk submit: ``TaskQueue.submit_many`` of N tasks against bare Celery and a submit loop.

Three ways to enqueue the same N jobs on one Redis broker, timed in the same
run, in alternating rounds:

- **celery**: bare Celery, ``task.apply_async(args=(i,))`` in a loop
  (fire and forget, nothing durable): the baseline.
- **submit_many**: queuestore's bulk submit on PostgreSQL: the N rows in one
  transaction, then the N messages on one broker connection.
- **submit loop**: queuestore's ``submit`` called N times.

Each round's messages are purged from the broker, untimed, before the next.
The issue's targets: submit_many at least as fast as the celery loop (>= 1x,
durable and not slower than fire-and-forget) and >= 5x the submit loop. The
parts of submit_many are timed too (``create_many`` alone, and the messages
alone in kombu's publish batches on one connection), to show where the time goes.

    uv run python bench/submit_many.py [--tasks 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from benchkit import scratch_database
from celery import Celery

from queuestore import SqlTaskStore, TaskQueue

REDIS = os.environ.get("QUEUESTORE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.tasks

    bare = Celery("bench-bare", broker=REDIS, set_as_current=False)
    bare.conf.task_ignore_result = True

    @bare.task(name="bench.noop", ignore_result=True)
    def noop(i: int) -> None: ...

    app = Celery("bench-submit-many", broker=REDIS, set_as_current=False)
    with scratch_database("qs_bench_many", migrate=True) as url:
        store = SqlTaskStore(url)
        queue = TaskQueue(store, app)
        items = [{"name": "bench.job", "input": {"i": i}} for i in range(n)]

        def purge() -> None:
            queue.publisher.marks.flush()
            with app.connection_for_write() as connection:
                connection.default_channel.queue_purge("celery")

        def celery_loop() -> None:
            for i in range(n):
                noop.apply_async(args=(i,))

        def submit_loop() -> None:
            for item in items:
                queue.submit(item["name"], item["input"])

        def messages_only() -> None:
            tasks = store.create_many(items)
            start = time.perf_counter()
            with app.producer_or_acquire() as producer, producer.batch(1000):
                for task in tasks:
                    queue.publish(task, producer=producer)
            parts["publish"].append(time.perf_counter() - start)

        ways: dict[str, Callable[[], object]] = {
            "celery apply_async loop": celery_loop,
            "submit_many": lambda: queue.submit_many(items),
            "submit loop": submit_loop,
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        parts: dict[str, list[float]] = {"create_many": [], "publish": []}
        celery_loop()  # warm the connections and the statement caches
        queue.submit_many(items[:100])
        purge()
        for round_ in range(args.rounds):
            for name, way in ways.items():
                times[name].append(timed(way))
                purge()
            parts["create_many"].append(timed(lambda: store.create_many(items)))
            messages_only()
            purge()
            print(
                f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
            )
        store.close()

    report(n, args.rounds, times, parts)


def report(
    n: int, rounds: int, times: dict[str, list[float]], parts: dict[str, list[float]]
) -> None:
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"\n{n} tasks, median of {rounds} rounds (Redis broker, PostgreSQL store)")
    print(f"{'way':<28}{'seconds':>9}{'tasks/s':>10}")
    for name, seconds in median.items():
        print(f"{name:<28}{seconds:>9.2f}{n / seconds:>10.0f}")
    for name, values in parts.items():
        seconds = statistics.median(values)
        print(f"{'  of it: ' + name:<28}{seconds:>9.2f}{n / seconds:>10.0f}")
    over_celery = median["celery apply_async loop"] / median["submit_many"]
    over_loop = median["submit loop"] / median["submit_many"]
    print(
        f"\nsubmit_many vs bare Celery: {over_celery:.2f}x (target >= 1x: "
        f"{'PASS' if over_celery >= 1 else 'FAIL'})"
    )
    print(
        f"submit_many vs submit loop: {over_loop:.2f}x (target >= 5x: "
        f"{'PASS' if over_loop >= 5 else 'FAIL'})"
    )


if __name__ == "__main__":
    main()
