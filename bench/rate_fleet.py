"""Rate limits across a fleet: four worker processes under 10 starts a second, 60 s.

A ``celery worker --concurrency 4 --beat`` (real processes, PostgreSQL, Redis)
runs ``bench.call`` under ``QUEUESTORE_RATE_LIMITS={"bench.call": {"limit": 10,
"per": 1}}``; the bench submits ``rate * seconds`` tasks at once (a backlog that
keeps the limit busy) and reads each task's start (``started_at``, the
database's clock at the claim) when all have run. It prints the most starts in
any one-second window (the limit holds when it is at most 10), and the
throughput over the run: starts / (last start - first start + 1 / rate), as a
share of the limit (the target is at least 95 %).

    uv run python bench/rate_fleet.py [--rate 10] [--seconds 60] [--processes 4]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import sys
import time
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

from benchkit import HERE, process, scratch_database

from queuestore import TERMINAL, Settings

REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def most_in_a_window(starts: list[float], window: float) -> int:
    """The most starts in any half-open window of ``window`` seconds."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, start in enumerate(starts):
        while starts[first] <= start - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=int, default=10, help="starts a second")
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    tasks = args.rate * args.seconds
    with (
        scratch_database("queuestore_bench_fleet", migrate=True) as url,
        TemporaryDirectory() as home,
    ):
        env = os.environ | {
            "QUEUESTORE_DATABASE_URL": url,
            "QUEUESTORE_BROKER_URL": REDIS,
            "QUEUESTORE_HOME": home,
            "QUEUESTORE_RATE_LIMITS": json.dumps({"bench.call": {"limit": args.rate, "per": 1}}),
            "QUEUESTORE_LEASE": "3",
            "QUEUESTORE_HEARTBEAT_INTERVAL": "0.25",
            "QUEUESTORE_SWEEP_INTERVAL": "1",
            "QUEUESTORE_PUBLISH_GRACE": "1",
            "QUEUESTORE_AUTO_MIGRATE": "false",
            "QUEUESTORE_LOG_LEVEL": "INFO",
            "BENCH_QUEUE": f"bench_fleet_{secrets.token_hex(4)}",
            "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]),
        }
        settings = Settings(_env_file=None, **_settings_of(env))
        command = [
            sys.executable, "-m", "celery", "-A", "rate_fleet_app", "worker",
            f"--concurrency={args.processes}", "--beat", f"--schedule={Path(home) / 'beat'}",
            "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=INFO",
            f"--queues={env['BENCH_QUEUE']}",
        ]  # fmt: skip
        log = Path(os.environ.get("BENCH_LOG", Path(home) / "worker.log"))
        with process(command, env, log):
            from celery import Celery

            app = settings.configure(Celery("bench_fleet"))
            app.conf.task_default_queue = env["BENCH_QUEUE"]
            store = settings.make_store()
            queue = settings.make_queue(app, store)
            time.sleep(5)  # the worker's start
            submitted = queue.submit_many([{"name": "bench.call"} for _ in range(tasks)])
            ids = [task.id for task in submitted]
            deadline = time.monotonic() + args.seconds * 3 + 60
            while time.monotonic() < deadline:
                done = [store.get(task_id) for task_id in ids]
                if all(task.status in TERMINAL for task in done):
                    break
                time.sleep(2)
            starts = [t.started_at.timestamp() for t in done if t.started_at is not None]
            store.close()
    span = max(starts) - min(starts) + 1 / args.rate
    most = most_in_a_window(starts, 1.0)
    print(f"fleet: {args.processes} worker processes, limit {args.rate}/s, {tasks} tasks")
    print(f"  started: {len(starts)} of {tasks} over {span:.1f} s")
    print(f"  most starts in any one-second window: {most} (limit {args.rate})")
    print(f"  throughput: {len(starts) / span:.2f}/s = {len(starts) / span / args.rate:.1%} of it")
    first = min(starts)
    per_ten = [0] * (int(span // 10) + 1)
    for start in starts:
        per_ten[int((start - first) // 10)] += 1
    print(f"  starts per 10 s: {per_ten}")
    if os.environ.get("BENCH_DETAIL"):
        per_second = [0] * (int(span) + 1)
        for start in starts:
            per_second[int(start - first)] += 1
        print(f"  starts per second: {per_second}")
        gaps = sorted((b - a, a - first) for a, b in itertools.pairwise(sorted(starts)))[-10:]
        print("  longest gaps (gap, at):", [(round(g, 2), round(at, 1)) for g, at in gaps])


def _settings_of(env: dict[str, str]) -> dict[str, object]:
    names = ("DATABASE_URL", "BROKER_URL", "HOME", "RATE_LIMITS", "LEASE", "AUTO_MIGRATE")
    given: dict[str, object] = {n.lower(): env[f"QUEUESTORE_{n}"] for n in names}
    given["heartbeat_interval"] = timedelta(seconds=0.25)
    return given


if __name__ == "__main__":
    main()
