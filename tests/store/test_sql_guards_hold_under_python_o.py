"""Guards of the statement catalogue that must hold under ``python -O`` too."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from queuestore import TaskStatus
from queuestore.store.sql import executor
from queuestore.store.sql import queries as statements


def test_a_constant_text_holding_a_quote_is_refused() -> None:
    with pytest.raises(ValueError, match="quote"):
        statements._sql_text("it's")


def test_a_constant_text_is_written_into_the_sql() -> None:
    compiled = statements._sql_text("working").compile(dialect=sqlite.dialect())
    assert str(compiled) == "'working'"


def test_a_row_of_another_width_than_the_columns_is_refused() -> None:
    prepared = executor.Prepared(statements.fetch_task("any"), sqlite.dialect())
    width = len(statements.COLUMNS)
    for wrong in (width - 1, width + 1):
        with pytest.raises(ValueError, match=f"a row of {wrong} values"):
            prepared.decoded([(None,) * wrong])


def test_the_notifications_a_write_returns_after_its_columns_are_dropped() -> None:
    announcing = statements.WriteShape(
        columns=("status_message",),
        status=None,
        from_statuses=frozenset({TaskStatus.WORKING}),
        scope="any",
        versioned=False,
        fence="worker",
        leased=False,
        claim=False,
        release=False,
        mark_started=False,
        mark_finished=False,
        announce=True,
        stops=True,
        watched=False,
        based=False,
    )
    clock = statements.Clock(database_clock=True)
    statement = statements.write_task(announcing, clock)
    prepared = executor.Prepared(statement, postgresql.dialect())
    width = len(statements.COLUMNS)
    row = (None,) * width + ("", "")  # the columns, then two pg_notify results
    (decoded,) = prepared.decoded([row])
    assert list(decoded) == [column.key for column in statements.COLUMNS]
