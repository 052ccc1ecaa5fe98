"""A 100-child fan-out and fan-in: queuestore's children against Celery's chord.

    uv run python bench/fan_in.py [--parents 10] [--children 100] [--workers 2] [--kill]
        [--redis redis://127.0.0.1:6379/4]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and Redis. It
creates a scratch database ``queuestore_fan_in_<random>`` (dropped at the
end); both sides use the same Redis database as their broker and the same
PostgreSQL database, and run ``--workers`` solo workers each
(``task_acks_late``, ``worker_prefetch_multiplier=1``, JSON):

- queuestore: a parent task (``fan_in.fan_out``) spawns ``--children``
  ``fan_in.square`` children with ``ctx.spawn_many``, waits for them without
  holding a worker (``ctx.wait_results``) and returns their sum; timed from
  ``submit`` to ``completed`` (``queue.result``). One worker runs beat.
- Celery: ``chord(group(square.s(i) ...), total.s()).apply_async()`` with
  ``result_backend="db+postgresql+psycopg://..."`` on the same database
  (Celery joins a chord there by polling, ``celery.chord_unlock``), timed
  to ``AsyncResult.get()``.

Parents run one at a time, the two sides' rounds interleaved. It prints the
median per fan-out, children per second, and the ratio. With ``--kill`` it
then runs one fan-out on each side, SIGKILLs a worker once half the children
finished, starts another, and reports whether each completed within 120 s
with every result.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis
from benchkit import scratch_database

HERE = Path(__file__).resolve().parent
WORKER_FLAGS = ["--pool=solo", "--without-heartbeat", "--without-gossip", "--without-mingle"]


class Worker:
    """A ``celery worker`` of one app, in its own session, logging to a file."""

    def __init__(self, target: str, env: dict[str, str], *, beat: bool = False) -> None:
        self.target = target
        self.env = env
        self.beat = beat
        self.log = tempfile.NamedTemporaryFile(suffix=".log", delete=False)  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, r: redis.Redis) -> Worker:
        command = [sys.executable, "-m", "celery", "-A", self.target, "worker", *WORKER_FLAGS]
        command += ["-l", "warning"]
        if self.beat:
            command += ["--beat", f"--schedule={self.log.name}.beat"]
        self.process = subprocess.Popen(
            command,
            cwd=HERE,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not r.exists(f"bench:ready:{self.process.pid}"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.target} did not start: {self.output()}")
            time.sleep(0.05)
        return self

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """SIGKILL the worker's whole process group: a worker dying without warning."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        Path(self.log.name).unlink(missing_ok=True)


@contextlib.contextmanager
def workers(
    targets: list[tuple[str, bool]], env: dict[str, str], r: redis.Redis
) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for target, beat in targets:
            started.append(Worker(target, env, beat=beat).start(r))
        yield started
    finally:
        for worker in started:
            worker.stop()


def queuestore_fan_out(app: Any, children: int) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        parent = app.queue.submit("fan_in.fan_out", {"n": children})
        done = app.queue.result(parent.id, timeout=120)
        if done.result != sum(i * i for i in range(children)):
            raise RuntimeError(f"queuestore's fan-out ended {done.status}: {done.error}")
        return time.perf_counter() - start

    return run


def chord_fan_out(app: Any, children: int) -> Callable[[], float]:
    from celery import chord, group

    def run() -> float:
        start = time.perf_counter()
        header = group(app.chord_square.s(i) for i in range(children))
        result = chord(header)(app.chord_total.s())
        total = result.get(timeout=120)
        if total != sum(i * i for i in range(children)):
            raise RuntimeError(f"the chord summed {total}")
        return time.perf_counter() - start

    return run


def measure(args: argparse.Namespace, app: Any) -> None:
    sides = {
        "queuestore (spawn_many + wait_results)": queuestore_fan_out(app, args.children),
        "Celery chord (group + callback, db backend)": chord_fan_out(app, args.children),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():
        run()  # warm up
    for _ in range(args.parents):
        for name, run in sides.items():
            times[name].append(run())
    print(
        f"{args.parents} fan-outs of {args.children} children a side, {args.workers} solo "
        "workers a side, same Redis broker and PostgreSQL database; medians:"
    )
    print(f"  {'':44} {'s per fan-out':>14} {'children/s':>11}")
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"  {name:44} {value:14.3f} {args.children / value:11.0f}")
    ours, theirs = medians.values()
    print(f"  ratio (queuestore / chord): {ours / theirs:.2f}x  (target: below 1)")


def survive_a_kill(args: argparse.Namespace, app: Any, env: dict[str, str], r: redis.Redis) -> None:
    """One fan-out a side with a worker SIGKILLed half way; did it complete?"""
    print(f"--kill: a worker SIGKILLed once {args.children // 2} children finished:")
    db = psycopg.connect(env["QUEUESTORE_DATABASE_URL"], autocommit=True)
    with workers([("fan_in_app:qs_app", True), ("fan_in_app:qs_app", False)], env, r) as qs:
        parent = app.queue.submit("fan_in.fan_out", {"n": args.children})
        _wait_count(
            db,
            "SELECT count(*) FROM queuestore_tasks WHERE parent_id = %s AND status = 'completed'",
            (parent.id,),
            args.children // 2,
        )
        qs[1].kill()
        qs.append(Worker("fan_in_app:qs_app", env).start(r))
        try:
            done = app.queue.result(parent.id, timeout=120)
            print(f"  queuestore: {done.status}, result {'right' if done.result else done.error}")
        except TimeoutError:
            print("  queuestore: not completed within 120 s")
    from celery import chord, group

    with workers([("fan_in_app:chord_app", False)] * 2, env, r) as celery_workers:
        result = chord(group(app.chord_square.s(i) for i in range(args.children)))(
            app.chord_total.s()
        )
        _wait_count(
            db,
            "SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'",
            (),
            args.children // 2,
        )
        celery_workers[1].kill()
        celery_workers.append(Worker("fan_in_app:chord_app", env).start(r))
        try:
            total = result.get(timeout=120)
            print(f"  Celery chord: completed, sum {'right' if total else total}")
        except Exception as exc:  # a lost header task leaves the callback unrun
            print(f"  Celery chord: not completed within 120 s ({type(exc).__name__})")
    db.close()


def _wait_count(db: psycopg.Connection[Any], query: str, params: Any, count: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        row = db.execute(query, params).fetchone()
        if row is not None and row[0] >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(query)
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parents", type=int, default=10)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/4")
    args = parser.parse_args()
    r = redis.Redis.from_url(args.redis)
    with scratch_database("queuestore_fan_in", migrate=True) as url:
        env = {
            key: value for key, value in os.environ.items() if not key.startswith("QUEUESTORE_")
        } | {
            "QUEUESTORE_DATABASE_URL": url,
            "QUEUESTORE_BROKER_URL": args.redis,
            "QUEUESTORE_AUTO_MIGRATE": "false",
            "QUEUESTORE_LEASE": "5",
            "QUEUESTORE_REAPER_INTERVAL": "1",
            "QUEUESTORE_SWEEP_INTERVAL": "1",
            "QUEUESTORE_PUBLISH_GRACE": "1",
            "BENCH_RESULT_BACKEND": "db+" + url.replace("postgresql://", "postgresql+psycopg://"),
            "BENCH_RUN": secrets.token_hex(4),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        }
        os.environ.update(env)
        sys.path.insert(0, str(HERE))
        import fan_in_app as app  # configured from the environment just set

        targets = [("fan_in_app:qs_app", True)] + [("fan_in_app:qs_app", False)] * (
            args.workers - 1
        )
        targets += [("fan_in_app:chord_app", False)] * args.workers
        try:
            with workers(targets, env, r):
                measure(args, app)
            if args.kill:
                survive_a_kill(args, app, env, r)
        finally:
            app.queue.store.close()
            for queue_name in (app.QS_QUEUE, app.CHORD_QUEUE):
                r.delete(queue_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
