"""The ``queuestore`` command: workers, beat, schema migrations, tasks, the janitor, the demo.

Inspecting commands print for people by default and take ``--json`` for
scripts (one JSON document, or JSON lines for ``tasks watch``). Every error
is one line on stderr and a non-zero exit (2: bad usage or configuration,
1: the store refused or failed), and bad input writes nothing.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from queuestore.config import Settings
    from queuestore.core.concurrency import Caps
    from queuestore.core.models import Task, TaskStatus
    from queuestore.core.owner import Owner
    from queuestore.core.schedules import Schedule
    from queuestore.core.watch import Watch
    from queuestore.ops.presentation import TaskWatchView
    from queuestore.store.sql import SqlTaskStore

# Only typer and the standard library at the top: each command imports what it
# needs, so that `--help` and a usage error do not wait for SQLAlchemy and Celery
# (tests/ops/test_cli_startup.py keeps it so; bench/cli_startup.py times it).

# Plain help, as click prints it: Typer's rich panels would cost `--help` a third of a
# second of imports (markdown-it, pygments), and show `<bool>` beside every flag.
app = typer.Typer(
    help="A durable task store whose tasks run as Celery jobs.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    no_args_is_help=True,
)
db = typer.Typer(help="Manage the database schema.", rich_markup_mode=None, no_args_is_help=True)
tasks = typer.Typer(
    help="Submit, inspect, watch, answer, cancel and delete tasks.",
    rich_markup_mode=None,
    no_args_is_help=True,
)
config = typer.Typer(
    help="Show the settings and their reference.", rich_markup_mode=None, no_args_is_help=True
)
schedules = typer.Typer(
    help="Add, list, change, pause, resume, trigger and delete schedules.",
    rich_markup_mode=None,
    no_args_is_help=True,
)
flow = typer.Typer(
    help="Pause and resume a job, an owner or a key; show the rate limits; drain a worker.",
    rich_markup_mode=None,
    no_args_is_help=True,
)
app.add_typer(db, name="db")
app.add_typer(tasks, name="tasks")
app.add_typer(schedules, name="schedules")
app.add_typer(config, name="config")
app.add_typer(flow, name="flow")


def _console() -> Console:
    """The console commands print to: standard output, at the width of this moment
    (a new one each time: rich fixes a console's width when COLUMNS is set)."""
    from rich.console import Console

    return Console()


_CELERY_OPTIONS = {"allow_extra_args": True, "ignore_unknown_options": True}

# Help is plain text, as it prints: no Markdown or reST markup. Every value an
# option takes has a metavar in capitals, as docs/reference/cli.md writes it.
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url", metavar="URL", help="Database URL; default: QUEUESTORE_DATABASE_URL or embedded."
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON for scripts, as the HTTP API shows it.")
]
OwnerOption = Annotated[
    str | None,
    typer.Option(metavar="OWNER", help="Act as this owner (default: every owner, as an operator)."),
]
AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        "-A",
        metavar="MODULE",
        help="The Celery app: a module (its app) or module:attribute. Default: the package's.",
    ),
]
TaskIdArgument = Annotated[
    str,
    typer.Argument(metavar="TASK_ID", help="The task; put -- before an id that starts with -."),
]


def _error_line(message: str) -> None:
    sys.stderr.write(f"queuestore: error: {' '.join(message.split())}\n")
    sys.stderr.flush()


def _fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    _error_line(message)
    raise typer.Exit(code)


@contextmanager
def _reporting() -> Iterator[None]:
    """Turn the library's errors into one line and an exit code (:mod:`.messages`)."""
    try:
        yield
    except Exception as exc:
        # Imported once a command has failed: by then it has imported what this needs.
        from queuestore.ops.messages import explain

        explained = explain(exc)
        if explained is None:
            raise
        _fail(*explained)


def _settings(url: str | None) -> Settings:
    from queuestore.config import Settings

    settings = Settings()
    return settings if url is None else settings.model_copy(update={"database_url": url})


def _store(url: str | None) -> SqlTaskStore:
    """The store the settings give, migrated first as they say (the embedded SQLite file:
    yes), so that every command works on a fresh ``QUEUESTORE_HOME``."""
    return _settings(url).make_store()


def _schema_store(url: str | None) -> SqlTaskStore:
    """The store, never migrated: for the commands that manage the schema."""
    return _settings(url).model_copy(update={"auto_migrate": False}).make_store()


def _owner(owner: str | None) -> Owner:
    from queuestore.core.owner import ANY

    return ANY if owner is None else owner


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _task_json(task: Task) -> dict[str, Any]:
    """The task as the HTTP API shows it: what a caller can act on, no worker bookkeeping."""
    from queuestore.core.views import TaskView

    return TaskView.of(task).model_dump(mode="json")


# -- workers and beat ---------------------------------------------------------


@app.command(context_settings=_CELERY_OPTIONS)
def worker(ctx: typer.Context, celery_app: AppOption = "workers") -> None:
    """Start a Celery worker that runs the app's jobs.

    Other options go to celery worker, e.g. queuestore worker --concurrency 2 -Q reports
    (or after --). Settings come from QUEUESTORE_* variables.
    """
    raise typer.Exit(_celery("worker", celery_app, ctx.args))


@app.command(context_settings=_CELERY_OPTIONS)
def beat(ctx: typer.Context, celery_app: AppOption = "workers") -> None:
    """Start Celery beat: the janitor, reaper and sweep. Run exactly one.

    Other options go to celery beat, e.g. --schedule /var/lib/queuestore/schedule.
    """
    raise typer.Exit(_celery("beat", celery_app, ctx.args))


def _celery(command: str, name: str, arguments: Sequence[str]) -> int:
    with _reporting():
        settings = _settings(None)
    celery_app = _celery_app(name)
    argv = [command, *arguments]
    if not any(arg in {"-l", "--loglevel"} or arg.startswith("--loglevel=") for arg in arguments):
        argv.append(f"--loglevel={settings.log_level or 'INFO'}")
    if settings.log_format == "json":
        argv.insert(0, "--quiet")  # no banner: the output is JSON lines only
    code = celery_app.start(argv)
    return int(code or 0)


# -- schema -------------------------------------------------------------------


@db.command("upgrade")
def db_upgrade(
    url: UrlOption = None,
    revision: Annotated[str, typer.Option(metavar="REV", help="The revision to reach.")] = "head",
) -> None:
    """Create or migrate the schema to the newest revision."""
    with _reporting():
        store = _schema_store(url)
        store.migrate(revision)
    _console().print(f"[green]schema at {revision}[/] on {store!r}", soft_wrap=True)


@db.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(metavar="REVISION", help="base drops everything.")],
    url: UrlOption = None,
) -> None:
    """Migrate the schema down to REVISION (base drops everything)."""
    from queuestore.store.sql.migrations import downgrade

    with _reporting():
        store = _schema_store(url)
        with store.engine.begin() as connection:
            downgrade(connection, revision)
    _console().print(f"[yellow]schema at {revision}[/] on {store!r}", soft_wrap=True)


@db.command("current")
def db_current(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Print the schema revision the database is at."""
    from alembic.migration import MigrationContext

    from queuestore.store.sql.migrations import VERSION_TABLE

    with _reporting():
        store = _schema_store(url)
        with store.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            revision = context.get_current_revision()
    if as_json:
        _print_json({"revision": revision})
    else:
        _console().print(revision or "none")


# -- tasks --------------------------------------------------------------------


@tasks.command("list")
def tasks_list(
    *,
    url: UrlOption = None,
    status: Annotated[
        list[str] | None,
        typer.Option(metavar="STATUS", help="Only this status (repeat it for several)."),
    ] = None,
    owner: Annotated[
        str | None, typer.Option(metavar="OWNER", help="Only this owner's tasks.")
    ] = None,
    name: Annotated[str | None, typer.Option(metavar="JOB", help="Only tasks of this job.")] = None,
    context: Annotated[
        str | None, typer.Option(metavar="ID", help="Only tasks of this context id.")
    ] = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Tasks per page (1..1000).")] = 50,
    cursor: Annotated[
        str | None, typer.Option(metavar="CURSOR", help="The next page, as a listing gave it.")
    ] = None,
    parent: Annotated[
        str | None, typer.Option(metavar="TASK_ID", help="Only the child tasks of this task.")
    ] = None,
    roots: Annotated[bool, typer.Option("--roots", help="Only root tasks (no parent).")] = False,
    as_json: JsonOption = False,
) -> None:
    """List tasks, newest first."""
    from queuestore.ops.presentation import task_table
    from queuestore.store import UNSET

    if parent is not None and roots:
        _fail("give --parent or --roots, not both", 2)

    with _reporting():
        settings = _settings(url)
        page = _store(url).list(
            owner=_owner(owner),
            status=status,
            name=name,
            context_id=context,
            limit=limit,
            cursor=cursor,
            parent_id=None if roots else UNSET if parent is None else parent,
        )
    if as_json:
        _print_json({"tasks": [_task_json(t) for t in page.tasks], "next_cursor": page.next_cursor})
        return
    if not page.tasks:
        _console().print("no tasks" if cursor is None else "no more tasks")
        return
    _console().print(task_table(page.tasks))
    if page.next_cursor is None:
        return
    if settings.cursor_secret is None:
        # Each process signs cursors with a random key unless one is configured.
        _console().print(
            "more tasks: raise --limit, or set QUEUESTORE_CURSOR_SECRET to page", soft_wrap=True
        )
    else:
        # On a line of its own and never broken, so that it copies whole.
        _console().print("more tasks; for the next page add:")
        _console().print(f"--cursor {page.next_cursor}", soft_wrap=True, highlight=False)


@tasks.command("running")
def tasks_running(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """How many tasks each owner and job runs now, beside the concurrency limits."""
    with _reporting():
        settings = _settings(url)
        counts = _store(url).running_counts()
    limits = settings.limits
    rows = [
        {"owner": owner, "job": name, "running": count, **_caps_json(limits.caps(owner, name))}
        for (owner, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    if as_json:
        _print_json({"running": rows})
        return
    from queuestore.ops.presentation import running_table

    _console().print(running_table(rows) if rows else "no task is running")


@tasks.command("deliveries")
def tasks_deliveries(
    task_id: TaskIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """The task's callback deliveries: pending, delivered and dead, oldest first."""
    with _reporting():
        deliveries = _store(url).deliveries(task_id, owner=_owner(owner))
    if as_json:
        from queuestore.core.views import DeliveryView

        _print_json(
            {"deliveries": [DeliveryView.of(d).model_dump(mode="json") for d in deliveries]}
        )
        return
    if not deliveries:
        _console().print("no delivery: the task has no callback, or no change it wants yet")
        return
    from queuestore.ops.presentation import delivery_table

    _console().print(delivery_table(deliveries))


@tasks.command("redeliver")
def tasks_redeliver(
    task_id: TaskIdArgument,
    delivery_id: Annotated[
        int,
        typer.Argument(metavar="DELIVERY_ID", help="The dead delivery, as deliveries lists it."),
    ],
    url: UrlOption = None,
    owner: OwnerOption = None,
) -> None:
    """Send a dead delivery again, now (its callback's later ones wait behind it)."""
    from queuestore.core.errors import TaskNotFound

    with _reporting():
        store = _store(url)
        try:
            delivery = store.redeliver(task_id, delivery_id, owner=_owner(owner))
        except TaskNotFound:
            _fail(_why_not_redelivered(store, task_id, delivery_id, _owner(owner)))
    _console().print(f"delivery {delivery.id} of {delivery.task_id} is {delivery.state.value}")


def _why_not_redelivered(store: SqlTaskStore, task_id: str, delivery_id: int, owner: Owner) -> str:
    """Why ``redeliver`` refused, as the store's one answer (not found) does not say."""
    found = {delivery.id: delivery for delivery in store.deliveries(task_id, owner=owner)}
    listing = f"queuestore tasks deliveries {task_id} lists them"
    if delivery_id not in found:
        return f"task {task_id} has no delivery {delivery_id}; {listing}"
    state = found[delivery_id].state.value
    return (
        f"delivery {delivery_id} of task {task_id} is {state}, not dead: only a dead delivery "
        f"is sent again ({'it is still being tried' if state == 'pending' else 'it arrived'})"
    )


def _caps_json(caps: Caps) -> dict[str, int | None]:
    return {"owner_limit": caps.owner, "job_limit": caps.job}


@tasks.command("show")
def tasks_show(
    task_id: TaskIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print one task: a field a line, its steps and children; or with --json the HTTP
    API's view of it (its steps: GET /tasks/{id}/steps)."""
    from queuestore.core.models import LIVE

    with _reporting():
        store = _store(url)
        task = store.get(task_id, owner=_owner(owner))
        if as_json:
            _print_json(_task_json(task))
            return
        steps = store.steps(task.id, owner=_owner(owner))
        children = store.count(parent_id=task.id, owner=_owner(owner))
        live = store.count(parent_id=task.id, owner=_owner(owner), status=LIVE) if children else 0
    from queuestore.ops.presentation import step_table, task_details

    console = _console()
    console.print(task_details(task))
    if steps:
        console.print(step_table(steps))
    if children:
        console.print(f"children: {children} ({live} live): tasks list --parent {task.id}")


@tasks.command("watch")
def tasks_watch(
    task_ids: Annotated[
        list[str] | None, typer.Argument(metavar="TASK_ID", help="Tasks to follow.")
    ] = None,
    *,
    url: UrlOption = None,
    owner: OwnerOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="Stop after this many seconds (exit 1 if the tasks are not finished).",
        ),
    ] = None,
    until: Annotated[
        list[str] | None,
        typer.Option(
            metavar="STATUS",
            help="Also stop once every task is in one of these live statuses.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Follow tasks live until every one is finished (or, --until, in one of those statuses).

    Without IDs, follow every task (the live ones, then each one written) until
    Ctrl-C or --timeout. Changes arrive from the store's change feed
    (LISTEN/NOTIFY on PostgreSQL); --json prints one JSON line per change.
    """
    from queuestore.core.models import LIVE

    if timeout is not None and timeout <= 0:
        _fail("--timeout must be more than 0 seconds", 2)
    stops = _statuses(until or [], "--until")
    if stops and not task_ids:
        _fail("--until needs the TASK_IDs to follow", 2)
    if stops - LIVE:
        _fail("--until takes live statuses (a finished task stops the watch anyway)", 2)
    with _reporting():
        store = _store(url)
        ids = list(dict.fromkeys(task_ids or []))
        with store.watch(owner=_owner(owner), task_ids=ids or None) as changes:
            # Read after the watch opened: nothing written between the two is missed.
            if ids:
                current = {task_id: store.get(task_id, owner=_owner(owner)) for task_id in ids}
            else:
                current = {t.id: t for t in store.iterate(owner=_owner(owner), status=LIVE)}
            finished = _follow(
                store, changes, current, ids=ids, timeout=timeout, as_json=as_json, stops=stops
            )
    if not finished and ids:
        _fail(f"tasks still running after {timeout}s", 1)


_RECHECK_SECONDS = 5.0
"""How long ``tasks watch`` waits on the feed before checking its tasks were not deleted."""


def _follow(
    store: SqlTaskStore,
    changes: Watch,
    current: dict[str, Task],
    *,
    ids: list[str],
    timeout: float | None,
    as_json: bool,
    stops: frozenset[TaskStatus] = frozenset(),
) -> bool:
    """Show changes until the followed tasks are terminal or in ``stops``; False when
    ``timeout`` ran out."""
    from queuestore.ops.presentation import TaskWatchView

    deadline = None if timeout is None else time.monotonic() + timeout
    view = TaskWatchView(_console(), as_json=as_json)
    with view:
        for task in current.values():
            view.show(task)

        def done() -> bool:
            return bool(ids) and all(
                task.is_terminal or task.status in stops for task in current.values()
            )

        while not done():
            wait = _RECHECK_SECONDS
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return False
            change = changes.get(timeout=wait)
            if change is None:
                if ids:
                    _forget_deleted(store, current, view)
                continue
            known = current.get(change.id)
            if known is not None and known.version >= change.version:
                continue
            current[change.id] = change
            view.show(change)
    return True


def _forget_deleted(store: SqlTaskStore, current: dict[str, Task], view: TaskWatchView) -> None:
    """Stop following tasks deleted meanwhile (the feed does not deliver deletions)."""
    from queuestore.core.errors import TaskNotFound

    for task_id, task in list(current.items()):
        if task.is_terminal:
            continue
        try:
            store.get(task_id)
        except TaskNotFound:
            view.deleted(task)
            del current[task_id]


@tasks.command("cancel")
def tasks_cancel(
    task_id: TaskIdArgument,
    url: UrlOption = None,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Why; it becomes the status message.")
    ] = None,
    owner: OwnerOption = None,
) -> None:
    """Cancel a task in the store; its worker stops at its next write or heartbeat.

    Put -- before an id that starts with -.
    """
    from queuestore.core.errors import InvalidTransition

    with _reporting():
        store = _store(url)
        try:
            task = store.cancel(task_id, reason=reason, owner=_owner(owner))
        except InvalidTransition as exc:
            _fail(f"task {task_id} is {exc.current} already: only a live task can be cancelled")
    _console().print(f"{task.id} {task.status}")


@tasks.command("submit")
def tasks_submit(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The job to run.")],
    input: Annotated[
        str,
        typer.Argument(
            metavar="INPUT", help='The job\'s keyword arguments, a JSON object: {"month": "11"}.'
        ),
    ] = "{}",
    *,
    url: UrlOption = None,
    owner: Annotated[str | None, typer.Option(metavar="OWNER", help="The task's owner.")] = None,
    context_id: Annotated[
        str | None, typer.Option(metavar="ID", help="Groups related tasks.")
    ] = None,
    delay: Annotated[
        str | None,
        typer.Option(
            metavar="SECONDS",
            help="Start no earlier than this from now: seconds (90), or ISO 8601 (PT5M).",
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            metavar="TIME",
            help="Start no earlier than this time: ISO 8601 with an offset "
            "(2026-12-08T02:00:00+01:00, or Z for UTC).",
        ),
    ] = None,
    unique_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY", help="While a live task of the owner holds this key, return that task."
        ),
    ] = None,
    priority: Annotated[
        int,
        typer.Option(min=0, max=9, metavar="0-9", help="0 (the default) to 9, the most urgent."),
    ] = 0,
    callback: Annotated[
        str | None,
        typer.Option(metavar="URL", help="Send the task's status changes to this URL."),
    ] = None,
    callback_events: Annotated[
        Literal["terminal", "all"],
        typer.Option(
            metavar="terminal|all",
            help="Which changes the callback gets: the end only, or every status.",
        ),
    ] = "terminal",
    timeout: Annotated[
        str | None,
        typer.Option(
            metavar="SECONDS", help="How long each run may take: seconds, or ISO 8601 (PT5M)."
        ),
    ] = None,
    start_by: Annotated[
        str | None,
        typer.Option(
            metavar="TIME",
            help="Not started by this time (ISO 8601, with an offset), it never runs.",
        ),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            metavar="TIME", help="Still live at this time (ISO 8601, with an offset), it fails."
        ),
    ] = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Submit a task and enqueue its job; print its id and status (or, --json, the task).

    A job the app does not register is refused, as the HTTP API refuses it.
    """
    from queuestore.core import validation as check
    from queuestore.core.callbacks import CallbackEvents, CallbackRequest
    from queuestore.submit.queue import TaskQueue

    arguments = _submission(input, delay, at)
    arguments |= _deadlines(timeout, start_by, deadline)
    with _reporting():
        settings = _settings(url)
        queue = TaskQueue(
            settings.make_store(),
            _celery_app(celery_app),
            priorities=settings.priorities,
            limits=settings.limits,
        )
        check.name(name)  # a malformed name is that, before it is an unknown one
        _check_job_name(queue, name, celery_app)
        task = queue.submit(
            name,
            owner=owner,
            context_id=context_id,
            unique_key=unique_key,
            priority=priority,
            callback=None
            if callback is None
            else CallbackRequest(url=callback, events=CallbackEvents(callback_events)),
            **arguments,
        )
    if as_json:
        _print_json(_task_json(task))
    else:
        starts = f" (starts {task.run_at.isoformat()})" if task.run_at is not None else ""
        _console().print(f"{task.id} {task.status}{starts}")


@tasks.command("submit-many")
def tasks_submit_many(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help='JSON lines, one task a line: {"name": "reports.build", "input": {...}}; '
            "- reads standard input.",
        ),
    ],
    *,
    url: UrlOption = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Submit many tasks in one transaction, then publish their jobs; print each id and status.

    Each line is an object of name (required), input, owner, context_id,
    unique_key, priority, delay (seconds) and run_at (ISO 8601 with an
    offset). A bad line anywhere, or a job the app does not register, is
    refused and nothing is written.
    """
    from queuestore.submit.queue import TaskQueue

    text = sys.stdin.read() if file == "-" else _read_text(file)
    items = [_batch_item(number, line) for number, line in _json_lines(text)]
    with _reporting():
        settings = _settings(url)
        queue = TaskQueue(
            settings.make_store(),
            _celery_app(celery_app),
            priorities=settings.priorities,
            limits=settings.limits,
        )
        for item in items:
            _check_job_name(queue, item["name"], celery_app)
        created = queue.submit_many(items)
    if as_json:
        _print_json([_task_json(task) for task in created])
    else:
        _console().print("\n".join(f"{task.id} {task.status}" for task in created))


_BATCH_FIELDS = frozenset(
    {"name", "input", "owner", "context_id", "unique_key", "priority", "delay", "run_at"}
)


def _read_text(file: str) -> str:
    try:
        with open(file, encoding="utf-8") as lines:
            return lines.read()
    except OSError as exc:
        _fail(f"FILE: cannot read {file}: {exc.strerror}", 2)


def _json_lines(text: str) -> list[tuple[int, str]]:
    """The file's non-blank lines, numbered from 1."""
    return [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _batch_item(number: int, line: str) -> dict[str, Any]:
    """``submit_many``'s item from one JSON line; a usage error naming the line when bad."""
    try:
        item = json.loads(line)
    except ValueError as exc:
        _fail(f"line {number}: not JSON: {exc}", 2)
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        _fail(f"line {number}: must be a JSON object with a name", 2)
    unknown = sorted(set(item) - _BATCH_FIELDS)
    if unknown:
        _fail(f"line {number}: unknown field {unknown[0]!r}", 2)
    from datetime import timedelta

    delay = item.get("delay")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            _fail(f"line {number}: delay must be seconds, zero or more", 2)
        item["delay"] = timedelta(seconds=delay)
    if item.get("run_at") is not None:
        item["run_at"] = _instant(f"line {number}: run_at", str(item["run_at"]))
    return item


def _check_job_name(queue: Any, name: str, celery_app: str) -> None:
    """Refuse a job the app does not register, as the HTTP API does; a usage error."""
    known = sorted(queue.job_names)
    if known and name not in known:
        more = f" and {len(known) - 50} more" if len(known) > 50 else ""
        _fail(f"no job named {name!r} in {celery_app!r}; known: {', '.join(known[:50])}{more}", 2)


def _statuses(values: list[str], option: str) -> frozenset[TaskStatus]:
    """The statuses an option names; a usage error naming the option when one is not."""
    from queuestore.core.models import TaskStatus

    known = {status.value: status for status in TaskStatus}
    unknown = [value for value in values if value not in known]
    if unknown:
        _fail(f"{option}: no status {unknown[0]!r}; one of {', '.join(known)}", 2)
    return frozenset(known[value] for value in values)


def _submission(input: str, delay: str | None, at: str | None) -> dict[str, Any]:
    """``submit``'s input and start from the command's texts; a usage error when bad."""
    from pydantic import TypeAdapter, ValidationError

    from queuestore.config import Duration

    example = """, e.g. '{"month": "2026-11"}' (quoted for the shell)"""
    try:
        document = json.loads(input)
    except ValueError as exc:
        _fail(f"INPUT must be a JSON object{example}; {input!r} is not JSON: {exc}", 2)
    if not isinstance(document, dict):
        _fail(f"INPUT must be a JSON object of the job's keyword arguments{example}", 2)
    if delay is not None and at is not None:
        _fail("give --delay or --at, not both", 2)
    arguments: dict[str, Any] = {"input": document}
    if delay is not None:
        try:
            arguments["delay"] = TypeAdapter(Duration).validate_python(delay)
        except ValidationError:
            _fail(f"--delay: {delay!r} is not a duration: give seconds (90) or ISO 8601 (PT5M)", 2)
    if at is not None:
        arguments["run_at"] = _instant("--at", at)
    return arguments


def _instant(option: str, text: str) -> Any:
    """The aware time ``text`` names; a usage error naming ``option`` when it is not one."""
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        _fail(f"{option}: {text!r} is not an ISO 8601 time, e.g. 2026-12-08T02:00:00+01:00", 2)
    if moment.tzinfo is None:
        _fail(f"{option}: {text!r} has no offset: add one, e.g. {text}Z for UTC or {text}+01:00", 2)
    return moment


def _deadlines(timeout: str | None, start_by: str | None, deadline: str | None) -> dict[str, Any]:
    """``submit``'s deadlines from the command's texts; a usage error when bad."""
    from pydantic import TypeAdapter, ValidationError

    from queuestore.config import Duration

    arguments: dict[str, Any] = {}
    if timeout is not None:
        try:
            arguments["timeout"] = TypeAdapter(Duration).validate_python(timeout)
        except ValidationError:
            _fail(f"--timeout: {timeout!r} is not a duration: seconds (90) or ISO 8601 (PT5M)", 2)
    if start_by is not None:
        arguments["start_by"] = _instant("--start-by", start_by)
    if deadline is not None:
        arguments["deadline"] = _instant("--deadline", deadline)
    return arguments


@tasks.command("resume")
def tasks_resume(
    task_id: TaskIdArgument,
    answer: Annotated[
        str, typer.Argument(metavar="ANSWER", help="The answer: JSON, or else taken as text.")
    ],
    *,
    url: UrlOption = None,
    owner: OwnerOption = None,
    text: Annotated[bool, typer.Option("--text", help="Take ANSWER as text, not JSON.")] = False,
    celery_app: AppOption = "workers",
) -> None:
    """Answer a task waiting for input (input_required) and run its job again."""
    from queuestore.core.errors import InvalidTransition
    from queuestore.submit.queue import TaskQueue

    value: Any = answer
    if not text:
        try:
            value = json.loads(answer)
        except ValueError:
            value = answer
    with _reporting():
        settings = _settings(url)
        store = settings.make_store()
        queue = TaskQueue(
            store, _celery_app(celery_app), priorities=settings.priorities, limits=settings.limits
        )
        try:
            task = queue.resume(task_id, value, owner=_owner(owner))
        except InvalidTransition as exc:
            _fail(
                f"task {task_id} is {exc.current}: only a task waiting for input "
                "(input_required) takes an answer"
            )
    _console().print(f"{task.id} {task.status}")


def _celery_app(name: str) -> Any:
    """The Celery app ``name`` (a module, or module:attribute): its broker and routes."""
    from celery.app.utils import find_app

    try:
        return find_app(name)
    except Exception as exc:  # find_app raises ImportError, AttributeError or its own errors
        _fail(f"cannot load the Celery app {name!r}: {exc}", 2)


@tasks.command("delete")
def tasks_delete(
    task_id: TaskIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    force: Annotated[bool, typer.Option(help="Delete even a live task (its run stops).")] = False,
) -> None:
    """Delete a task and everything stored with it."""
    with _reporting():
        store = _store(url)
        task = store.get(task_id, owner=_owner(owner))
        if not task.is_terminal and not force:
            _fail(f"task {task.id} is {task.status}; cancel it first, or pass --force", 1)
        store.delete(task_id, owner=_owner(owner))
    _console().print(f"{task.id} deleted")


# -- settings -------------------------------------------------------------------


# -- schedules ------------------------------------------------------------------

ScheduleIdArgument = Annotated[
    str,
    typer.Argument(
        metavar="SCHEDULE_ID", help="The schedule; put -- before an id that starts with -."
    ),
]
CronOption = Annotated[
    str | None,
    typer.Option(
        metavar="EXPR", help='A cron expression, e.g. "0 2 * * *" (quoted for the shell).'
    ),
]
EveryOption = Annotated[
    str | None,
    typer.Option(metavar="SECONDS", help="An interval in place of --cron: seconds, or ISO 8601."),
]
TimezoneOption = Annotated[
    str | None,
    typer.Option(metavar="ZONE", help="The cron expression's timezone, e.g. Europe/Paris (UTC)."),
]
CatchUpOption = Annotated[
    str | None,
    typer.Option(
        metavar="skip|once|each",
        help="Ticks missed while no beat ran: dropped, one task for all, or one each.",
    ),
]
CatchUpLimitOption = Annotated[
    int | None,
    typer.Option(metavar="N", help="With --catch-up each, the most missed ticks run (10)."),
]


def _schedule_json(schedule: Schedule) -> dict[str, Any]:
    """The schedule as the HTTP API shows it."""
    from queuestore.core.views import ScheduleView

    return ScheduleView.of(schedule).model_dump(mode="json")


def _print_schedule(schedule: Schedule, as_json: bool) -> None:
    if as_json:
        _print_json(_schedule_json(schedule))
        return
    from queuestore.ops.presentation import schedule_line

    _console().print(schedule_line(schedule), highlight=False)


def _schedule_queue(url: str | None, celery_app: str) -> Any:
    """A queue on the settings' store and the app, to check jobs and publish triggers."""
    from queuestore.submit.queue import TaskQueue

    settings = _settings(url)
    return TaskQueue(
        settings.make_store(),
        _celery_app(celery_app),
        priorities=settings.priorities,
        limits=settings.limits,
    )


def _timing(cron: str | None, every: str | None) -> dict[str, Any]:
    """``--cron`` or ``--every`` as the store's arguments; a usage error when bad."""
    from pydantic import TypeAdapter, ValidationError

    from queuestore.config import Duration

    if cron is not None and every is not None:
        _fail("give --cron or --every, not both", 2)
    if every is None:
        return {} if cron is None else {"cron": cron}
    try:
        return {"every": TypeAdapter(Duration).validate_python(every)}
    except ValidationError:
        _fail(f"--every: {every!r} is not a duration: give seconds (90) or ISO 8601 (PT5M)", 2)


@schedules.command("list")
def schedules_list(
    url: UrlOption = None, owner: OwnerOption = None, as_json: JsonOption = False
) -> None:
    """List schedules, oldest first: when each ticks, its next and last run, its last outcome."""
    with _reporting():
        found = _store(url).list_schedules(owner=_owner(owner), limit=1000)
    if as_json:
        _print_json({"schedules": [_schedule_json(schedule) for schedule in found]})
        return
    from queuestore.ops.presentation import schedule_table

    _console().print(schedule_table(found) if found else "no schedules")


@schedules.command("show")
def schedules_show(
    schedule_id: ScheduleIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one schedule."""
    with _reporting():
        schedule = _store(url).get_schedule(schedule_id, owner=_owner(owner))
    _print_schedule(schedule, as_json)


@schedules.command("add")
def schedules_add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The job each tick submits.")],
    input: Annotated[
        str,
        typer.Argument(metavar="INPUT", help="The job's keyword arguments, a JSON object."),
    ] = "{}",
    *,
    cron: CronOption = None,
    every: EveryOption = None,
    timezone: TimezoneOption = None,
    catch_up: CatchUpOption = None,
    catch_up_limit: CatchUpLimitOption = None,
    owner: Annotated[
        str | None, typer.Option(metavar="OWNER", help="The owner of the schedule and its tasks.")
    ] = None,
    schedule_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Its id (default: a new one).")
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Add it paused.")] = False,
    url: UrlOption = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Add a schedule: a job submitted on a cron expression or at an interval, by beat.

    A job the app does not register, or input it cannot take, is refused.
    """
    arguments = _submission(input, None, None) | _timing(cron, every)
    if timezone is not None:
        arguments["timezone"] = timezone
    if catch_up is not None:
        arguments["catch_up"] = catch_up
    if catch_up_limit is not None:
        arguments["catch_up_limit"] = catch_up_limit
    with _reporting():
        queue = _schedule_queue(url, celery_app)
        schedule = queue.create_schedule(
            name, owner=owner, schedule_id=schedule_id, paused=paused, **arguments
        )
    _print_schedule(schedule, as_json)


@schedules.command("change")
def schedules_change(
    schedule_id: ScheduleIdArgument,
    *,
    input: Annotated[
        str | None, typer.Option(metavar="JSON", help="New input for the job, a JSON object.")
    ] = None,
    cron: CronOption = None,
    every: EveryOption = None,
    timezone: TimezoneOption = None,
    catch_up: CatchUpOption = None,
    catch_up_limit: CatchUpLimitOption = None,
    owner: OwnerOption = None,
    url: UrlOption = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Change a schedule; what is not given stays. A new timing counts from now."""
    arguments: dict[str, Any] = _timing(cron, every)
    if input is not None:
        arguments["input"] = _submission(input, None, None)["input"]
    given = {"timezone": timezone, "catch_up": catch_up, "catch_up_limit": catch_up_limit}
    arguments |= {key: value for key, value in given.items() if value is not None}
    with _reporting():
        queue = _schedule_queue(url, celery_app)
        schedule = queue.update_schedule(schedule_id, owner=_owner(owner), **arguments)
    _print_schedule(schedule, as_json)


@schedules.command("pause")
def schedules_pause(
    schedule_id: ScheduleIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pause a schedule: no tick makes a task until it is resumed."""
    with _reporting():
        schedule = _store(url).pause_schedule(schedule_id, owner=_owner(owner))
    _print_schedule(schedule, as_json)


@schedules.command("resume")
def schedules_resume(
    schedule_id: ScheduleIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resume a paused schedule from its next tick; the ticks it missed are not made."""
    with _reporting():
        schedule = _store(url).resume_schedule(schedule_id, owner=_owner(owner))
    _print_schedule(schedule, as_json)


@schedules.command("trigger")
def schedules_trigger(
    schedule_id: ScheduleIdArgument,
    url: UrlOption = None,
    owner: OwnerOption = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Submit the schedule's job now, once; print the task's id and status."""
    with _reporting():
        task = _schedule_queue(url, celery_app).trigger_schedule(schedule_id, owner=_owner(owner))
    if as_json:
        _print_json(_task_json(task))
    else:
        _console().print(f"{task.id} {task.status}")


@schedules.command("delete")
def schedules_delete(
    schedule_id: ScheduleIdArgument, url: UrlOption = None, owner: OwnerOption = None
) -> None:
    """Delete a schedule; the tasks it made stay."""
    with _reporting():
        _store(url).delete_schedule(schedule_id, owner=_owner(owner))
    _console().print(f"{schedule_id} deleted")


@config.command("show")
def config_show(as_json: JsonOption = False) -> None:
    """Print the settings this process reads from QUEUESTORE_* (secrets hidden)."""
    from queuestore.ops.reference import effective_settings

    with _reporting():
        values = effective_settings(_settings(None))
    if as_json:
        _print_json(values)
        return
    for name, value in values.items():
        shown = (
            "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value
        )
        _console().print(
            f"QUEUESTORE_{name.upper()}={shown}", markup=False, highlight=False, soft_wrap=True
        )


@config.command("reference")
def config_reference() -> None:
    """Print the configuration reference in Markdown (docs/reference/configuration.md)."""
    from queuestore.ops.reference import configuration_reference

    sys.stdout.write(configuration_reference())


# -- maintenance ----------------------------------------------------------------


# -- flow control ---------------------------------------------------------------

KindArgument = Annotated[
    str, typer.Argument(metavar="KIND", help="What to pause: job, owner or key.")
]
ValueArgument = Annotated[
    str, typer.Argument(metavar="VALUE", help="The job's name, the owner, or the key.")
]


@flow.command("pause")
def flow_pause(
    kind: KindArgument,
    value: ValueArgument,
    *,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="TIME", help="End of the pause, ISO 8601 with offset."),
    ] = None,
    for_: Annotated[
        str | None,
        typer.Option("--for", metavar="DURATION", help="Length: seconds (90) or ISO (PT5M)."),
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", metavar="TEXT", help="Why, for the record.")
    ] = None,
    url: UrlOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop every start of a job, an owner or a key, on every worker; running tasks finish.

    Without --until or --for it lasts until queuestore flow resume.
    """
    end = _pause_end(until, for_)
    with _reporting():
        pause = _store(url).pause(kind, value, until=end, reason=reason)
    if as_json:
        _print_json(pause.as_json())
        return
    ends = "until resumed" if pause.until is None else f"until {pause.until.isoformat()}"
    _console().print(f"paused {pause.kind.value} {pause.value} {ends}", highlight=False)


def _pause_end(until: str | None, for_: str | None) -> Any:
    """The end of a pause from ``--until`` or ``--for``; a usage error when bad."""
    from datetime import UTC, datetime

    from pydantic import TypeAdapter, ValidationError

    from queuestore.config import Duration

    if until is not None and for_ is not None:
        _fail("give --until or --for, not both", 2)
    if until is not None:
        return _instant("--until", until)
    if for_ is None:
        return None
    try:
        return datetime.now(UTC) + TypeAdapter(Duration).validate_python(for_)
    except ValidationError:
        _fail(f"--for: {for_!r} is not a duration: give seconds (90) or ISO 8601 (PT5M)", 2)


@flow.command("resume")
def flow_resume(
    kind: KindArgument, value: ValueArgument, url: UrlOption = None, as_json: JsonOption = False
) -> None:
    """Lift the pause of a job, an owner or a key: its waiting tasks start again."""
    with _reporting():
        resumed = _store(url).resume(kind, value)
    if as_json:
        _print_json({"kind": kind, "value": value, "resumed": resumed})
        return
    _console().print(
        f"resumed {kind} {value}" if resumed else f"{kind} {value} was not paused", highlight=False
    )


@flow.command("show")
def flow_show(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """The pauses in force, the rate limits the settings give the jobs, and their use now."""
    with _reporting():
        settings = _settings(url)
        store = _store(url)
        pauses = store.pauses()
        uses = store.rate_use(settings.flow)
    rates = {
        name: {
            "limit": rate.limit,
            "per": rate.per.total_seconds(),
            "key": rate.key,
            "cost": rate.cost,
        }
        for name, rate in settings.flow.rates.items()
    }
    if as_json:
        _print_json(
            {
                "pauses": [pause.as_json() for pause in pauses],
                "rate_limits": rates,
                "rate_use": [use.as_json() for use in uses],
            }
        )
        return
    console = _console()
    if not pauses:
        console.print("no pause in force")
    for pause in pauses:
        ends = "until resumed" if pause.until is None else f"until {pause.until.isoformat()}"
        why = f" ({pause.reason})" if pause.reason else ""
        console.print(f"paused {pause.kind.value} {pause.value} {ends}{why}", highlight=False)
    for name, rate in rates.items():
        keyed = f" per {rate['key']}" if rate["key"] else ""
        console.print(
            f"rate {name}: {rate['limit']} per {rate['per']:g} s{keyed}, cost {rate['cost']}",
            highlight=False,
        )
        for use in (use for use in uses if use.job == name):
            console.print(f"  {_rate_use_line(use)}", highlight=False)


def _rate_use_line(use: Any) -> str:
    """``openai: 7 / 10 per 1 s``, and until when tasks wait for turns."""
    who = "used now" if use.key is None else use.key or "(no key)"
    line = f"{who}: {use.used} / {use.limit} per {use.per.total_seconds():g} s"
    if use.next_turn is not None:
        line += f", tasks wait for turns until {use.next_turn.isoformat()}"
    return line


@flow.command("drain")
def flow_drain(
    worker: Annotated[
        str, typer.Argument(metavar="WORKER", help="The worker's node name, e.g. celery@host.")
    ],
    *,
    undo: Annotated[
        bool, typer.Option("--undo", help="Take messages again (after a drain).")
    ] = False,
    celery_app: AppOption = "workers",
) -> None:
    """Drain one worker for a deploy: it takes no new message and finishes what it runs.

    Celery's own remote control (cancel_consumer on the app's queue): the
    other workers go on, and the tasks the drained one would have taken wait
    for them. Stop the worker once its running tasks ended (queuestore
    tasks running); --undo makes it consume again.
    """
    with _reporting():
        celery = _celery_app(celery_app)
        queue_name = celery.conf.task_default_queue or "celery"
        control = celery.control.add_consumer if undo else celery.control.cancel_consumer
        replies = control(queue_name, destination=[worker], reply=True, timeout=5.0)
    if not replies:
        _fail(f"worker {worker} did not answer: is it running, and is the name its node name?")
    verb = "takes messages from" if undo else "stopped taking messages from"
    _console().print(f"{worker} {verb} queue {queue_name}", highlight=False)


@app.command()
def janitor(
    url: UrlOption = None,
    ttl: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds a terminal task is kept.")
    ] = 86400.0,
    batch_size: Annotated[
        int, typer.Option(metavar="N", help="Tasks deleted per transaction.")
    ] = 1000,
) -> None:
    """Delete terminal tasks older than TTL now (beat runs the same on a schedule)."""
    from datetime import timedelta

    from queuestore.beat.janitor import run_janitor

    with _reporting():
        removed = run_janitor(_store(url), timedelta(seconds=ttl), batch_size=batch_size)
    _console().print(f"removed {removed} expired tasks")


@app.command()
def deliver(
    url: UrlOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, metavar="N", help="Calls at once; default QUEUESTORE_DELIVERY_CONCURRENCY."
        ),
    ] = None,
    new_secret: Annotated[
        bool, typer.Option("--new-secret", help="Print a new signing secret and exit.")
    ] = False,
) -> None:
    """Send the task status changes to their callbacks until stopped (SIGTERM, Ctrl-C).

    Run as many as needed, anywhere that reaches the database and the
    receivers: they share the work, and each delivery of a callback goes in
    the order of its task's changes.
    """
    import logging
    import signal

    from queuestore.core.logs import setup as setup_logging
    from queuestore.push.deliverer import Deliverer
    from queuestore.push.signing import SigningSecret

    if new_secret:
        _console().print(str(SigningSecret.generate()))
        return
    with _reporting():
        settings = _settings(url)
        store = settings.make_store()
        observer = None
        if settings.metrics_port is not None:
            from queuestore.metrics.prometheus import serve_delivery_metrics

            observer = serve_delivery_metrics(store, settings.metrics_port)
        deliverer = Deliverer(
            store,
            secrets=settings.signing_secrets,
            policy=settings.delivery_policy,
            formats=_delivery_formats(),
            concurrency=concurrency or settings.delivery_concurrency,
            observer=observer,
        )
    setup_logging(settings.log_format, settings.log_level or "INFO")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: deliverer.stop())
    logging.getLogger("queuestore.push.deliverer").info("delivering callbacks from %r", store)
    deliverer.run()


def _delivery_formats() -> dict[Any, Any]:
    """The formats beside the webhook's: A2A push notifications, when a2a-sdk is installed."""
    from queuestore.core.callbacks import CallbackFormat

    try:
        from queuestore.a2a.push_configs import a2a_request
    except ImportError:
        return {}
    return {CallbackFormat.A2A: a2a_request}


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Keep the demo's folder afterwards.")] = False,
) -> None:
    """Run the whole flow on the embedded default: worker, beat, jobs, cancel, input, janitor."""
    from queuestore.ops.demo import run_demo

    raise typer.Exit(run_demo(_console(), keep=keep))


@app.command()
def serve(
    url: UrlOption = None,
    host: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Address; default QUEUESTORE_HTTP_HOST.")
    ] = None,
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="Port; default QUEUESTORE_HTTP_PORT.")
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--app",
            metavar="MODULE[:NAME]",
            help="The module holding the workers' TaskQueue or Celery app; "
            "default: one built from the settings.",
        ),
    ] = None,
) -> None:
    """Run the HTTP API and its dashboard (needs the http extra)."""
    try:
        from queuestore.http import serve as serve_http
    except ImportError as exc:
        _fail(f"queuestore serve needs the http extra: {exc}", 2)
    with _reporting():
        settings = _settings(url)
    try:
        serve_http(settings, host, port, queue=queue)
    except (ImportError, ValueError) as exc:
        _fail(str(exc), 2)


def main(args: Sequence[str] | None = None) -> int:
    """The ``queuestore`` command: usage errors are one line too, not a help panel."""
    try:
        code = app(args=args, prog_name="queuestore", standalone_mode=False)
    except typer.TyperException as exc:  # click's errors, as typer exports them
        context = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as click does
            sys.stdout.write(exc.format_message() + "\n")
            return 0
        where = f"{context.command_path}: " if context is not None else ""
        given = list(sys.argv[1:] if args is None else args)
        said = _PYDANTIC_WORDS.sub(lambda match: _PLAIN_WORDS[match[0]], exc.format_message())
        _error_line(f"{where}{said}{_flag_hint(context, given)}")
        return exc.exit_code
    except typer.Abort:
        return 130
    return int(code or 0)


_PLAIN_WORDS = {
    "Input should be a valid integer, unable to parse string as an integer": "not a whole number",
    "Input should be a valid number, unable to parse string as a number": "not a number",
}
"""What the checks of typer's options say (pydantic's words), as a user would."""
_PYDANTIC_WORDS = re.compile("|".join(map(re.escape, _PLAIN_WORDS)))

_BOOLEAN_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _flag_hint(context: Any, given: list[str]) -> str:
    """What to do when a flag was given a value (``--json true``): flags take none."""
    if context is None:
        return ""
    flags = {
        name
        for param in context.command.params
        if getattr(param, "is_flag", False)
        for name in [*param.opts, *param.secondary_opts]
    }
    for flag, word in itertools.pairwise(given):
        if flag in flags and word.lower() in _BOOLEAN_WORDS:
            return f"; {flag} takes no value: give {flag} alone, or leave it out"
    return ""
