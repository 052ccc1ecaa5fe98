"""Engines for the SQL store: :func:`make_engine` (sync) and an event loop's async engine."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json
from sqlalchemy import Engine, create_engine, event, make_url

if TYPE_CHECKING:
    from sqlalchemy import URL
    from sqlalchemy.ext.asyncio import AsyncEngine


DEFAULT_POOL_SIZE = 2
"""The connections a store built from a PostgreSQL URL keeps, its LISTEN connections aside."""


def make_engine(
    url: str, *, pool_size: int | None = None, prepare: bool = True, **options: Any
) -> Engine:
    """An engine tuned for the store: WAL and a busy timeout on SQLite, psycopg 3 on PostgreSQL.

    On PostgreSQL, ``pool_size`` bounds the pool (no overflow): the process's
    threads share that many connections, each taking one for a statement or a
    short transaction. ``prepare=False`` turns psycopg's prepared statements off
    (``prepare_threshold=None``), for PgBouncer before 1.21 in transaction mode.

    ``postgresql://`` URLs use psycopg 3. The folder of an SQLite file is created.
    Connections are in autocommit: every store operation is one statement,
    atomic on its own, so BEGIN and COMMIT would only add round trips.
    Documents go to psycopg encoded by pydantic-core (``json_serializer``),
    several times faster than ``json.dumps`` and already what validation
    measures them with. No pre-ping: it would cost a round trip per operation.
    A connection that died with the server is invalidated on first use
    (raising ``StoreUnavailable``) and the pool reconnects on the next call.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        options.setdefault("connect_args", {}).setdefault("timeout", 30)
        options.setdefault("isolation_level", "AUTOCOMMIT")
        engine = create_engine(parsed, **options)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    options.setdefault("isolation_level", "AUTOCOMMIT")
    if pool_size is not None:
        options |= {"pool_size": pool_size, "max_overflow": 0}
    if parsed.get_driver_name() == "psycopg":
        options.setdefault("json_serializer", to_json)
        if not prepare:
            options.setdefault("connect_args", {})["prepare_threshold"] = None
    return create_engine(parsed, **options)


_BUSY_TIMEOUT_SECONDS = 30.0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_SECONDS * 1000)}")
    _write_ahead_log(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _write_ahead_log(cursor: Any) -> None:
    """Put the database in WAL mode, waiting while another process holds it.

    Switching a fresh file to WAL takes an exclusive lock, and SQLite answers
    "database is locked" at once, without its busy handler, to a process that
    asks meanwhile: several processes opening one new file at once must wait.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_SECONDS
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def loop_engine(url: URL, *, max_connections: int, timeout: float) -> AsyncEngine:
    """An event loop's async engine on ``url``: psycopg 3, in autocommit."""
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(
        url.set(drivername="postgresql+psycopg"),  # psycopg 3, whatever the sync driver
        isolation_level="AUTOCOMMIT",
        pool_reset_on_return=None,  # autocommit: no transaction is ever left open
        json_serializer=to_json,
        pool_size=max_connections,
        max_overflow=0,
        pool_timeout=timeout,
    )


def is_autocommit(engine: Engine) -> bool:
    level = engine.get_execution_options().get("isolation_level")
    if level is None:
        level = getattr(engine.dialect, "_on_connect_isolation_level", None)
    return level == "AUTOCOMMIT"
