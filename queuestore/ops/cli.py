"""The ``queuestore`` command: workers, beat, schema migrations, tasks, the janitor, the demo.

Inspecting commands print for people by default and take ``--json`` for
scripts (one JSON document, or JSON lines for ``tasks watch``). Every error
is one line on stderr and a non-zero exit (2: bad usage or configuration,
1: the store refused or failed), and bad input writes nothing.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from queuestore.beat.janitor import run_janitor
from queuestore.config import Duration, Settings
from queuestore.core.callbacks import CallbackEvents, CallbackFormat, CallbackRequest
from queuestore.core.concurrency import Caps
from queuestore.core.errors import InvalidCursor, InvalidTaskData, QueueStoreError, TaskNotFound
from queuestore.core.logs import setup as setup_logging
from queuestore.core.models import LIVE, Task
from queuestore.core.owner import ANY, Owner
from queuestore.core.watch import Watch
from queuestore.ops.presentation import TaskWatchView, step_table, task_table
from queuestore.push.signing import SigningSecret
from queuestore.store import UNSET
from queuestore.store.sql import SqlTaskStore

app = typer.Typer(
    help="A durable task store whose tasks run as Celery jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db = typer.Typer(help="Manage the database schema.", no_args_is_help=True)
tasks = typer.Typer(
    help="Submit, inspect, watch, answer, cancel and delete tasks.", no_args_is_help=True
)
config = typer.Typer(help="Show the settings and their reference.", no_args_is_help=True)
app.add_typer(db, name="db")
app.add_typer(tasks, name="tasks")
app.add_typer(config, name="config")

console = Console()
errors = Console(stderr=True, soft_wrap=True)

_CELERY_OPTIONS = {"allow_extra_args": True, "ignore_unknown_options": True}

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Database URL; default: QUEUESTORE_DATABASE_URL or embedded."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
OwnerOption = Annotated[
    str | None, typer.Option(help="Act as this owner (default: every owner, as an operator).")
]
AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        "-A",
        help="The Celery app: a module (its `app`) or module:attribute. Default: the package's.",
    ),
]


def _fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    errors.print(f"queuestore: error: {' '.join(message.split())}", markup=False, highlight=False)
    raise typer.Exit(code)


@contextmanager
def _reporting() -> Iterator[None]:
    """Turn the library's errors into one line and an exit code."""
    try:
        yield
    except ValidationError as exc:
        _fail(f"invalid configuration: {_first_error(exc)}", 2)
    except (InvalidTaskData, InvalidCursor) as exc:
        _fail(str(exc), 2)
    except QueueStoreError as exc:
        _fail(str(exc), 1)
    except SQLAlchemyError as exc:  # the schema commands use the engine directly
        _fail(f"database unavailable: {str(getattr(exc, 'orig', None) or exc).splitlines()[0]}", 1)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _settings(url: str | None) -> Settings:
    settings = Settings()
    return settings if url is None else settings.model_copy(update={"database_url": url})


def _store(url: str | None) -> SqlTaskStore:
    settings = _settings(url).model_copy(update={"auto_migrate": False})
    return settings.make_store()


def _owner(owner: str | None) -> Owner:
    return ANY if owner is None else owner


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _task_json(task: Task) -> dict[str, Any]:
    return task.model_dump(mode="json")


# -- workers and beat ---------------------------------------------------------


@app.command(context_settings=_CELERY_OPTIONS)
def worker(ctx: typer.Context, celery_app: AppOption = "workers") -> None:
    """Start a Celery worker that runs the app's jobs.

    Other options go to `celery worker`, e.g. `queuestore worker --concurrency 2 -Q reports`
    (or after `--`). Settings come from QUEUESTORE_* variables.
    """
    raise typer.Exit(_celery("worker", celery_app, ctx.args))


@app.command(context_settings=_CELERY_OPTIONS)
def beat(ctx: typer.Context, celery_app: AppOption = "workers") -> None:
    """Start Celery beat: the janitor, reaper and sweep. Run exactly one.

    Other options go to `celery beat`, e.g. `--schedule /var/lib/queuestore/schedule`.
    """
    raise typer.Exit(_celery("beat", celery_app, ctx.args))


def _celery(command: str, name: str, arguments: Sequence[str]) -> int:
    with _reporting():
        settings = Settings()
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
def db_upgrade(url: UrlOption = None, revision: str = "head") -> None:
    """Create or migrate the schema to the newest revision."""
    with _reporting():
        store = _store(url)
        store.migrate(revision)
    console.print(f"[green]schema at {revision}[/] on {store!r}")


@db.command("downgrade")
def db_downgrade(revision: str, url: UrlOption = None) -> None:
    """Migrate the schema down to REVISION (``base`` drops everything)."""
    from queuestore.store.sql.migrations import downgrade

    with _reporting():
        store = _store(url)
        with store.engine.begin() as connection:
            downgrade(connection, revision)
    console.print(f"[yellow]schema at {revision}[/] on {store!r}")


@db.command("current")
def db_current(url: UrlOption = None, as_json: JsonOption = False) -> None:
    """Print the schema revision the database is at."""
    from alembic.migration import MigrationContext

    from queuestore.store.sql.migrations import VERSION_TABLE

    with _reporting():
        store = _store(url)
        with store.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            revision = context.get_current_revision()
    if as_json:
        _print_json({"revision": revision})
    else:
        console.print(revision or "none")


# -- tasks --------------------------------------------------------------------


@tasks.command("list")
def tasks_list(
    *,
    url: UrlOption = None,
    status: Annotated[list[str] | None, typer.Option(help="Only these statuses.")] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner's tasks.")] = None,
    name: Annotated[str | None, typer.Option(help="Only tasks of this job.")] = None,
    context: Annotated[str | None, typer.Option(help="Only tasks of this context id.")] = None,
    limit: Annotated[int, typer.Option(help="Tasks per page (1..1000).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next page, as a listing gave it.")] = None,
    parent: Annotated[str | None, typer.Option(help="Only the child tasks of this task.")] = None,
    roots: Annotated[bool, typer.Option("--roots", help="Only root tasks (no parent).")] = False,
    as_json: JsonOption = False,
) -> None:
    """List tasks, newest first."""
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
    console.print(task_table(page.tasks))
    if page.next_cursor is None:
        return
    if settings.cursor_secret is None:
        # Each process signs cursors with a random key unless one is configured.
        console.print("more tasks: raise --limit, or set QUEUESTORE_CURSOR_SECRET to page")
    else:
        console.print(f"next page: --cursor {page.next_cursor}", overflow="fold")


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
    table = Table("owner", "job", "running", "owner limit", "job limit")
    for row in rows:
        table.add_row(
            "-" if row["owner"] is None else str(row["owner"]),
            str(row["job"]),
            str(row["running"]),
            "-" if row["owner_limit"] is None else str(row["owner_limit"]),
            "-" if row["job_limit"] is None else str(row["job_limit"]),
        )
    console.print(table if rows else "no task is running")


@tasks.command("deliveries")
def tasks_deliveries(
    task_id: str, url: UrlOption = None, owner: OwnerOption = None, as_json: JsonOption = False
) -> None:
    """The task's callback deliveries: pending, delivered and dead, oldest first."""
    with _reporting():
        deliveries = _store(url).deliveries(task_id, owner=_owner(owner))
    if as_json:
        _print_json(
            {"deliveries": [d.model_dump(mode="json", exclude={"task"}) for d in deliveries]}
        )
        return
    if not deliveries:
        console.print("no delivery: the task has no callback, or no change it wants yet")
        return
    table = Table("id", "status", "state", "tries", "changed", "delivered / next", "error", "url")
    for delivery in deliveries:
        when = delivery.delivered_at or delivery.next_try_at
        table.add_row(
            str(delivery.id),
            delivery.status.value,
            delivery.state.value,
            str(delivery.tries),
            delivery.created_at.isoformat(timespec="seconds"),
            "-" if when is None else when.isoformat(timespec="seconds"),
            delivery.last_error or "-",
            delivery.url,
        )
    console.print(table)


@tasks.command("redeliver")
def tasks_redeliver(
    task_id: str,
    delivery_id: Annotated[
        int, typer.Argument(help="The dead delivery, as `deliveries` lists it.")
    ],
    url: UrlOption = None,
    owner: OwnerOption = None,
) -> None:
    """Send a dead delivery again, now (its callback's later ones wait behind it)."""
    with _reporting():
        delivery = _store(url).redeliver(task_id, delivery_id, owner=_owner(owner))
    console.print(f"delivery {delivery.id} of {delivery.task_id} is {delivery.state.value}")


def _caps_json(caps: Caps) -> dict[str, int | None]:
    return {"owner_limit": caps.owner, "job_limit": caps.job}


@tasks.command("show")
def tasks_show(
    task_id: str, url: UrlOption = None, owner: OwnerOption = None, as_json: JsonOption = False
) -> None:
    """Print one task, its steps and its children (put -- before an id that starts with -)."""
    with _reporting():
        store = _store(url)
        task = store.get(task_id, owner=_owner(owner))
        steps = store.steps(task.id, owner=_owner(owner))
        children = store.count(parent_id=task.id, owner=_owner(owner))
        live = store.count(parent_id=task.id, owner=_owner(owner), status=LIVE)
    if as_json:
        document = _task_json(task)
        document["steps"] = [step.model_dump(mode="json") for step in steps]
        document["children"] = {"total": children, "live": live}
        _print_json(document)
        return
    console.print_json(task.model_dump_json())
    if steps:
        console.print(step_table(steps))
    if children:
        console.print(f"children: {children} ({live} live): tasks list --parent {task.id}")


@tasks.command("watch")
def tasks_watch(
    task_ids: Annotated[list[str] | None, typer.Argument(help="Tasks to follow.")] = None,
    url: UrlOption = None,
    owner: OwnerOption = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Stop after this many seconds (exit 1 if the IDs are not finished)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Follow tasks live until every one is finished.

    Without IDs, follow every task (the live ones, then each one written) until
    Ctrl-C or --timeout. Changes arrive from the store's change feed
    (LISTEN/NOTIFY on PostgreSQL); --json prints one JSON line per change.
    """
    if timeout is not None and timeout <= 0:
        _fail("--timeout must be more than 0 seconds", 2)
    with _reporting():
        store = _store(url)
        ids = list(dict.fromkeys(task_ids or []))
        with store.watch(owner=_owner(owner), task_ids=ids or None) as changes:
            # Read after the watch opened: nothing written between the two is missed.
            if ids:
                current = {task_id: store.get(task_id, owner=_owner(owner)) for task_id in ids}
            else:
                current = {t.id: t for t in store.iterate(owner=_owner(owner), status=LIVE)}
            finished = _follow(store, changes, current, ids=ids, timeout=timeout, as_json=as_json)
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
) -> bool:
    """Show changes until the followed tasks are terminal; False when ``timeout`` ran out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    view = TaskWatchView(console, as_json=as_json)
    with view:
        for task in current.values():
            view.show(task)

        def done() -> bool:
            return bool(ids) and all(task.is_terminal for task in current.values())

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
    task_id: str, url: UrlOption = None, reason: str | None = None, owner: OwnerOption = None
) -> None:
    """Cancel a task in the store; its worker stops at its next write or heartbeat.

    Put -- before an id that starts with -.
    """
    with _reporting():
        task = _store(url).cancel(task_id, reason=reason, owner=_owner(owner))
    console.print(f"{task.id} {task.status}")


@tasks.command("submit")
def tasks_submit(
    name: Annotated[str, typer.Argument(help="The job to run.")],
    input: Annotated[
        str, typer.Argument(help="The job's keyword arguments, a JSON object.")
    ] = "{}",
    *,
    url: UrlOption = None,
    owner: Annotated[str | None, typer.Option(help="The task's owner.")] = None,
    context_id: Annotated[str | None, typer.Option(help="Groups related tasks.")] = None,
    delay: Annotated[
        str | None,
        typer.Option(help="Start no earlier than this from now: seconds, or ISO 8601 (PT5M)."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(help="Start no earlier than this time: ISO 8601 with an offset."),
    ] = None,
    unique_key: Annotated[
        str | None,
        typer.Option(help="While a live task of the owner holds this key, return that task."),
    ] = None,
    priority: Annotated[
        int, typer.Option(min=0, max=9, help="0 (the default) to 9, the most urgent.")
    ] = 0,
    callback: Annotated[
        str | None, typer.Option(help="Send the task's status changes to this URL.")
    ] = None,
    callback_events: Annotated[
        CallbackEvents,
        typer.Option(help="Which changes the callback gets: the end only, or every status."),
    ] = CallbackEvents.TERMINAL,
    timeout: Annotated[
        str | None,
        typer.Option(help="How long each run may take: seconds, or ISO 8601 (PT5M)."),
    ] = None,
    start_by: Annotated[
        str | None,
        typer.Option(help="Not started by this time (ISO 8601, offset), it never runs."),
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(help="Still live at this time (ISO 8601, offset), it fails."),
    ] = None,
    celery_app: AppOption = "workers",
    as_json: JsonOption = False,
) -> None:
    """Submit a task and enqueue its job; print its id and status (or, --json, the task)."""
    from queuestore.submit.queue import TaskQueue

    arguments = _submission(input, delay, at)
    arguments |= _deadlines(timeout, start_by, deadline)
    with _reporting():
        settings = _settings(url).model_copy(update={"auto_migrate": False})
        queue = TaskQueue(
            settings.make_store(),
            _celery_app(celery_app),
            priorities=settings.priorities,
            limits=settings.limits,
        )
        task = queue.submit(
            name,
            owner=owner,
            context_id=context_id,
            unique_key=unique_key,
            priority=priority,
            callback=None
            if callback is None
            else CallbackRequest(url=callback, events=callback_events),
            **arguments,
        )
    if as_json:
        _print_json(_task_json(task))
    else:
        starts = f" (starts {task.run_at.isoformat()})" if task.run_at is not None else ""
        console.print(f"{task.id} {task.status}{starts}")


def _deadlines(timeout: str | None, start_by: str | None, deadline: str | None) -> dict[str, Any]:
    """``submit``'s deadlines from the command's texts; a usage error when bad."""
    arguments: dict[str, Any] = {}
    if timeout is not None:
        try:
            arguments["timeout"] = TypeAdapter(Duration).validate_python(timeout)
        except ValidationError as exc:
            _fail(f"--timeout: {exc.errors()[0]['msg']} (seconds, or ISO 8601 such as PT5M)", 2)
    for option, value, key in (
        ("--start-by", start_by, "start_by"),
        ("--deadline", deadline, "deadline"),
    ):
        if value is not None:
            try:
                arguments[key] = datetime.fromisoformat(value)
            except ValueError as exc:
                _fail(f"{option}: {exc}", 2)
    return arguments


def _submission(input: str, delay: str | None, at: str | None) -> dict[str, Any]:
    """``submit``'s input and start from the command's texts; a usage error when bad."""
    try:
        document = json.loads(input)
    except ValueError as exc:
        _fail(f"INPUT must be a JSON object: {exc}", 2)
    if not isinstance(document, dict):
        _fail("INPUT must be a JSON object", 2)
    arguments: dict[str, Any] = {"input": document}
    if delay is not None:
        try:
            arguments["delay"] = TypeAdapter(Duration).validate_python(delay)
        except ValidationError as exc:
            _fail(f"--delay: {exc.errors()[0]['msg']} (seconds, or ISO 8601 such as PT5M)", 2)
    if at is not None:
        try:
            arguments["run_at"] = datetime.fromisoformat(at)
        except ValueError as exc:
            _fail(f"--at: {exc}", 2)
    return arguments


@tasks.command("resume")
def tasks_resume(
    task_id: str,
    answer: Annotated[str, typer.Argument(help="The answer: JSON, or else taken as text.")],
    *,
    url: UrlOption = None,
    owner: OwnerOption = None,
    text: Annotated[bool, typer.Option("--text", help="Take ANSWER as text, not JSON.")] = False,
    celery_app: AppOption = "workers",
) -> None:
    """Answer a task waiting for input (input_required) and run its job again."""
    from queuestore.submit.queue import TaskQueue

    value: Any = answer
    if not text:
        try:
            value = json.loads(answer)
        except ValueError:
            value = answer
    with _reporting():
        settings = _settings(url).model_copy(update={"auto_migrate": False})
        store = settings.make_store()
        queue = TaskQueue(
            store, _celery_app(celery_app), priorities=settings.priorities, limits=settings.limits
        )
        task = queue.resume(task_id, value, owner=_owner(owner))
    console.print(f"{task.id} {task.status}")


def _celery_app(name: str) -> Any:
    """The Celery app ``name`` (a module, or module:attribute): its broker and routes."""
    from celery.app.utils import find_app

    try:
        return find_app(name)
    except Exception as exc:  # find_app raises ImportError, AttributeError or its own errors
        _fail(f"cannot load the Celery app {name!r}: {exc}", 2)


@tasks.command("delete")
def tasks_delete(
    task_id: str,
    url: UrlOption = None,
    owner: OwnerOption = None,
    force: Annotated[bool, typer.Option(help="Delete even a live task (its run stops).")] = False,
) -> None:
    """Delete a task and everything stored with it (put -- before an id that starts with -)."""
    with _reporting():
        store = _store(url)
        task = store.get(task_id, owner=_owner(owner))
        if not task.is_terminal and not force:
            _fail(f"task {task.id} is {task.status}; cancel it first, or pass --force", 1)
        store.delete(task_id, owner=_owner(owner))
    console.print(f"{task.id} deleted")


# -- settings -------------------------------------------------------------------


@config.command("show")
def config_show(as_json: JsonOption = False) -> None:
    """Print the settings this process reads from QUEUESTORE_* (secrets hidden)."""
    from queuestore.ops.reference import effective_settings

    with _reporting():
        values = effective_settings(Settings())
    if as_json:
        _print_json(values)
        return
    for name, value in values.items():
        shown = (
            "unset" if value is None else json.dumps(value) if not isinstance(value, str) else value
        )
        console.print(
            f"QUEUESTORE_{name.upper()}={shown}", markup=False, highlight=False, soft_wrap=True
        )


@config.command("reference")
def config_reference() -> None:
    """Print the configuration reference in Markdown (docs/reference/configuration.md)."""
    from queuestore.ops.reference import configuration_reference

    sys.stdout.write(configuration_reference())


# -- maintenance ----------------------------------------------------------------


@app.command()
def janitor(
    url: UrlOption = None,
    ttl: Annotated[float, typer.Option(help="Seconds a terminal task is kept.")] = 86400.0,
    batch_size: int = 1000,
) -> None:
    """Delete terminal tasks older than TTL now (beat runs the same on a schedule)."""
    with _reporting():
        removed = run_janitor(_store(url), timedelta(seconds=ttl), batch_size=batch_size)
    console.print(f"removed {removed} expired tasks")


@app.command()
def deliver(
    url: UrlOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Calls at once; default QUEUESTORE_DELIVERY_CONCURRENCY."),
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
    from queuestore.push.deliverer import Deliverer

    if new_secret:
        console.print(str(SigningSecret.generate()))
        return
    with _reporting():
        settings = _settings(url)
        store = settings.model_copy(update={"auto_migrate": False}).make_store()
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


def _delivery_formats() -> dict[CallbackFormat, Any]:
    """The formats beside the webhook's: A2A push notifications, when a2a-sdk is installed."""
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

    raise typer.Exit(run_demo(console, keep=keep))


@app.command()
def serve(
    url: UrlOption = None,
    host: Annotated[str | None, typer.Option(help="Address; default QUEUESTORE_HTTP_HOST.")] = None,
    port: Annotated[int | None, typer.Option(help="Port; default QUEUESTORE_HTTP_PORT.")] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="MODULE[:NAME] holding the workers' TaskQueue or Celery app; "
            "default: one built from the settings.",
        ),
    ] = None,
) -> None:
    """Run the HTTP API and its dashboard (needs the ``http`` extra)."""
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
        errors.print(f"queuestore: error: {where}{exc.format_message()}", markup=False)
        return exc.exit_code
    except typer.Abort:
        return 130
    return int(code or 0)
