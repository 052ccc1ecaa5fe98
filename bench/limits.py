"""Concurrency limits: what a claim under limits costs on PostgreSQL, beside an unlimited one.

Three ways to claim the same N submitted tasks, timed in the same run, in
alternating rounds on fresh rows:

- **raw**: the claim's compare-and-set ``UPDATE`` as raw psycopg (the floor).
- **store**: ``TaskStore.claim`` with no limits (one statement).
- **limited**: ``TaskStore.claim(..., limits=ConcurrencyLimits(per_owner=..., per_job=...))``:
  a transaction that locks the owner's and the job's slots, then the ``UPDATE``
  with both counts. The limits leave room for every claim of a round, so every
  claim wins; each of the 50 owners runs ``--running`` tasks before the round,
  and the round's claims add to them. The job's count is the worst case: every
  running task is of the one limited job, up to ``--tasks`` plus the others.

Between rounds, untimed, the round's runs are ended and the table vacuumed
(the running indexes churn: every claim adds an entry, every end leaves a dead
one until vacuum). A claim is one per run, so the limited claim's extra cost
is per run, not per write. It prints the medians in milliseconds and the ratios.

    uv run python bench/limits.py [--tasks 2000] [--rounds 5] [--running 3] [--owner-only]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

import psycopg
from benchkit import RAW_CLAIM, scratch_database

from queuestore import ConcurrencyLimits, SqlTaskStore

LEASE = timedelta(seconds=30)
OWNERS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=2000, help="claims per way and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--running", type=int, default=3, help="tasks each owner runs already")
    parser.add_argument("--owner-only", action="store_true", help="no limit on the job")
    args = parser.parse_args()
    # Room for every claim of a round: each owner's and the job's counts grow with it.
    per_owner = args.running + args.tasks // OWNERS + 1
    limits = ConcurrencyLimits(per_owner=per_owner, per_job={"bench.job": OWNERS * per_owner})
    with scratch_database("queuestore_bench_limits", migrate=True) as url:
        store = SqlTaskStore(url)
        raw = psycopg.connect(url, autocommit=True)
        for index in range(OWNERS * args.running):  # the slots already held
            task = store.create("bench.job", owner=f"owner-{index % OWNERS}")
            store.claim(task.id, f"held-{index}", LEASE)

        def fresh() -> list[str]:
            items = [
                {"name": "bench.job", "owner": f"owner-{i % OWNERS}"} for i in range(args.tasks)
            ]
            return [task.id for task in store.create_many(items)]

        ways: dict[str, Callable[[str], object]] = {
            "raw": lambda task_id: raw.execute(RAW_CLAIM, ("w", task_id)).fetchone(),
            "store": lambda task_id: store.claim(task_id, "w", LEASE),
            "limited": lambda task_id: store.claim(task_id, "w", LEASE, limits=limits),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, claim in ways.items():
                task_ids = fresh()
                start = time.perf_counter()
                for task_id in task_ids:
                    claim(task_id)
                times[name].append((time.perf_counter() - start) / args.tasks * 1000)
                # Untimed: end the round's runs, freeing their slots, and vacuum
                # their dead index entries away as autovacuum does between bursts.
                raw.execute(
                    "UPDATE queuestore_tasks SET status = 'completed', worker_id = NULL, "
                    "lease_expires_at = NULL WHERE worker_id = 'w'"
                )
                raw.execute("VACUUM queuestore_tasks")
        raw.close()
        store.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"claims: {args.tasks} per way and round, {args.rounds} rounds, median ms per claim")
    for name, value in medians.items():
        print(f"  {name:8} {value:.3f} ms")
    print(f"  limited / store: {medians['limited'] / medians['store']:.2f}x")
    print(f"  store / raw:     {medians['store'] / medians['raw']:.2f}x")
    print(f"  limited / raw:   {medians['limited'] / medians['raw']:.2f}x")


if __name__ == "__main__":
    main()
