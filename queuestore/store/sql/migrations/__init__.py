"""Alembic migrations for the queuestore schema, shipped inside the package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

MIGRATIONS = Path(__file__).parent
VERSION_TABLE = "queuestore_alembic_version"
"""Alembic's own table, named so it cannot clash with an application's migrations."""


def config(url: str | None = None) -> Config:
    """An Alembic configuration pointing at these migrations (and ``url``, if given)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head() -> str:
    """The newest revision these migrations build: what ``db upgrade`` brings a database to."""
    revision = ScriptDirectory.from_config(config()).get_current_head()
    assert revision is not None  # the package ships its migrations
    return revision


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database behind ``connection`` to ``revision``."""
    cfg = config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def downgrade(connection: Connection, revision: str) -> None:
    """Migrate the database behind ``connection`` down to ``revision``."""
    cfg = config()
    cfg.attributes["connection"] = connection
    command.downgrade(cfg, revision)
