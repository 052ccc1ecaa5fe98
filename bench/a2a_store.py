"""A2A task store benchmark: queuestore's stores beside a2a-sdk's, on one PostgreSQL.

    uv run python bench/a2a_store.py [--tasks N] [--samples S] [--rounds R] [--block B]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust). In one run, on one
scratch database ``queuestore_bench_a2a_<random>`` (dropped at the end), through
each store's own async A2A interface, the way ``DefaultRequestHandler`` calls it:

1. save of N new tasks (SUBMITTED, one user message in the history);
2. save of N updates (WORKING with an agent status message) -- the plain stores
   get the whole task, the versioned ones the status event and the version;
3. N gets;
4. a walk through 2,000 tasks of one owner, page size 100 (20 pages, every
   page with ``total_size``), beside 2,000 tasks of another owner, three times
   a round (``WALKS``);

for a2a-sdk's ``DatabaseTaskStore`` and ``VersionedDatabaseTaskStore`` (SQLAlchemy
asyncio + asyncpg) and queuestore's ``QueuestoreTaskStore`` and
``VersionedQueuestoreTaskStore`` (psycopg 3); and

5. the delay from a worker's write to the event reaching a subscriber: queuestore's
   ``QueuestoreEventStream`` (the change feed, LISTEN/NOTIFY) against a2a-sdk's
   ``DatabaseTaskEventStream`` (polls ``task_events`` every 0.5 s), each on its
   versioned store. The write is a task's completion (a status write, always
   announced on PostgreSQL) and, for queuestore, also a progress write
   (announced because the subscription follows its task by id: revision 0003).

After a warm-up (50 saves and gets per store), and again before the walks
(after their 4,000 tasks a store are saved, outside the timing), every table is
``ANALYZE``d, so the planner has statistics even where autovacuum is off:
without them a store's walk flips between plans as its table grows
(queuestore's versioned walk went from 12-14 to 6 walks/s from the third of
five rounds). Calls run one after another on one event loop (queuestore's
store open on it, ``open_async``, as in ``A2AServer``'s lifespan). The
versioned store runs a second time on a store made with ``keep_warm=False``
(SQLAlchemy's ``greenlet_spawn`` and a pool checkout per statement on the
loop), to show what the warm greenlets and connections hold.

The stores take turns. A round times the figures one after another, and
within a figure every contender makes ``--block`` calls (100) in its turn,
the order of the turns rotating with every block, until each has made N; its
rate is its calls over the sum of its turns' times. So a host that drifts from
second to second (the SDK's own rate moved by up to 74% between runs here),
a checkpoint's writes or another process's burst fall on every store alike,
not on whichever ran during them: timed one store after another, 500 calls
each, a ratio moved with the host between turns. The garbage is collected
before each turn and each walk, outside the timing: a full collection of this
process's heap (both sides' objects) takes 80-100 ms here, longer than a whole
walk. Every figure is the median of ``--rounds`` rounds; a ratio is the median
of the rounds' own ratios (queuestore's rate over ``DatabaseTaskStore``'s in
the same round), beside the lowest.

The floor takes its turns with them: the raw operation each figure cannot
beat, one psycopg statement (prepared, autocommit: one commit each) on a table
of the SDK's shape (an id key, owner and context columns, the task as one JSON
document): INSERT for a new task, UPDATE of the document for an update, SELECT
by key for a get. A target above the floor is out of reach for any store that
commits each save, which both A2A interfaces require. A second floor runs the
same three statements from asyncio (psycopg's ``AsyncConnection``) on
queuestore's own table, with its indexes: what a store on that row can reach
from an event loop, before any of its own work. A third runs them through
asyncpg, the SDK's driver: how much of the gap is psycopg's (queuestore's
required driver) own work per statement.
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
from typing import Any, Protocol

import asyncpg
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
WALKS = 3
"""Walks a store makes in a round, one a turn: a single walk (60-480 ms) is at the host's mercy."""


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


Call = Callable[[], Awaitable[Any]]


class Contender(Protocol):
    """What takes a turn at the saves and gets: a store under test, or a floor."""

    name: str

    async def save_new(self, task: Task) -> None: ...

    async def save_update(self, task: Task) -> None: ...

    async def get(self, task_id: str) -> None: ...


async def take_turns(calls: dict[str, list[Call]], block: int, turn: int) -> dict[str, float]:
    """Each contender's calls in blocks of ``block``, the contenders taking turns.

    The order of the turns rotates with every block (from ``turn`` on), so every
    contender meets the host in the states the others meet it in: the host's
    drift from minute to minute, a checkpoint's writes, another process's burst
    fall on all of them alike rather than on whoever ran during them. The garbage
    is collected before each block, outside the timing. A contender's rate is
    its calls over the sum of its blocks' times.
    """
    names = list(calls)
    spent = dict.fromkeys(names, 0.0)
    blocks = -(-max(len(each) for each in calls.values()) // block)
    for index in range(blocks):
        shift = (turn + index) % len(names)
        for name in names[shift:] + names[:shift]:
            chunk = calls[name][index * block : (index + 1) * block]
            gc.collect()
            began = time.perf_counter()
            for call in chunk:
                await call()
            spent[name] += time.perf_counter() - began
    return {name: len(calls[name]) / spent[name] for name in names}


def analyze_all(url: str) -> None:
    """``ANALYZE`` every table of the database at ``url``."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ANALYZE")


FLOOR_TABLE = """
CREATE TABLE IF NOT EXISTS bench_floor (
    id text PRIMARY KEY, owner text NOT NULL, context_id text NOT NULL, body jsonb NOT NULL
)"""
FLOOR_BODY = '{"status": {"state": "TASK_STATE_SUBMITTED"}, "history": ["summarise the quarter"]}'


class Floor:
    """Raw psycopg on a table of the SDK's shape: one prepared statement and its commit a call."""

    name = "floor: raw psycopg"

    def __init__(self, url: str) -> None:
        self.db = psycopg.connect(url, autocommit=True)
        self.db.execute(FLOOR_TABLE)

    async def save_new(self, task: Task) -> None:
        self.db.execute(
            "INSERT INTO bench_floor (id, owner, context_id, body) VALUES (%s, %s, %s, %s)",
            (task.id, "alice", "bench", FLOOR_BODY),
            prepare=True,
        )

    async def save_update(self, task: Task) -> None:
        self.db.execute(
            "UPDATE bench_floor SET body = %s WHERE id = %s AND owner = %s",
            (FLOOR_BODY, task.id, "alice"),
            prepare=True,
        )

    async def get(self, task_id: str) -> None:
        cursor = self.db.execute(
            "SELECT body FROM bench_floor WHERE id = %s AND owner = %s",
            (task_id, "alice"),
            prepare=True,
        )
        cursor.fetchall()  # what a store would decode

    async def close(self) -> None:
        self.db.close()


QS_INSERT = """
INSERT INTO queuestore_tasks (id, name, input, owner, context_id, status, artifacts, metadata,
    answers, created_at, updated_at, attempt, version)
VALUES (%s, 'a2a.task', '{}', %s, 'bench', 'submitted', '[]', %s, '[]', now(), now(), 0, 1)"""
QS_UPDATE = """
UPDATE queuestore_tasks SET status = 'working', metadata = %s, updated_at = now(),
    version = version + 1
WHERE id = %s AND owner = %s AND version = 1"""
QS_GET = "SELECT metadata FROM queuestore_tasks WHERE id = %s AND owner = %s"
QS_BODY = '{"a2a": {"history": ["summarise the quarter"]}}'


class AsyncFloor:
    """Raw psycopg from asyncio on queuestore's own table (its indexes): a store's floor."""

    name = "floor: raw psycopg from asyncio, queuestore's table"

    def __init__(self, db: psycopg.AsyncConnection[Any]) -> None:
        self.db = db

    @classmethod
    async def connect(cls, url: str) -> AsyncFloor:
        return cls(await psycopg.AsyncConnection.connect(url, autocommit=True))

    async def save_new(self, task: Task) -> None:
        await self.db.execute(QS_INSERT, (task.id, "alice", QS_BODY), prepare=True)

    async def save_update(self, task: Task) -> None:
        await self.db.execute(QS_UPDATE, (QS_BODY, task.id, "alice"), prepare=True)

    async def get(self, task_id: str) -> None:
        cursor = await self.db.execute(QS_GET, (task_id, "alice"), prepare=True)
        await cursor.fetchall()

    async def close(self) -> None:
        await self.db.close()


def numbered(sql: str) -> str:
    """``sql`` with asyncpg's ``$1, $2, ...`` placeholders for psycopg's ``%s``."""
    parts = sql.split("%s")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], start=1)) + parts[-1]


class AsyncpgFloor:
    """:class:`AsyncFloor`'s statements through asyncpg, the SDK's driver: the driver's share."""

    name = "floor: raw asyncpg from asyncio, queuestore's table"
    INSERT, UPDATE, GET = numbered(QS_INSERT), numbered(QS_UPDATE), numbered(QS_GET)

    def __init__(self, db: asyncpg.Connection) -> None:
        self.db = db

    @classmethod
    async def connect(cls, url: str) -> AsyncpgFloor:
        return cls(await asyncpg.connect(url))

    async def save_new(self, task: Task) -> None:
        await self.db.execute(self.INSERT, task.id, "alice", QS_BODY)

    async def save_update(self, task: Task) -> None:
        await self.db.execute(self.UPDATE, QS_BODY, task.id, "alice")

    async def get(self, task_id: str) -> None:
        await self.db.fetch(self.GET, task_id, "alice")

    async def close(self) -> None:
        await self.db.close()


async def measure_round(
    subjects: list[Subject],
    floors: list[Floor | AsyncFloor | AsyncpgFloor],
    tasks: int,
    *,
    block: int,
    turn: int,
    analyze: Callable[[], None],
) -> dict[str, dict[str, float]]:
    """One round: every figure with all contenders taking turns, figure after figure."""
    contenders: list[Contender] = [*subjects, *floors]
    created = {c.name: [new_task() for _ in range(tasks)] for c in contenders}
    updated = {name: [working(task) for task in made] for name, made in created.items()}
    plans: dict[str, dict[str, list[Call]]] = {
        "save new": {
            c.name: [functools.partial(c.save_new, task) for task in created[c.name]]
            for c in contenders
        },
        "save update": {
            c.name: [functools.partial(c.save_update, task) for task in updated[c.name]]
            for c in contenders
        },
        "get": {
            c.name: [functools.partial(c.get, task.id) for task in created[c.name]]
            for c in contenders
        },
    }
    figures: dict[str, dict[str, float]] = {}
    for figure, calls in plans.items():
        for name, value in (await take_turns(calls, block, turn)).items():
            figures.setdefault(name, {})[figure] = value
    # The walks: every store's 4,000 rows first, then the statistics, then
    # WALKS walks a store, taking turns as the calls do.
    walks = {subject.name: f"walk-{uuid.uuid4().hex[:8]}" for subject in subjects}
    for subject in subjects:
        for _ in range(WALK_TASKS):
            await subject.save_new(new_task(walks[subject.name]))
            await subject.save_new(new_task(walks[subject.name]), BOB)
    analyze()  # as autovacuum would, now that the walks' rows are in

    async def walk(subject: Subject) -> None:
        assert await subject.walk(walks[subject.name]) == WALK_TASKS

    turns = {subject.name: [functools.partial(walk, subject)] * WALKS for subject in subjects}
    for name, rate in (await take_turns(turns, 1, turn)).items():
        figures[name]["list walk (walks/s)"] = rate
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


def ratio_cell(ours: list[float], theirs: list[float]) -> str:
    """The median of the rounds' ratios (each round's rates side by side), and the lowest."""
    ratios = [mine / sdk for mine, sdk in zip(ours, theirs, strict=True)]
    return f"{statistics.median(ratios):.2f}x; {min(ratios):.2f}x"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run(url: str, tasks: int, samples: int, rounds: int, block: int) -> None:
    console = Console(width=180)
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
    # The same without greenlets and connections kept warm between the loop's calls.
    cold = SqlTaskStore(url, keep_warm=False)
    await served.enter_async_context(cold.open_async())
    subjects = [
        Subject("a2a-sdk DatabaseTaskStore", sdk_plain, versioned=False),
        Subject("a2a-sdk VersionedDatabaseTaskStore", sdk_versioned, versioned=True),
        Subject("queuestore QueuestoreTaskStore", QueuestoreTaskStore(store), versioned=False),
        Subject(
            "queuestore VersionedQueuestoreTaskStore",
            VersionedQueuestoreTaskStore(store),
            versioned=True,
        ),
        Subject(
            "queuestore VersionedQueuestoreTaskStore, keep_warm=False",
            VersionedQueuestoreTaskStore(cold),
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
    floors: list[Floor | AsyncFloor | AsyncpgFloor] = [
        Floor(url),
        await AsyncFloor.connect(url),
        await AsyncpgFloor.connect(url),
    ]
    results: dict[str, dict[str, list[float]]] = {}
    for turn in range(rounds):
        measured = await measure_round(
            subjects, floors, tasks, block=block, turn=turn, analyze=analyze
        )
        for name, figures in measured.items():
            for figure, value in figures.items():
                results.setdefault(name, {}).setdefault(figure, []).append(value)
    for floor in floors:
        await floor.close()

    baseline = results[subjects[0].name]
    table = Table(
        title=f"A2A task stores, PostgreSQL, {tasks} calls a figure in blocks of {block}, "
        f"median of {rounds} rounds"
    )
    table.add_column("figure")
    for subject in subjects:
        table.add_column(subject.name.replace(" ", "\n", 1), justify="right")
    for kind in ("plain", "versioned", "versioned,\nkeep_warm=False"):
        table.add_column(
            f"ratio {kind}\n(queuestore /\nDatabaseTaskStore;\nlowest round)", justify="right"
        )
    for figure in baseline:
        medians = [statistics.median(results[s.name][figure]) for s in subjects]
        unit = "" if "walk" in figure else "/s"
        table.add_row(
            figure,
            *[f"{value:,.1f}{unit}" for value in medians],
            *[ratio_cell(results[s.name][figure], baseline[figure]) for s in subjects[2:]],
        )
    console.print(table)

    for title, floor in zip(
        (
            "The floor: raw psycopg, one statement and one commit a call",
            "The same from asyncio (AsyncConnection), on queuestore's table",
            "The same through asyncpg (the SDK's driver), on queuestore's table",
        ),
        floors,
        strict=True,
    ):
        console.print(floor_table(title, results[floor.name], baseline))

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
    cold.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--block", type=int, default=100, help="calls a contender makes in one turn"
    )
    arguments = parser.parse_args()
    with scratch_database("queuestore_bench_a2a") as url:
        asyncio.run(run(url, arguments.tasks, arguments.samples, arguments.rounds, arguments.block))


if __name__ == "__main__":
    main()
