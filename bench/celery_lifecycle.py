"""Celery lifecycle benchmark: queuestore against bare Celery and Celery's database backend.

    uv run python bench/celery_lifecycle.py [--tasks N] [--rounds R] [--pool solo|prefork]
        [--only throughput|cancel|memory|wakeups] [--quick]

Needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres,
trust). In one run it:

1. measures queuestore's full lifecycle throughput (``TaskQueue.submit`` ->
   claim -> progress -> artifact -> completed) with one solo worker, on
   queuestore's defaults: the job's progress and artifact are batched
   (``report_interval``) and so go with the outcome's write, and publish
   marks are written in batches, so a task costs three statements (insert,
   claim, outcome) plus its share of a batched mark;
2. measures bare Celery (trivial task, no result backend) with the same setup;
3. measures Celery with its SQLAlchemy result backend on the same PostgreSQL;
4. measures cancel-to-stopped latency on the prefork pool (revoke with
   SIGUSR1) and on the solo pool (the heartbeat thread's LISTEN/NOTIFY);
5. samples a solo worker's RSS over 20,000 lifecycle tasks;
6. counts how many worker wakeups a completion causes with 8 solo workers
   (each worker's heartbeat thread counts its listener's returns with changes).

Throughput (1)-(3) runs once with every worker on the solo pool and once with
every worker on the prefork pool, concurrency 2 (``--pool`` picks one).

Every worker runs ``celery worker --pool=solo --without-heartbeat
--without-gossip --without-mingle -l warning`` with ``task_acks_late`` and
``worker_prefetch_multiplier=1`` (the prefork cancel run swaps only the pool).
Rounds of (1)-(3) are interleaved and their medians compared. The script
creates a scratch database ``queuestore_bench_<random>`` from the ``test``
template and a dedicated Redis database, and removes both at the end, along
with every worker it started, even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
from benchkit import RAW_INSERT
from psycopg import sql
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

from queuestore.run.tether import tethered

HERE = Path(__file__).resolve().parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_TEMPLATE = "test"
LOCK_KEY = "bench:celery_lifecycle:lock"
CANCEL_TIMEOUT = 10.0
WORKER_FLAGS = [
    "--without-heartbeat",
    "--without-gossip",
    "--without-mingle",
    "-l",
    "warning",
]
FAIRNESS = (
    "all workers: celery worker --pool=solo --without-heartbeat --without-gossip "
    "--without-mingle -l warning; task_acks_late=True, worker_prefetch_multiplier=1, "
    "JSON, same Redis broker; the prefork cancel run uses --pool=prefork --concurrency=1; "
    "the prefork throughput run puts every worker on --pool=prefork --concurrency=2"
)

console = Console(width=max(Console().width, 110))


# -- services ---------------------------------------------------------------


@contextlib.contextmanager
def scratch_database(settings: list[str]) -> Iterator[str]:
    """A fresh database copied from the ``test`` template, dropped at the end.

    ``settings`` (``name=value``) are set on the database for every session,
    e.g. ``synchronous_commit=off`` to see what commits cost.
    """
    name = f"queuestore_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        for attempt in range(20):
            try:
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{PG_TEMPLATE}"')
                break
            except psycopg.errors.ObjectInUse:
                # Someone is connected to the template; wait a little, then give up on it.
                if attempt == 19:
                    console.print(f"[yellow]template {PG_TEMPLATE!r} busy; using template0")
                    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
                    break
                time.sleep(0.5)
        for setting in settings:
            key, _, value = setting.partition("=")
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(key), sql.Literal(value)
                )
            )
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Worker:
    """A ``celery worker`` subprocess started by this script, stopped by its pid."""

    target: str
    pool: str
    env: dict[str, str]
    profile: str | None = None
    concurrency: int = 1
    command: list[str] | None = None  # not a Celery worker: this command instead
    process: subprocess.Popen[bytes] | None = None
    log: Any = field(default=None, repr=False)

    def start(self, r: redis.Redis, timeout: float = 60.0) -> Worker:
        env = dict(self.env)
        if self.profile:
            env["BENCH_PROFILE"] = self.profile
        if self.command is not None:
            command = self.command
        else:
            command = [sys.executable, "-m", "celery", "-A", self.target, "worker"]
            command += [f"--pool={self.pool}", *WORKER_FLAGS]
            if self.pool == "prefork":
                command.append(f"--concurrency={self.concurrency}")
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        # Tethered: if this script dies (a failed warm-up, a SIGKILL), so does the worker.
        self.process = subprocess.Popen(
            tethered(command),
            cwd=HERE,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _ACTIVE.append(self)
        key = f"bench:ready:{self.process.pid}"
        deadline = time.monotonic() + timeout
        while not r.exists(key):
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = self.output()
                self.stop()
                raise RuntimeError(f"worker {self.target} did not start:\n{output}")
            time.sleep(0.05)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def output(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self, timeout: float = 15.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL to the worker's own process group."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        # Prefork children share the session we created for the worker.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.log is not None:
            self.log.close()
            self.log = None


_ACTIVE: list[Worker] = []


@contextlib.contextmanager
def running(worker: Worker, r: redis.Redis) -> Iterator[Worker]:
    worker.start(r)
    try:
        yield worker
    except BaseException:
        console.print(f"[red]worker {worker.target} ({worker.pool}) said:[/]\n{worker.output()}")
        raise
    finally:
        worker.stop()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

POOLS = {"solo": ("solo", 1), "prefork": ("prefork", 2)}
"""The throughput runs' pools: ``celery worker --pool=<pool> --concurrency=<n>`` on every side."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0 if it is gone), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live descendants (a prefork worker's children)."""
    total = cpu_seconds(pid)
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for thread in Path(f"/proc/{pid}/task").iterdir():
            for child in (thread / "children").read_text().split():
                total += tree_cpu_seconds(int(child))
    return total


def wait_until(
    done: Callable[[], bool], *, timeout: float, poll: float = 0.02, what: str = "condition"
) -> float:
    """Poll ``done`` until true; return the monotonic time it was first seen true."""
    deadline = time.monotonic() + timeout
    while True:
        if done():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


# -- the measurements -----------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    r: redis.Redis
    pg_url: str
    env: dict[str, str]
    m: Any  # the lifecycle_app module
    pm: Any  # the procrastinate_app module
    db: psycopg.Connection[Any]
    producer_cpu: float = 0.0
    cpu: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    stopped_by: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"prefork": {}, "solo": {}}
    )

    def count(self, query: str) -> int:
        try:
            row = self.db.execute(query).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
        return int(row[0]) if row else 0

    def completed(self) -> int:
        return self.count("SELECT count(*) FROM queuestore_tasks WHERE status = 'completed'")

    def backend_cpu(self) -> float:
        """CPU seconds of the PostgreSQL backends on the scratch database, but ours."""
        rows = self.db.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return sum(cpu_seconds(pid) for (pid,) in rows)

    def measured(self, label: str, worker: Worker, run: Callable[[], float], n: int) -> float:
        """Run one round; note CPU ms per task of the worker, the producer and PostgreSQL."""
        worker_cpu, pg_cpu = tree_cpu_seconds(worker.pid), self.backend_cpu()
        self.producer_cpu = 0.0
        rate = run()
        self.cpu.setdefault(label, []).append(
            (
                (tree_cpu_seconds(worker.pid) - worker_cpu) * 1000 / n,
                self.producer_cpu * 1000 / n,
                (self.backend_cpu() - pg_cpu) * 1000 / n,
            )
        )
        return rate

    def truncate(self, table: str) -> None:
        with contextlib.suppress(psycopg.errors.UndefinedTable):
            self.db.execute(f"TRUNCATE {table}")

    # (1) queuestore full lifecycle
    def queuestore_round(self, n: int) -> float:
        self.truncate("queuestore_tasks")
        queue = self.m.queue
        profiler = cProfile.Profile(time.thread_time) if self.args.profile else None
        start = time.monotonic()
        cpu = time.process_time()
        if profiler is not None:
            profiler.enable()
        for i in range(n):
            queue.submit("bench.lifecycle", {"n": i})
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{self.args.profile}/producer.prof")
        self.producer_cpu = time.process_time() - cpu
        end = wait_until(
            lambda: self.completed() >= n, timeout=60 + n / 10, what="queuestore tasks"
        )
        # The marks still waiting for their delay are the producer's work too.
        cpu = time.process_time()
        queue.publisher.marks.flush()
        self.producer_cpu += time.process_time() - cpu
        return n / (end - start)

    # (1c) the floor: bare Celery + the three writes as raw statements
    def floor_round(self, n: int) -> float:
        self.truncate("queuestore_tasks")
        send = self.m.floor_app.send_task
        start = time.monotonic()
        cpu = time.process_time()
        for i in range(n):
            task_id = str(uuid.uuid4())
            self.db.execute(
                RAW_INSERT, (task_id, "bench.floor", Jsonb({"n": i})), prepare=True
            ).fetchone()
            send("bench.floor", args=(task_id,), task_id=task_id)
        self.producer_cpu = time.process_time() - cpu
        end = wait_until(lambda: self.completed() >= n, timeout=60 + n / 10, what="floor tasks")
        return n / (end - start)

    # (2) bare Celery
    def bare_round(self, n: int) -> float:
        self.r.set(self.m.COUNTER_KEY, 0)
        send = self.m.bare_app.send_task
        start = time.monotonic()
        cpu = time.process_time()
        for _ in range(n):
            send("bench.noop")
        self.producer_cpu = time.process_time() - cpu
        end = wait_until(
            lambda: int(self.r.get(self.m.COUNTER_KEY) or 0) >= n,
            timeout=60 + n / 10,
            what="bare tasks",
        )
        return n / (end - start)

    # (3) Celery + SQLAlchemy result backend
    def db_backend_round(self, n: int) -> float:
        self.truncate("celery_taskmeta")
        send = self.m.db_app.send_task
        start = time.monotonic()
        cpu = time.process_time()
        for _ in range(n):
            send("bench.noop")
        self.producer_cpu = time.process_time() - cpu
        end = wait_until(
            lambda: (
                self.count("SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'") >= n
            ),
            timeout=60 + n / 5,
            what="database backend results",
        )
        return n / (end - start)

    # (1b) procrastinate, the same lifecycle, state in a side table
    def procrastinate_round(self, n: int) -> float:
        self.truncate(self.pm.STATE_TABLE)
        defer = self.pm.lifecycle.defer
        start = time.monotonic()
        cpu = time.process_time()
        for i in range(n):
            defer(n=i)
        self.producer_cpu = time.process_time() - cpu
        end = wait_until(
            lambda: (
                self.count(f"SELECT count(*) FROM {self.pm.STATE_TABLE} WHERE result IS NOT NULL")
                >= n
            ),
            timeout=60 + n / 10,
            what="procrastinate jobs",
        )
        return n / (end - start)

    def procrastinate_worker(self, concurrency: int) -> Worker:
        command = [sys.executable, "-m", "procrastinate", "--app=procrastinate_app.app"]
        command += ["worker", f"--concurrency={concurrency}", f"--queues={self.pm.QUEUE}"]
        env = self.env | {"BENCH_PROCRASTINATE_WORKER": "1"}
        return Worker("procrastinate_app.app", "asyncio", env, None, concurrency, command)

    def throughput(self, pool: str) -> dict[str, list[float]]:
        """Interleaved rounds of the three runs, every worker on ``pool`` (``POOLS``)."""
        n, rounds = self.args.tasks, self.args.rounds
        profile = self.args.profile
        celery_pool, concurrency = POOLS[pool]

        def worker(target: str, name: str) -> Worker:
            stats = profile and f"{profile}/{name}{'' if pool == 'solo' else '-' + pool}.prof"
            return Worker(target, celery_pool, self.env, stats, concurrency)

        workers = [
            worker("lifecycle_app:app", "queuestore"),
            worker("lifecycle_app:bare_app", "bare"),
            worker("lifecycle_app:db_app", "db"),
            self.procrastinate_worker(concurrency),
            worker("lifecycle_app:floor_app", "floor"),
        ]
        results: dict[str, list[float]] = {
            "queuestore": [],
            "bare": [],
            "db": [],
            "procrastinate": [],
            "floor": [],
        }
        try:
            for each in workers:
                each.start(self.r)
            console.print(f"{pool}: warm-up ({max(n // 5, 50)} tasks each) ...")
            warm = max(n // 5, 50)
            self.queuestore_round(warm)
            self.bare_round(warm)
            self.db_backend_round(warm)
            self.procrastinate_round(warm)
            self.floor_round(warm)
            for number in range(1, rounds + 1):
                # Interleaved, so drift in the machine's load hits all three alike.
                for mode, each, run in (
                    ("queuestore", workers[0], self.queuestore_round),
                    ("bare", workers[1], self.bare_round),
                    ("db", workers[2], self.db_backend_round),
                    ("procrastinate", workers[3], self.procrastinate_round),
                    ("floor", workers[4], self.floor_round),
                ):
                    label = mode if pool == "solo" else f"{mode}, {pool}"
                    results[mode].append(self.measured(label, each, lambda r=run: r(n), n))
                console.print(
                    f"{pool} round {number}/{rounds}: "
                    f"queuestore {results['queuestore'][-1]:7.1f}/s  "
                    f"bare {results['bare'][-1]:7.1f}/s  db-backend {results['db'][-1]:7.1f}/s  "
                    f"procrastinate {results['procrastinate'][-1]:7.1f}/s  "
                    f"floor {results['floor'][-1]:7.1f}/s"
                )
        except BaseException:
            for each in workers:
                console.print(f"[red]worker {each.target} said:[/]\n{each.output()[-3000:]}")
            raise
        finally:
            for each in workers:
                each.stop()
        return results

    # (6) wakeups: how many workers a completion wakes
    def wakeups(self, workers: int, n: int) -> tuple[int, int]:
        """Worker wakeups by changes, and completions, over ``n`` tasks on ``workers`` workers.

        Each worker counts (in Redis) the times its heartbeat thread's listener
        returned with changes; a listener on the general channel
        ``queuestore_tasks``, which every worker listened to before, counts
        what each of them would have been woken by.
        """
        self.truncate("queuestore_tasks")
        env = self.env | {"BENCH_COUNT_WAKEUPS": "1"}
        self.r.set(self.m.WAKEUPS_KEY, 0)
        started = [Worker("lifecycle_app:app", "solo", env) for _ in range(workers)]
        try:
            for each in started:
                each.start(self.r)
            with psycopg.connect(self.pg_url, autocommit=True) as listener:
                listener.execute("LISTEN queuestore_tasks")
                for i in range(n):
                    self.m.queue.submit("bench.lifecycle", {"n": i})
                wait_until(lambda: self.completed() >= n, timeout=60 + n / 10, what="tasks")
                time.sleep(0.5)  # let the last notifications arrive
                announced = sum(1 for _ in listener.notifies(timeout=0.5))
        finally:
            for each in started:
                each.stop()
        return int(self.r.get(self.m.WAKEUPS_KEY) or 0), announced

    # (4) cancel -> stopped
    def cancel_latency(self, pool: str, samples: int) -> list[float]:
        queue = self.m.queue
        queue.publisher.options = dataclasses.replace(
            queue.options, terminate_on_cancel=pool == "prefork"
        )
        env = self.env | {"QUEUESTORE_TERMINATE_ON_CANCEL": str(pool == "prefork").lower()}
        latencies: list[float] = []
        with running(Worker("lifecycle_app:app", pool, env), self.r) as worker:
            for index in range(samples + 3):  # the first three warm the worker up
                task = queue.submit("bench.cooperative", {"limit": CANCEL_TIMEOUT + 5})
                started = self.m.STARTED_KEY.format(task_id=task.id)
                stopped = self.m.STOPPED_KEY.format(task_id=task.id)
                wait_until(lambda key=started: self.r.exists(key), timeout=30, what="job start")
                # Cancel at a random point of the job's loop, after its heartbeat has run.
                time.sleep(0.05 + secrets.randbelow(50) / 1000)
                sent = time.time()
                queue.cancel(task.id)
                try:
                    wait_until(
                        lambda key=stopped: self.r.exists(key),
                        timeout=CANCEL_TIMEOUT,
                        poll=0.002,
                        what="stop",
                    )
                except TimeoutError:
                    # A miss, counted at the timeout; the job ends by itself soon after.
                    status = self.m.store.get(task.id).status
                    console.print(
                        f"[red]{pool}: task {task.id} ({status}) still ran "
                        f"{CANCEL_TIMEOUT:.0f}s after its cancel; worker said:[/]\n"
                        f"{worker.output()[-1500:]}"
                    )
                    seen, how = repr(sent + CANCEL_TIMEOUT), f"not-stopped-in-{CANCEL_TIMEOUT:.0f}s"
                else:
                    seen, how = self.r.get(stopped).decode().split()
                if index >= 3:
                    latencies.append(float(seen) - sent)
                    self.stopped_by[pool][how] = self.stopped_by[pool].get(how, 0) + 1
        return latencies

    # (5) memory over many tasks
    def memory(self, total: int, every: int) -> list[tuple[int, int]]:
        self.truncate("queuestore_tasks")
        queue = self.m.queue
        samples: list[tuple[int, int]] = []
        with running(Worker("lifecycle_app:app", "solo", self.env), self.r) as worker:
            samples.append((0, worker.rss_kib()))
            for done in range(every, total + 1, every):
                for i in range(every):
                    queue.submit("bench.lifecycle", {"n": done - every + i})
                wait_until(
                    lambda target=done: self.completed() >= target,
                    timeout=120,
                    poll=0.05,
                    what=f"{done} tasks",
                )
                samples.append((done, worker.rss_kib()))
                if done % (every * 5) == 0:
                    console.print(f"  {done:6d} tasks: RSS {samples[-1][1] / 1024:.1f} MiB")
        return samples


# -- report -------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def report(
    throughput: dict[str, dict[str, list[float]]],
    cpu: dict[str, list[tuple[float, float, float]]],
    *,
    cancel: dict[str, list[float]],
    memory: list[tuple[int, int]] | None,
    wakeups: tuple[int, int, int] | None,
    warm_after: int,
    args: argparse.Namespace,
) -> bool:
    table = Table(title=f"Celery lifecycle benchmark (N={args.tasks}, medians of {args.rounds})")
    for column in ("figure", "value", "baseline", "ratio", "target", "result"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    verdicts: list[bool] = []

    def row(figure: str, value: str, baseline: str, ratio: str, *, target: str, ok: bool) -> None:
        verdicts.append(ok)
        table.add_row(figure, value, baseline, ratio, target, "[green]PASS" if ok else "[red]MISS")

    for pool, rates in throughput.items():
        qs = statistics.median(rates["queuestore"])
        bare = statistics.median(rates["bare"])
        db = statistics.median(rates["db"])
        where = "" if pool == "solo" else f", {pool} -c {POOLS[pool][1]}"
        row(
            f"lifecycle throughput vs bare Celery{where}",
            f"{qs:.0f} tasks/s",
            f"{bare:.0f} tasks/s",
            f"{qs / bare:.2f}x",
            target=">= 0.5x",
            ok=qs / bare >= 0.5,
        )
        floor = statistics.median(rates["floor"])
        row(
            f"floor (bare + raw insert, claim, complete) vs bare{where}",
            f"{floor:.0f} tasks/s",
            f"{bare:.0f} tasks/s",
            f"{floor / bare:.2f}x",
            target="(a bound)",
            ok=True,
        )
        row(
            f"lifecycle throughput vs the floor{where}",
            f"{qs:.0f} tasks/s",
            f"{floor:.0f} tasks/s",
            f"{qs / floor:.2f}x",
            target="(<= 1x)",
            ok=True,
        )
        row(
            f"lifecycle throughput vs Celery db backend{where}",
            f"{qs:.0f} tasks/s",
            f"{db:.0f} tasks/s",
            f"{qs / db:.2f}x",
            target=">= 5x",
            ok=qs / db >= 5,
        )
        peer = statistics.median(rates["procrastinate"])
        row(
            f"lifecycle throughput vs procrastinate 3.10{where}",
            f"{qs:.0f} tasks/s",
            f"{peer:.0f} tasks/s",
            f"{qs / peer:.2f}x",
            target=">= 2x",
            ok=qs / peer >= 2,
        )
    if wakeups is not None:
        woken, announced, workers = wakeups
        row(
            f"worker wakeups per completion, {workers} workers",
            f"{woken / announced:.2f}",
            f"{workers:.2f} (all LISTEN queuestore_tasks)",
            f"{woken} / {announced}",
            target="<= 1",
            ok=woken <= announced,
        )
    for pool, values in cancel.items():
        ms = [value * 1000 for value in values]
        row(
            f"cancel->stopped p50, {pool} (n={len(ms)})",
            f"{percentile(ms, 0.5):.0f} ms",
            "",
            "",
            target="< 200 ms",
            ok=percentile(ms, 0.5) < 200,
        )
        row(
            f"cancel->stopped p99, {pool} (n={len(ms)})",
            f"{percentile(ms, 0.99):.0f} ms",
            f"max {max(ms):.0f} ms",
            "",
            target="< 1000 ms",
            ok=percentile(ms, 0.99) < 1000,
        )
    if memory is not None:
        base = dict(memory)[warm_after]
        last_count, last = memory[-1]
        growth = (last - base) / base
        row(
            f"worker RSS over {last_count:,} tasks",
            f"{last / 1024:.1f} MiB",
            f"{base / 1024:.1f} MiB @ {warm_after:,}",
            f"{growth * 100:+.1f}%",
            target="< +10% after warm-up",
            ok=growth < 0.10,
        )
    console.print(table)
    if any(cpu.values()):
        costs = Table(title="CPU per task, ms (medians over the rounds)")
        for column in ("run", "worker", "producer (submit)", "PostgreSQL backends", "sum"):
            costs.add_column(column, justify="left" if column == "run" else "right")
        for mode, values in cpu.items():
            if not values:
                continue
            columns = [statistics.median(column) for column in zip(*values, strict=True)]
            pg = f"{columns[2]:.2f}" + (" (+1 new backend per task)" if mode == "db" else "")
            costs.add_row(mode, f"{columns[0]:.2f}", f"{columns[1]:.2f}", pg, f"{sum(columns):.2f}")
        console.print(costs)
    console.print(f"[dim]fairness: {FAIRNESS}")
    for pool, rates in throughput.items():
        console.print(
            f"[dim]throughput, {pool}: from the first submit until the store/counter/result "
            "table shows all N done (polled every 20 ms); rounds: "
            + ", ".join(f"{k} {' '.join(f'{v:.0f}' for v in vs)}" for k, vs in rates.items())
        )
    if memory is not None:
        console.print(
            "[dim]memory (tasks: MiB): "
            + ", ".join(f"{count}: {rss / 1024:.1f}" for count, rss in memory)
        )
    console.print(f"[dim]load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    return all(verdicts)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--cancel-samples", type=int, default=60)
    parser.add_argument("--memory-tasks", type=int, default=20_000)
    parser.add_argument("--redis-db", type=int, default=14, help="dedicated, flushed (14)")
    parser.add_argument("--quick", action="store_true", help="small numbers: a smoke run")
    parser.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set on the scratch database (diagnosis, e.g. synchronous_commit=off)",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="run the throughput workers under cProfile, stats in DIR"
    )
    parser.add_argument(
        "--only",
        choices=["throughput", "cancel", "memory", "wakeups"],
        action="append",
        default=None,
    )
    parser.add_argument(
        "--pool",
        choices=sorted(POOLS),
        action="append",
        default=None,
        help="throughput with every worker on this pool: solo, or prefork -c 2 (default: both)",
    )
    parser.add_argument("--wakeup-workers", type=int, default=8)
    parser.add_argument("--wakeup-tasks", type=int, default=400)
    args = parser.parse_args()
    return args


def measure(bench: Bench, parts: set[str], *, every: int, warm_after: int) -> bool:
    """Run the parts asked for and print the report; True if every figure passed."""
    args = bench.args
    throughput = {}
    if "throughput" in parts:
        for pool in args.pool or ["solo", "prefork"]:
            throughput[pool] = bench.throughput(pool)
    cancel: dict[str, list[float]] = {}
    if "cancel" in parts:
        for pool in ("prefork", "solo"):
            console.print(f"cancel latency, {pool} pool ...")
            cancel[pool] = bench.cancel_latency(pool, args.cancel_samples)
            console.print(f"  the job saw the stop as: {bench.stopped_by[pool]}")
    memory = None
    if "memory" in parts:
        console.print(f"memory over {args.memory_tasks:,} tasks ...")
        memory = bench.memory(args.memory_tasks, every)
    wakeups = None
    if "wakeups" in parts:
        console.print(f"wakeups, {args.wakeup_workers} workers ...")
        woken, announced = bench.wakeups(args.wakeup_workers, args.wakeup_tasks)
        wakeups = (woken, announced, args.wakeup_workers)
    return report(
        throughput,
        bench.cpu,
        cancel=cancel,
        memory=memory,
        wakeups=wakeups,
        warm_after=warm_after,
        args=args,
    )


def main() -> int:
    args = parse_args()
    if args.quick:
        args.tasks, args.rounds, args.cancel_samples, args.memory_tasks = 200, 2, 10, 2000
        args.wakeup_tasks = 100
    every = max(args.memory_tasks // 20, 1)
    warm_after = min(2 * every, args.memory_tasks)
    parts = set(args.only or ["throughput", "cancel", "memory", "wakeups"])

    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    r = redis.Redis.from_url(redis_url)
    if r.exists(LOCK_KEY):
        console.print(
            f"[red]another run holds redis db {args.redis_db} ({LOCK_KEY}); "
            "wait for it or pass --redis-db"
        )
        return 2
    r.flushdb()
    run = secrets.token_hex(4)
    r.set(LOCK_KEY, run, ex=7200)
    ok = False
    try:
        with scratch_database(args.pg_setting) as pg_url:
            env = os.environ | {
                "QUEUESTORE_DATABASE_URL": pg_url,
                "QUEUESTORE_BROKER_URL": redis_url,
                "QUEUESTORE_AUTO_MIGRATE": "false",
                "BENCH_REDIS_URL": redis_url,
                "BENCH_RUN": run,
                "BENCH_FLOOR_URL": pg_url,
                "BENCH_RESULT_BACKEND": pg_url.replace("postgresql://", "db+postgresql+psycopg://"),
                "PYTHONPATH": os.pathsep.join(
                    [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
                ).rstrip(os.pathsep),
            }
            os.environ.update(env)
            sys.path.insert(0, str(HERE))
            import lifecycle_app as m
            import procrastinate_app as pm

            with m.store.engine.connect():
                pass  # the dialect learns the server's defaults on its first connection
            m.store.migrate()
            pm.app.open()
            pm.app.schema_manager.apply_schema()
            with psycopg.connect(pg_url, autocommit=True) as db:
                db.execute(pm.CREATE_STATE_TABLE)
                bench = Bench(args, r, pg_url, env, m, pm, db)
                ok = measure(bench, parts, every=every, warm_after=warm_after)
                m.store.engine.dispose()
                pm.app.close()
    finally:
        for worker in list(_ACTIVE):
            worker.stop()
        r.flushdb()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
