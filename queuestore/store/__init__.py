"""Task stores: the abstract contract and its in-memory and SQL backends."""

from queuestore.store.base import UNSET, TaskStore
from queuestore.store.memory import InMemoryTaskStore
from queuestore.store.sql import SqlTaskStore, make_engine

__all__ = ["UNSET", "InMemoryTaskStore", "SqlTaskStore", "TaskStore", "make_engine"]
