"""The ``queuestore`` command: schema migrations, task inspection, the janitor, the demo."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.console import Console

from queuestore.config import Settings
from queuestore.errors import QueueStoreError
from queuestore.janitor import run_janitor
from queuestore.presentation import task_table

app = typer.Typer(help="A durable task store whose tasks run as Celery jobs.", no_args_is_help=True)
db = typer.Typer(help="Manage the database schema.", no_args_is_help=True)
tasks = typer.Typer(help="Inspect and cancel tasks.", no_args_is_help=True)
app.add_typer(db, name="db")
app.add_typer(tasks, name="tasks")

console = Console()

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Database URL; default: QUEUESTORE_DATABASE_URL or embedded."),
]


def _settings(url: str | None) -> Settings:
    settings = Settings()
    return settings if url is None else settings.model_copy(update={"database_url": url})


def _store(url: str | None) -> Any:
    settings = _settings(url).model_copy(update={"auto_migrate": False})
    return settings.make_store()


@db.command("upgrade")
def db_upgrade(url: UrlOption = None, revision: str = "head") -> None:
    """Create or migrate the schema to the newest revision."""
    store = _store(url)
    store.migrate(revision)
    console.print(f"[green]schema at {revision}[/] on {store!r}")


@db.command("downgrade")
def db_downgrade(revision: str, url: UrlOption = None) -> None:
    """Migrate the schema down to REVISION (``base`` drops everything)."""
    from queuestore.migrations import downgrade

    store = _store(url)
    with store.engine.begin() as connection:
        downgrade(connection, revision)
    console.print(f"[yellow]schema at {revision}[/] on {store!r}")


@db.command("current")
def db_current(url: UrlOption = None) -> None:
    """Print the schema revision the database is at."""
    from alembic.migration import MigrationContext

    from queuestore.migrations import VERSION_TABLE

    store = _store(url)
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        console.print(context.get_current_revision() or "none")


@tasks.command("list")
def tasks_list(
    url: UrlOption = None,
    status: Annotated[list[str] | None, typer.Option(help="Only these statuses.")] = None,
    owner: Annotated[str | None, typer.Option(help="Only this owner's tasks.")] = None,
    limit: int = 50,
) -> None:
    """List tasks, newest first."""
    from queuestore.owner import ANY

    try:
        page = _store(url).list(owner=owner or ANY, status=status, limit=limit)
    except QueueStoreError as exc:
        raise typer.BadParameter(str(exc)) from exc
    console.print(task_table(page.tasks))


@tasks.command("show")
def tasks_show(task_id: str, url: UrlOption = None) -> None:
    """Print one task as JSON (put -- before an id that starts with -)."""
    try:
        task = _store(url).get(task_id)
    except QueueStoreError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    console.print_json(task.model_dump_json())


@tasks.command("cancel")
def tasks_cancel(task_id: str, url: UrlOption = None, reason: str | None = None) -> None:
    """Cancel a task in the store; its worker stops at its next write or heartbeat.

    Put -- before an id that starts with -.
    """
    try:
        task = _store(url).cancel(task_id, reason=reason)
    except QueueStoreError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    console.print(f"{task.id} {task.status}")


@app.command()
def janitor(
    url: UrlOption = None,
    ttl: Annotated[float, typer.Option(help="Seconds a terminal task is kept.")] = 86400.0,
    batch_size: int = 1000,
) -> None:
    """Delete terminal tasks older than TTL now (beat runs the same on a schedule)."""
    removed = run_janitor(_store(url), timedelta(seconds=ttl), batch_size=batch_size)
    console.print(f"removed {removed} expired tasks")


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Keep the demo's folder afterwards.")] = False,
) -> None:
    """Run the whole flow on the embedded default: worker, beat, jobs, cancel, input, janitor."""
    from queuestore.demo import run_demo

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
        console.print(f"[red]queuestore serve needs the http extra: {exc}[/]")
        raise typer.Exit(1) from exc
    try:
        serve_http(_settings(url), host, port, queue=queue)
    except (ImportError, ValueError) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
