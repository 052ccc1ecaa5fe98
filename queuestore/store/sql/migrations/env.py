"""Alembic environment: runs on a connection handed over by queuestore, or on a URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from queuestore.store.sql import make_engine
from queuestore.store.sql.migrations import VERSION_TABLE
from queuestore.store.sql.schema import Base


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url or pass a connection to run migrations")
    engine = make_engine(url)
    try:
        with engine.begin() as new_connection:
            run(new_connection)
    finally:
        engine.dispose()


main()
