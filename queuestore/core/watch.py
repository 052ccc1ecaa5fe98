"""The change feed: every committed write to a task, delivered to whoever watches it.

One :class:`ChangeFeed` per store and process reads the changes and fans them
out to every :class:`Watch` (MCP status notifications, A2A event streams, the
HTTP API's Server-Sent Events, ``queuestore tasks watch``), so a hundred
watchers cost one reader, not a hundred.

The reader asks the store for the rows written since the last ones it saw,
in ``(updated_at, id)`` order. It asks at once when the store announces a
change and every :data:`POLL_INTERVAL` otherwise, which catches the writes that
are not announced and serves stores without notifications (SQLite). On
PostgreSQL every terminal or parked status is announced (NOTIFY), and every
other write (a claim, a progress report, an artifact) to a task a watch follows
by id: opening such a watch marks its tasks as watched in the database (for
:data:`MARK_SECONDS`, renewed while it stays open), and a write to a marked
task announces itself in its own statement. Writes to tasks nobody follows by
id stay quiet, as a NOTIFY serialises concurrent commits.

Each read looks :data:`LOOKBACK` behind the newest ``updated_at`` it has
seen, because a row's timestamp is taken when its statement starts and it
becomes visible when it commits: a write that began earlier but committed
later is still found. Versions already delivered are
dropped, by the store before they are sent (each read names them), so a read
after a burst of writes costs what is new, not the whole window; a watcher
sees each task's versions in increasing order, and a task written several
times between two reads shows only its latest version.

Guarantee: once a watch is open, the latest committed version of every task
it may see is delivered to it. Deletions are not delivered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, suppress
from datetime import datetime, timedelta
from types import TracebackType
from typing import Final, Self

from queuestore.core.errors import StoreUnavailable
from queuestore.core.models import Task, TaskStatus
from queuestore.core.owner import OwnerScope

log = logging.getLogger(__name__)

POLL_INTERVAL: Final = 0.5
"""Seconds between two reads when the store announces nothing."""

LOOKBACK: Final = timedelta(seconds=2)
"""How far behind the newest ``updated_at`` seen each read starts."""

BATCH: Final = 500
"""Rows read per statement; a backlog is read in several."""

MARK_SECONDS: Final = 60.0
"""How long a mark keeps a followed task's writes announced; renewed while watched."""

MARK_RENEWAL: Final = 20.0
"""Seconds between two renewals of the marks of the tasks followed by id."""

_OUTAGE_PAUSE: Final = 1.0

StatusChange = tuple[str, TaskStatus]
"""A task id and the status it moved to."""

Listener = Callable[[float], list[StatusChange]]
"""Blocks for at most the given seconds and returns the status changes seen meanwhile.

A listener may return early with nothing, or return nothing after the full
time on a backend without notifications: callers re-read what they watch.
"""


Deliver = Callable[[Task], None]

RunSync = Callable[..., Awaitable[None]]
"""Awaits sync code, as ``asyncio.to_thread`` or a store's ``run_async`` do."""

WatchTasks = Callable[[Collection[str], float], None]
"""``(task_ids, seconds)``: have every write to these tasks announced that long."""

ReadChanges = Callable[
    [datetime, "tuple[datetime, str] | None", int, Mapping[str, int]], list[Task]
]
"""``(since, after, limit, seen)``: up to ``limit`` tasks in ``(updated_at, id)`` order
written after ``since`` (and after the key ``after`` when given), but for those at a
version ``seen`` holds for their id, or older."""


class _Subscriber:
    """One watch's interest: the tasks it may see, and where their changes go."""

    __slots__ = ("deliver", "scope", "task_ids")

    def __init__(self, scope: OwnerScope, task_ids: frozenset[str] | None, deliver: Deliver):
        self.scope = scope
        self.task_ids = task_ids
        self.deliver = deliver

    def wants(self, task: Task) -> bool:
        return (self.task_ids is None or task.id in self.task_ids) and self.scope.admits(task.owner)


class ChangeFeed:
    """Reads a store's changes on a background thread while anyone watches.

    Args:
        read: the store's read of changed rows (see :data:`ReadChanges`).
        now: the store's clock, where the first read starts.
        subscribe: the store's notifications (see ``StoreBackend.subscribe``).
        watch_tasks: the store's marks of followed tasks (see :data:`WatchTasks`).
    """

    def __init__(
        self,
        read: ReadChanges,
        now: Callable[[], datetime],
        subscribe: Callable[[], AbstractContextManager[Listener]],
        watch_tasks: WatchTasks,
    ) -> None:
        self._read = read
        self._now = now
        self._subscribe = subscribe
        self._watch_tasks = watch_tasks
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber] = []
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.thread_name = f"queuestore-feed-{id(self):x}"
        """The name of the reader's thread while it runs."""

    def mark(self, task_ids: Collection[str]) -> None:
        """Mark ``task_ids`` as followed, so that each write to them is announced.

        A watch calls it as it opens. A mark only makes delivery prompter: when
        it fails (the database is down), the watch still gets every change, at
        the next poll, and the reader marks the tasks again at its next renewal.
        """
        if not task_ids:
            return
        try:
            self._watch_tasks(task_ids, MARK_SECONDS)
        except Exception as exc:  # an optimisation failed: the poll still delivers
            log.warning("change feed: could not mark %d watched tasks: %s", len(task_ids), exc)

    def _renew_marks(self) -> None:
        with self._lock:
            followed = {
                task_id
                for subscriber in self._subscribers
                if subscriber.task_ids is not None
                for task_id in subscriber.task_ids
            }
        self.mark(followed)

    def add(self, subscriber: _Subscriber) -> None:
        """Start delivering to ``subscriber``; the first one starts the reader."""
        with self._lock:
            self._subscribers.append(subscriber)
            if self._thread is None:
                self._stopping = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stopping,), name=self.thread_name, daemon=True
                )
                self._thread.start()

    def remove(self, subscriber: _Subscriber) -> None:
        """Stop delivering to ``subscriber``; the last one stops the reader."""
        with self._lock:
            self._subscribers.remove(subscriber)
            if not self._subscribers and self._thread is not None:
                self._stopping.set()
                self._thread = None

    def _run(self, stopping: threading.Event) -> None:
        reader = _Reader(self._read, self._now)
        renewed = time.monotonic()  # a watch marks its tasks as it opens
        while not stopping.is_set():
            try:
                with self._subscribe() as listen:
                    while not stopping.is_set():
                        if time.monotonic() - renewed >= MARK_RENEWAL:
                            self._renew_marks()
                            renewed = time.monotonic()
                        self._fan_out(reader.read())
                        # Notifications only wake the reader; the rows say what changed.
                        listen(POLL_INTERVAL)
            except StoreUnavailable as exc:
                log.warning("change feed: store unavailable, retrying: %s", exc)
                stopping.wait(_OUTAGE_PAUSE)
            except Exception:
                log.exception("change feed: unexpected error, retrying")
                stopping.wait(_OUTAGE_PAUSE)

    def _fan_out(self, tasks: list[Task]) -> None:
        if not tasks:
            return
        with self._lock:
            subscribers = list(self._subscribers)
        for task in tasks:
            for subscriber in subscribers:
                if subscriber.wants(task):
                    subscriber.deliver(task)


class _Reader:
    """Reads the rows written since the last read, each version once."""

    def __init__(self, read: ReadChanges, now: Callable[[], datetime]) -> None:
        self._read = read
        self._now = now
        self._newest: datetime | None = None
        self._delivered: dict[str, tuple[int, datetime]] = {}

    def read(self) -> list[Task]:
        if self._newest is None:
            self._newest = self._now()
        since = self._newest - LOOKBACK
        fresh: list[Task] = []
        after: tuple[datetime, str] | None = None
        known = {task_id: version for task_id, (version, _) in self._delivered.items()}
        while True:
            rows = self._read(since, after, BATCH, known)
            for task in rows:
                seen = self._delivered.get(task.id)
                if seen is None or seen[0] < task.version:
                    self._delivered[task.id] = (task.version, task.updated_at)
                    fresh.append(task)
            if len(rows) < BATCH:
                break
            after = (rows[-1].updated_at, rows[-1].id)
        if fresh:  # read in updated_at order: the last is the newest
            self._newest = max(self._newest, fresh[-1].updated_at)
        # A version older than the window cannot be read again: forget it.
        horizon = self._newest - LOOKBACK
        self._delivered = {
            task_id: seen for task_id, seen in self._delivered.items() if seen[1] >= horizon
        }
        return fresh


class _Pending:
    """Changes waiting for a consumer, coalesced per task (latest version wins)."""

    def __init__(self) -> None:
        self._tasks: OrderedDict[str, Task] = OrderedDict()

    def put(self, task: Task) -> None:
        held = self._tasks.pop(task.id, None)
        self._tasks[task.id] = task if held is None or held.version < task.version else held

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def take(self) -> Task | None:
        return self._tasks.popitem(last=False)[1] if self._tasks else None


class Watch:
    """The changes to the tasks one caller may see, as a blocking iterator.

    Use it as a context manager (``with store.watch(owner=...) as changes``): the
    changes committed while it is open are delivered, oldest first, at most one
    pending version per task (the latest). Read the current state after opening
    it, and drop a delivered snapshot whose ``version`` is not newer than what
    you already hold.

    Attributes:
        feed: the store's change feed.
        scope: whose tasks are delivered (the store's owner filter).
        task_ids: only these tasks, or every visible one when None.
    """

    def __init__(
        self, feed: ChangeFeed, scope: OwnerScope, task_ids: Collection[str] | None
    ) -> None:
        self.feed = feed
        self.scope = scope
        self.task_ids = None if task_ids is None else frozenset(task_ids)
        self._pending = _Pending()
        self._ready = threading.Condition()
        self._subscriber = _Subscriber(scope, self.task_ids, self._put)

    def _put(self, task: Task) -> None:
        with self._ready:
            self._pending.put(task)
            self._ready.notify()

    def __enter__(self) -> Self:
        if self.task_ids is not None:
            self.feed.mark(self.task_ids)
        self.feed.add(self._subscriber)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.feed.remove(self._subscriber)

    def get(self, timeout: float | None = None) -> Task | None:
        """The next change, waiting at most ``timeout`` seconds (forever if None); None then."""
        with self._ready:
            self._ready.wait_for(lambda: bool(self._pending), timeout)
            return self._pending.take()

    def __iter__(self) -> Iterator[Task]:
        while True:
            task = self.get()
            if task is not None:
                yield task


class AsyncWatch:
    """:class:`Watch` for asyncio: ``async with astore.watch(...) as changes``.

    Args:
        like: a (not entered) :class:`Watch` whose feed and filters this one takes.
        run: how to await the store's sync code (its ``run_async``); a worker
            thread by default.
    """

    def __init__(self, like: Watch, run: RunSync | None = None) -> None:
        self._feed = like.feed
        self._run: RunSync = run or asyncio.to_thread
        self._pending = _Pending()
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscriber = _Subscriber(like.scope, like.task_ids, self._put)

    def _put(self, task: Task) -> None:
        # Called on the feed's thread: hand the change to the watcher's loop.
        assert self._loop is not None
        with suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self._loop.call_soon_threadsafe(self._arrive, task)

    def _arrive(self, task: Task) -> None:
        self._pending.put(task)
        self._ready.set()

    async def __aenter__(self) -> Self:
        self._loop = asyncio.get_running_loop()
        if self._subscriber.task_ids is not None:
            await self._run(self._feed.mark, self._subscriber.task_ids)
        self._feed.add(self._subscriber)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._feed.remove(self._subscriber)

    async def get(self, timeout: float | None = None) -> Task | None:
        """The next change, waiting at most ``timeout`` seconds (forever if None); None then."""
        if not self._pending:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        return self._pending.take()

    async def __aiter__(self) -> AsyncIterator[Task]:
        while True:
            task = await self.get()
            if task is not None:
                yield task
