"""Guards of the statement catalogue that must hold under ``python -O`` too."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import sqlite

from queuestore.store import statements


def test_a_constant_text_holding_a_quote_is_refused() -> None:
    with pytest.raises(ValueError, match="quote"):
        statements._sql_text("it's")


def test_a_constant_text_is_written_into_the_sql() -> None:
    compiled = statements._sql_text("working").compile(dialect=sqlite.dialect())
    assert str(compiled) == "'working'"


def test_a_row_of_another_width_than_the_columns_is_refused() -> None:
    prepared = statements.Prepared(statements.fetch_task("any"), sqlite.dialect())
    width = len(statements.COLUMNS)
    with pytest.raises(ValueError, match="zip"):
        prepared.decoded([(None,) * (width - 1)])
