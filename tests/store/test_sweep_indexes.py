"""The sweep's reads, and the read of a unique key's holder, are served by
their partial indexes, on both databases.

A sweep runs every few seconds however many tasks wait: scheduled tasks that
start next week must not be read by it, nor the table scanned. The planners
are asked how they would run each read with sequential scans priced out; each
must name the index kept for it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.sql import ClauseElement, Select

from queuestore import SqlTaskStore
from queuestore.store.sql import queries

AHEAD = timedelta(seconds=12)
OWNED = "uq_queuestore_tasks_live_unique_key"
UNOWNED = "uq_queuestore_tasks_live_unowned_unique_key"


def plan(engine: Engine, statement: ClauseElement, index: str) -> str:
    """The planner's plan of ``statement``, run as the store runs it but under EXPLAIN.

    SQLite's planner picks among usable indexes by guesswork on an empty table:
    it is asked for ``index``, which it refuses ("no query solution") unless
    the read's terms imply the index's predicate.
    """
    sqlite = engine.dialect.name == "sqlite"
    explain = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
    table = f"FROM {queries.TABLE.name} "

    sent: list[tuple[str, Any]] = []

    def capture(*args: Any) -> None:
        sent.append((args[2], args[3]))

    with engine.connect() as connection:
        if not sqlite:
            connection.execute(text("SET enable_seqscan = off"))
        event.listen(connection, "before_cursor_execute", capture)
        try:
            connection.execute(statement).all()  # as the store sends it
        finally:
            event.remove(connection, "before_cursor_execute", capture)
        ((cursor_statement, parameters),) = sent
        if sqlite:
            cursor_statement = cursor_statement.replace(table, f"{table}INDEXED BY {index} ", 1)
        rows = connection.exec_driver_sql(explain + cursor_statement, parameters).all()
        connection.rollback()
        return "\n".join(str(row[-1]) for row in rows)


def statements(engine: Engine) -> dict[str, Select[Any]]:
    clock = queries.Clock(database_clock=engine.dialect.name == "postgresql")
    now = clock.at()
    before = clock.earlier(now, timedelta(seconds=10))
    return {
        "ix_queuestore_tasks_unpublished": queries.unpublished(before, None, 500),
        "ix_queuestore_tasks_scheduled": queries.scheduled(
            clock, clock.earlier(now, -AHEAD), before, AHEAD, 500
        ),
        OWNED: cast(Select[Any], queries.key_holder(owned=True)).params(
            owner="alice", unique_key="k"
        ),
        UNOWNED: cast(Select[Any], queries.key_holder(owned=False)).params(unique_key="k"),
    }


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_each_read_is_served_by_its_partial_index(store: SqlTaskStore) -> None:
    for index, statement in statements(store.engine).items():
        planned = plan(store.engine, statement, index)
        # PostgreSQL may read the unowned's keys through the owners' index too
        # (``owner IS NULL`` is a condition on its first column): indexed either way.
        served = index in planned or (
            index == UNOWNED and "Index Cond: ((owner IS NULL)" in planned and OWNED in planned
        )
        assert served, (index, planned)
