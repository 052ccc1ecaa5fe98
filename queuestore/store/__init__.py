"""Where tasks live: the :class:`TaskStore` contract and its in-memory and SQL backends.

``TaskStore`` (:mod:`~queuestore.store.base`) holds the callers' verbs; a run's
verbs (:mod:`~queuestore.store.runs`) and push's (:mod:`~queuestore.store.deliveries`)
are mixed in; every rule they apply through the backend's primitives is in
:mod:`~queuestore.store.backend`, and the pending rule in :mod:`~queuestore.store.pending`.
:class:`InMemoryTaskStore` and :class:`SqlTaskStore` (SQLite and PostgreSQL) only
fetch and write. It imports only :mod:`queuestore.core`.
"""

from queuestore.store.base import UNSET, TaskStore
from queuestore.store.memory import InMemoryTaskStore
from queuestore.store.sql import SqlTaskStore, make_engine

__all__ = ["UNSET", "InMemoryTaskStore", "SqlTaskStore", "TaskStore", "make_engine"]
