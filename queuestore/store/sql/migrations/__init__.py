"""Alembic migrations for the queuestore schema, shipped inside the package.

Alembic is imported only to migrate: a store whose database is already at the
newest revision finds it out with one query (:func:`is_current`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent
VERSION_TABLE = "queuestore_alembic_version"
"""Alembic's own table, named so it cannot clash with an application's migrations."""

_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
"""A migration's file: its revision, four digits, then what it does (``0004_run_at.py``)."""

LOCK_KEY = int.from_bytes(b"qs-migr", "big")
"""The PostgreSQL advisory lock migrations hold, so that one process migrates at a time."""


def config(url: str | None = None) -> Config:
    """An Alembic configuration pointing at these migrations (and ``url``, if given)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head() -> str:
    """The newest revision these migrations build: what ``db upgrade`` brings a database to.

    Read from the file names, without Alembic: each migration's revision is the
    number its file starts with, one after the other (a test checks it).
    """
    numbers = [
        match.group(1)
        for path in (MIGRATIONS / "versions").iterdir()
        if (match := _REVISION_FILE.match(path.name))
    ]
    return max(numbers)


def is_current(engine: Engine) -> bool:
    """Whether the database behind ``engine`` is at :func:`head` (False when it has no schema)."""
    try:
        with engine.connect() as connection:
            found = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    except DBAPIError:  # no version table yet, or no database: migrating will tell
        return False
    return [row[0] for row in found] == [head()]


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database behind ``connection`` to ``revision``, holding the migration lock."""
    from alembic import command

    cfg = config()
    cfg.attributes["connection"] = connection
    with migration_lock(connection):
        command.upgrade(cfg, revision)


def downgrade(connection: Connection, revision: str) -> None:
    """Migrate the database behind ``connection`` down to ``revision``, holding the lock."""
    from alembic import command

    cfg = config()
    cfg.attributes["connection"] = connection
    with migration_lock(connection):
        command.downgrade(cfg, revision)


@contextmanager
def migration_lock(connection: Connection) -> Iterator[None]:
    """Let one process at a time migrate the database behind ``connection``.

    Several processes may start on one fresh database at once (a worker, beat
    and a command on the embedded default). The first takes the lock and
    migrates; the others wait, then find the schema at the newest revision.
    On SQLite the migration runs in an exclusive transaction (``BEGIN
    EXCLUSIVE``, unless ``connection`` is already in one); on PostgreSQL it
    holds an advisory lock, until the transaction ends, or, on a connection in
    autocommit, until the block ends.
    """
    driver = connection.connection.dbapi_connection
    assert driver is not None
    if connection.dialect.name == "sqlite":
        if not driver.in_transaction:
            connection.exec_driver_sql("BEGIN EXCLUSIVE")
        yield
        return
    if not getattr(driver, "autocommit", False):
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        yield
        return
    connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": LOCK_KEY})
    try:
        yield
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LOCK_KEY})
