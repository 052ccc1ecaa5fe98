"""A2A task store benchmark: queuestore's stores beside a2a-sdk's, on one PostgreSQL.

    uv run python bench/a2a_store.py [--tasks N] [--samples S] [--rounds R]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust). In one run, on one
scratch database ``queuestore_bench_a2a_<random>`` (dropped at the end), through
each store's own async A2A interface, the way ``DefaultRequestHandler`` calls it:

1. save of N new tasks (SUBMITTED, one user message in the history);
2. save of N updates (WORKING with an agent status message) -- the plain stores
   get the whole task, the versioned ones the status event and the version;
3. N gets;
4. a walk through 2,000 tasks of one owner, page size 100 (20 pages, every
   page with ``total_size``), beside 2,000 tasks of another owner;

for a2a-sdk's ``DatabaseTaskStore`` and ``VersionedDatabaseTaskStore`` (SQLAlchemy
asyncio + asyncpg) and queuestore's ``QueuestoreTaskStore`` and
``VersionedQueuestoreTaskStore`` (psycopg 3); and

5. the delay from a worker's write to the event reaching a subscriber: queuestore's
   ``QueuestoreEventStream`` (the change feed, LISTEN/NOTIFY) against a2a-sdk's
   ``DatabaseTaskEventStream`` (polls ``task_events`` every 0.5 s), each on its
   versioned store. The write is a task's completion (a status write, always
   announced on PostgreSQL) and, for queuestore, also a progress write
   (announced because the subscription follows its task by id: revision 0003).

After a warm-up (50 saves and gets per store), and again before each walk (after
its 4,000 tasks are saved, outside the timing), every table is ``ANALYZE``d, so
the planner has statistics even where autovacuum is off: without them a store's
walk flips between plans as its table grows (queuestore's versioned walk went
from 12-14 to 6 walks/s from the third of five rounds). Before each timed figure
the process's garbage is collected: a full collection of this process's heap
(both sides' objects) takes 80-100 ms here, longer than a whole walk, and
landed at random in one store's walk or another's. Calls run one after another
on one event loop (queuestore's store open on it, ``open_async``, as in
``A2AServer``'s lifespan); every figure is the median of
``--rounds`` rounds; ratios are queuestore's rate over ``DatabaseTaskStore``'s.

The floor beside them: the raw operation each figure cannot beat, one psycopg
statement (prepared, autocommit: one commit each) on a table of the SDK's shape
(an id key, owner and context columns, the task as one JSON document), timed in
the same rounds: INSERT for a new task, UPDATE of the document for an update,
SELECT by key for a get. A target above the floor is out of reach for any store
that commits each save, which both A2A interfaces require. A second floor runs
the same three statements from asyncio (psycopg's ``AsyncConnection``) on
queuestore's own table, with its indexes: what a store on that row can reach
from an event loop, before any of its own work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from a2a.helpers import new_text_message
from a2a.server.cluster import (
    DatabaseTaskEventStream,
    VersionedDatabaseTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabaseTaskStore
from a2a.types import (
    ListTasksRequest,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from benchkit import scratch_database
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import create_async_engine

from queuestore import SqlTaskStore
from queuestore import TaskStatus as Status
from queuestore.a2a import (
    NamedUser,
    QueuestoreEventStream,
    QueuestoreTaskStore,
    VersionedQueuestoreTaskStore,
)

WALK_TASKS = 2000
PAGE_SIZE = 100


ALICE = ServerCallContext(user=NamedUser("alice"))
BOB = ServerCallContext(user=NamedUser("bob"))


def new_task(context_id: str = "bench") -> Task:
    message = new_text_message("summarise the quarter", role=Role.ROLE_USER)
    task = Task(
        id=str(uuid.uuid4()),
        context_id=context_id,
        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
        history=[message],
    )
    task.status.timestamp.GetCurrentTime()
    return task


def working(task: Task) -> Task:
    updated = Task()
    updated.CopyFrom(task)
    updated.status.state = TaskState.TASK_STATE_WORKING
    updated.status.message.CopyFrom(new_text_message("reading", role=Role.ROLE_AGENT))
    updated.status.timestamp.GetCurrentTime()
    return updated


class Subject:
    """One store under test, behind the calls the request handler makes."""

    def __init__(self, name: str, store: Any, *, versioned: bool) -> None:
        self.name = name
        self.store = store
        self.versioned = versioned
        self.versions: dict[str, TaskVersion] = {}

    async def save_new(self, task: Task, context: ServerCallContext = ALICE) -> None:
        if self.versioned:
            self.versions[task.id] = await self.store.save(
                task, event=task, prev=None, prev_version=TaskVersion.MISSING, context=context
            )
        else:
            await self.store.save(task, context)

    async def save_update(self, task: Task) -> None:
        if self.versioned:
            event = TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
            self.versions[task.id] = await self.store.save(
                task, event=event, prev=None, prev_version=self.versions[task.id], context=ALICE
            )
        else:
            await self.store.save(task, ALICE)

    async def get(self, task_id: str) -> None:
        found = await self.store.get(task_id, ALICE)
        assert found is not None

    async def walk(self, context_id: str) -> int:
        seen, token = 0, ""
        while True:
            page = await self.store.list(
                ListTasksRequest(context_id=context_id, page_size=PAGE_SIZE, page_token=token),
                ALICE,
            )
            assert page.total_size == WALK_TASKS
            seen += len(page.tasks)
            token = page.next_page_token
            if not token:
                return seen


async def rate(calls: list[Callable[[], Awaitable[Any]]]) -> float:
    gc.collect()
    began = time.perf_counter()
    for call in calls:
        await call()
    return len(calls) / (time.perf_counter() - began)


def analyze_all(url: str) -> None:
    """``ANALYZE`` every table of the database at ``url``."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ANALYZE")


async def measure_store(
    subject: Subject, tasks: int, analyze: Callable[[], None]
) -> dict[str, float]:
    created = [new_task() for _ in range(tasks)]
    figures = {"save new": await rate([lambda t=t: subject.save_new(t) for t in created])}
    updated = [working(task) for task in created]
    figures["save update"] = await rate([lambda t=t: subject.save_update(t) for t in updated])
    figures["get"] = await rate([lambda t=t: subject.get(t.id) for t in created])
    walk_context = f"walk-{uuid.uuid4().hex[:8]}"
    for _ in range(WALK_TASKS):
        await subject.save_new(new_task(walk_context))
        await subject.save_new(new_task(walk_context), BOB)
    analyze()  # as autovacuum would, now that the walk's 4,000 rows are in
    gc.collect()
    began = time.perf_counter()
    assert await subject.walk(walk_context) == WALK_TASKS
    figures["list walk (walks/s)"] = 1 / (time.perf_counter() - began)
    return figures


FLOOR_TABLE = """
CREATE TABLE IF NOT EXISTS bench_floor (
    id text PRIMARY KEY, owner text NOT NULL, context_id text NOT NULL, body jsonb NOT NULL
)"""


def measure_floor(url: str, tasks: int) -> dict[str, float]:
    """Raw psycopg: one prepared statement and its commit per call."""
    body = '{"status": {"state": "TASK_STATE_SUBMITTED"}, "history": ["summarise the quarter"]}'
    ids = [str(uuid.uuid4()) for _ in range(tasks)]
    figures: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(FLOOR_TABLE)
        for figure, sql, params in (
            (
                "save new",
                "INSERT INTO bench_floor (id, owner, context_id, body) VALUES (%s, %s, %s, %s)",
                lambda i: (i, "alice", "bench", body),
            ),
            (
                "save update",
                "UPDATE bench_floor SET body = %s WHERE id = %s AND owner = %s",
                lambda i: (body, i, "alice"),
            ),
            (
                "get",
                "SELECT body FROM bench_floor WHERE id = %s AND owner = %s",
                lambda i: (i, "alice"),
            ),
        ):
            began = time.perf_counter()
            for task_id in ids:
                cursor = db.execute(sql, params(task_id), prepare=True)
                if cursor.description is not None:  # a read: fetch what a store would decode
                    cursor.fetchall()
            figures[figure] = tasks / (time.perf_counter() - began)
    return figures


QS_INSERT = """
INSERT INTO queuestore_tasks (id, name, input, owner, context_id, status, artifacts, metadata,
    answers, created_at, updated_at, attempt, version)
VALUES (%s, 'a2a.task', '{}', %s, 'bench', 'submitted', '[]', %s, '[]', now(), now(), 0, 1)"""
QS_UPDATE = """
UPDATE queuestore_tasks SET status = 'working', metadata = %s, updated_at = now(),
    version = version + 1
WHERE id = %s AND owner = %s AND version = 1"""
QS_GET = "SELECT metadata FROM queuestore_tasks WHERE id = %s AND owner = %s"


async def measure_async_floor(url: str, tasks: int) -> dict[str, float]:
    """Raw psycopg from asyncio on queuestore's own table (its indexes): a store's floor."""
    body = '{"a2a": {"history": ["summarise the quarter"]}}'
    ids = [str(uuid.uuid4()) for _ in range(tasks)]
    figures: dict[str, float] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        for figure, sql, params in (
            ("save new", QS_INSERT, lambda i: (i, "alice", body)),
            ("save update", QS_UPDATE, lambda i: (body, i, "alice")),
            ("get", QS_GET, lambda i: (i, "alice")),
        ):
            gc.collect()
            began = time.perf_counter()
            for task_id in ids:
                cursor = await db.execute(sql, params(task_id), prepare=True)
                if cursor.description is not None:
                    await cursor.fetchall()
            figures[figure] = tasks / (time.perf_counter() - began)
    return figures


def floor_table(
    title: str, floor: dict[str, list[float]], baseline: dict[str, list[float]]
) -> Table:
    """The floor of each figure beside the SDK's rate and the target, 3x that rate."""
    table = Table(title=title)
    for column in ("figure", "floor", "DatabaseTaskStore", "3x DatabaseTaskStore", "reachable"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for figure, values in floor.items():
        sdk, raw = statistics.median(baseline[figure]), statistics.median(values)
        table.add_row(
            figure,
            f"{raw:,.1f}/s",
            f"{sdk:,.1f}/s ({sdk / raw:.2f} of the floor)",
            f"{3 * sdk:,.1f}/s",
            "yes" if 3 * sdk <= raw else "no: above the floor",
        )
    return table


async def delay_queuestore(store: SqlTaskStore, samples: int, *, progress: bool) -> list[float]:
    """Seconds from a worker's write (another connection) to the event in the stream."""
    versioned = VersionedQueuestoreTaskStore(store)
    stream = QueuestoreEventStream(store)
    worker = SqlTaskStore(store.engine.url.render_as_string(hide_password=False))
    delays = []
    try:
        for _ in range(samples + 2):
            task = working(new_task())
            version = await versioned.save(
                task, event=task, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
            )
            written = threading.Event()
            stamp: list[float] = []

            def write(
                task_id: str = task.id,
                written: threading.Event = written,
                stamp: list[float] = stamp,
            ) -> None:
                written.wait()
                stamp.append(time.perf_counter())
                if progress:
                    worker.update(task_id, progress=0.5, status_message="half way")
                else:
                    worker.update(task_id, status=Status.COMPLETED, result="done")

            writer = threading.Thread(target=write)
            writer.start()
            subscription = stream.subscribe(task.id, after=version)
            first = asyncio.ensure_future(anext(subscription))
            await asyncio.sleep(0.05)  # the watch is open
            written.set()
            await first
            delays.append(time.perf_counter() - stamp[0])
            await subscription.aclose()
            writer.join()
    finally:
        worker.close()
    return delays[2:]  # the first two warm the feed and the pools


async def delay_sdk(engine: Any, samples: int) -> list[float]:
    store = VersionedDatabaseTaskStore(engine)
    stream = DatabaseTaskEventStream(engine)
    delays = []
    for _ in range(samples + 2):
        task = working(new_task())
        version = await store.save(
            task, event=task, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
        )
        subscription = stream.subscribe(task.id, after=version)
        first = asyncio.ensure_future(anext(subscription))
        await asyncio.sleep(0.05)
        done = Task()
        done.CopyFrom(task)
        done.status.state = TaskState.TASK_STATE_COMPLETED
        event = TaskStatusUpdateEvent(
            task_id=task.id, context_id=task.context_id, status=done.status
        )
        began = time.perf_counter()
        await store.save(done, event=event, prev=task, prev_version=version, context=ALICE)
        await first
        delays.append(time.perf_counter() - began)
        await subscription.aclose()
    return delays[2:]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run(url: str, tasks: int, samples: int, rounds: int) -> None:
    console = Console(width=150)
    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://"))
    sdk_plain = DatabaseTaskStore(engine)
    sdk_versioned = VersionedDatabaseTaskStore(engine)
    await sdk_plain.initialize()
    await sdk_versioned.initialize()
    store = SqlTaskStore(url)
    store.migrate()
    # As A2AServer's lifespan does: the loop's reads on psycopg's async driver.
    served = contextlib.AsyncExitStack()
    await served.enter_async_context(store.open_async())
    subjects = [
        Subject("a2a-sdk DatabaseTaskStore", sdk_plain, versioned=False),
        Subject("a2a-sdk VersionedDatabaseTaskStore", sdk_versioned, versioned=True),
        Subject("queuestore QueuestoreTaskStore", QueuestoreTaskStore(store), versioned=False),
        Subject(
            "queuestore VersionedQueuestoreTaskStore",
            VersionedQueuestoreTaskStore(store),
            versioned=True,
        ),
    ]
    for subject in subjects:  # warm connections, pools, prepared statements
        for _ in range(50):
            task = new_task()
            await subject.save_new(task)
            await subject.get(task.id)
    # Autovacuum may be off: without statistics the planner guesses for freshly
    # filled tables. Every table of the scratch database, both sides', is analysed
    # after the warm-up and before each walk (whose rows were just added).
    analyze = functools.partial(analyze_all, url)
    analyze()
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in subjects}
    floor: dict[str, list[float]] = {}
    async_floor: dict[str, list[float]] = {}
    for _ in range(rounds):
        for subject in subjects:
            for figure, value in (await measure_store(subject, tasks, analyze)).items():
                results[subject.name].setdefault(figure, []).append(value)
        for figure, value in measure_floor(url, tasks).items():
            floor.setdefault(figure, []).append(value)
        for figure, value in (await measure_async_floor(url, tasks)).items():
            async_floor.setdefault(figure, []).append(value)

    baseline = results[subjects[0].name]
    table = Table(title=f"A2A task stores, PostgreSQL, {tasks} tasks, median of {rounds} rounds")
    table.add_column("figure")
    for subject in subjects:
        table.add_column(subject.name.replace(" ", "\n", 1), justify="right")
    table.add_column("ratio plain\n(queuestore /\nDatabaseTaskStore)", justify="right")
    table.add_column("ratio versioned\n(queuestore /\nDatabaseTaskStore)", justify="right")
    for figure in baseline:
        medians = [statistics.median(results[s.name][figure]) for s in subjects]
        unit = "" if "walk" in figure else "/s"
        table.add_row(
            figure,
            *[f"{value:,.1f}{unit}" for value in medians],
            f"{medians[2] / medians[0]:.2f}x",
            f"{medians[3] / medians[0]:.2f}x",
        )
    console.print(table)

    for title, measured in (
        ("The floor: raw psycopg, one statement and one commit a call", floor),
        ("The same from asyncio (AsyncConnection), on queuestore's table", async_floor),
    ):
        console.print(floor_table(title, measured, baseline))

    ours = await delay_queuestore(store, samples, progress=False)
    ours_progress = await delay_queuestore(store, samples, progress=True)
    theirs = await delay_sdk(engine, samples)
    delays = Table(title=f"Event delay, worker's write -> subscriber, {samples} samples")
    delays.add_column("stream")
    delays.add_column("p50", justify="right")
    delays.add_column("p90", justify="right")
    delays.add_column("max", justify="right")
    for name, values in (
        ("queuestore QueuestoreEventStream, status write", ours),
        ("queuestore QueuestoreEventStream, progress write", ours_progress),
        ("a2a-sdk DatabaseTaskEventStream (polls 0.5 s)", theirs),
    ):
        delays.add_row(
            name,
            *[f"{percentile(values, q) * 1000:.1f} ms" for q in (0.5, 0.9)],
            f"{max(values) * 1000:.1f} ms",
        )
    console.print(delays)
    p50_ratio = percentile(theirs, 0.5) / percentile(ours, 0.5)
    console.print(f"status-write event delay p50: {p50_ratio:.1f}x shorter than the SDK's stream")
    await engine.dispose()
    await served.aclose()
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    with scratch_database("queuestore_bench_a2a") as url:
        asyncio.run(run(url, arguments.tasks, arguments.samples, arguments.rounds))


if __name__ == "__main__":
    main()
