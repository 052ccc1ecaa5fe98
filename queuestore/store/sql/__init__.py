"""The SQL store: SQLite (the embedded default) and PostgreSQL through psycopg 3.

One module per concern:

- :mod:`~queuestore.store.sql.store`: :class:`SqlTaskStore`, which statement each
  primitive runs;
- :mod:`~queuestore.store.sql.queries`: the statement catalogue, every statement
  named once;
- :mod:`~queuestore.store.sql.codec`: the one way from a row to a ``Task``;
- :mod:`~queuestore.store.sql.executor`: how statements run, on a thread or on an
  event loop's own connections;
- :mod:`~queuestore.store.sql.engine`: :func:`make_engine` and the loop's engine;
- :mod:`~queuestore.store.sql.migrations`: the schema's Alembic migrations.
"""

from queuestore.store.sql.engine import make_engine
from queuestore.store.sql.executor import blocking
from queuestore.store.sql.queries import NOTIFY_CHANNEL, STOP_CHANNEL
from queuestore.store.sql.store import SqlTaskStore

__all__ = ["NOTIFY_CHANNEL", "STOP_CHANNEL", "SqlTaskStore", "blocking", "make_engine"]
