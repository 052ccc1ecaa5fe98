"""Rate limits: what a claim under a rate limit costs on PostgreSQL, beside one without.

Three ways to claim N submitted tasks each, timed in the same run, claim by
claim in turn (so that the machine's load weighs on every way alike), on
fresh rows each round:

- **store**: ``TaskStore.claim`` with no flow control (one statement).
- **paused**: ``TaskStore.claim(..., flow=FlowControl())``: the same statement
  with the pause check every worker's claim makes (no pause in force).
- **rated**: ``TaskStore.claim(..., flow=...)`` under a rate limit per owner
  (``RateLimit(1000, per=1 s, key="owner")``, 50 owners): one pipelined
  transaction that locks the owner's bucket, claims with the sum of the
  bucket's starts in the period, and logs the start. The limit leaves room
  for every claim, so every claim wins; each bucket holds the starts of the
  last second (up to ``--tasks / 50`` rows).

Between rounds, untimed, the runs are ended, the starts pruned and the table
vacuumed. It prints the medians in milliseconds and the ratios; the target is
``rated / store <= 1.5``.

    uv run python bench/rate_limits.py [--tasks 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

import psycopg
from benchkit import scratch_database

from queuestore import FlowControl, RateLimit, SqlTaskStore, make_engine

LEASE = timedelta(seconds=30)
OWNERS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=2000, help="claims per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rated = FlowControl(rates={"bench.job": RateLimit(1000, per=timedelta(seconds=1), key="owner")})
    with scratch_database("queuestore_bench_rates", migrate=True) as url:
        store = SqlTaskStore(make_engine(url, pool_size=2))
        raw = psycopg.connect(url, autocommit=True)

        def fresh() -> list[str]:
            items = [
                {"name": "bench.job", "owner": f"owner-{i % OWNERS}"} for i in range(args.tasks)
            ]
            return [task.id for task in store.create_many(items)]

        ways: dict[str, Callable[[str], object]] = {
            "store": lambda task_id: store.claim(task_id, "w", LEASE),
            "paused": lambda task_id: store.claim(task_id, "w", LEASE, flow=FlowControl()),
            "rated": lambda task_id: store.claim(task_id, "w", LEASE, flow=rated),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        refused = 0
        for _ in range(args.rounds):
            # Claim by claim in turn, so that the machine's load weighs on every way alike.
            task_ids = {name: fresh() for name in ways}
            spent = dict.fromkeys(ways, 0.0)
            for index in range(args.tasks):
                for name, claim in ways.items():
                    start = time.perf_counter()
                    refused += claim(task_ids[name][index]) is None
                    spent[name] += time.perf_counter() - start
            for name, total in spent.items():
                times[name].append(total / args.tasks * 1000)
            raw.execute(
                "UPDATE queuestore_tasks SET status = 'completed', worker_id = NULL, "
                "lease_expires_at = NULL WHERE worker_id = 'w'"
            )
            time.sleep(1.0)  # the round's starts leave their period
            store.prune_flow()
            raw.execute("VACUUM queuestore_tasks")
        raw.close()
        store.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"claims: {args.tasks} per way and round, {args.rounds} rounds, median ms per claim")
    for name, value in medians.items():
        print(f"  {name:8} {value:.3f} ms")
    print(f"  refused: {refused}")
    print(f"  paused / store: {medians['paused'] / medians['store']:.2f}x")
    print(f"  rated / store:  {medians['rated'] / medians['store']:.2f}x")


if __name__ == "__main__":
    main()
