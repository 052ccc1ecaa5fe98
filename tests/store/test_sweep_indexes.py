"""The dispatcher sweep's reads are served by its partial indexes, on both databases.

A sweep runs every few seconds however many tasks wait: scheduled tasks that
start next week must not be read by it, nor the table scanned. The planners
are asked how they would run each read with sequential scans priced out; each
must name the index kept for it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.sql import ClauseElement, Select

from queuestore import SqlTaskStore
from queuestore.store.sql import queries

AHEAD = timedelta(seconds=12)


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
        "ix_queuestore_tasks_undispatched": queries.undispatched(before, None, 500),
        "ix_queuestore_tasks_scheduled": queries.scheduled(
            clock, clock.earlier(now, -AHEAD), before, AHEAD, 500
        ),
    }


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_each_sweep_read_is_served_by_its_partial_index(store: SqlTaskStore) -> None:
    for index, statement in statements(store.engine).items():
        assert index in plan(store.engine, statement, index), index
