"""The SQL package keeps each concern in its module: SQL is built in the catalogue only.

``queries`` builds every statement of tasks; the store says which to run, the
executor runs them, the codec decodes their rows, the engine module makes
engines, the schema module declares the tables. ``deliveries``, off the tasks'
hot path, builds and runs the statements of callbacks and deliveries on the
connections the store hands it; ``steps``, ``tree``, ``deadlines``, ``schedules`` and
``flow`` build the statements of named steps, of the task tree, of deadlines, of schedules
and of flow control (pauses, rate limits).
These tests read the modules' imports, so that a statement built elsewhere
(an inline ``select``, a ``func.now()``) is found before review has to.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import queuestore.store.sql as package

PACKAGE = Path(package.__file__).parent

BUILDERS = frozenset(
    {
        "and_",
        "bindparam",
        "case",
        "delete",
        "func",
        "insert",
        "literal",
        "literal_column",
        "or_",
        "select",
        "text",
        "tuple_",
        "update",
    }
)
"""SQLAlchemy's names that build a statement or a part of one."""


def sqlalchemy_names(source: str) -> set[str]:
    """The names a module imports from SQLAlchemy, and ``sqlalchemy`` if it imports it whole."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("sqlalchemy"))
    return names


@pytest.mark.parametrize("module", ["store", "executor", "codec", "engine", "__init__"])
def test_only_the_catalogue_builds_sql(module: str) -> None:
    names = sqlalchemy_names((PACKAGE / f"{module}.py").read_text())

    assert not names & BUILDERS
    assert not {name for name in names if name.startswith("sqlalchemy")}  # sa.select hides


def test_the_catalogue_builds_with_them() -> None:
    names = sqlalchemy_names((PACKAGE / "queries.py").read_text())

    assert {"select", "insert", "update", "delete", "func"} <= names


def test_an_inline_statement_would_be_found() -> None:
    source = "from sqlalchemy import Engine, func\nimport sqlalchemy.sql\n"

    assert sqlalchemy_names(source) & BUILDERS == {"func"}
    assert "sqlalchemy.sql" in sqlalchemy_names(source)


def test_the_package_holds_the_modules_it_says() -> None:
    modules = {path.stem for path in PACKAGE.glob("*.py")}

    assert modules == {
        "__init__",
        "queries",
        "codec",
        "executor",
        "engine",
        "schema",
        "store",
        "deliveries",
        "operator",
        "steps",
        "tree",
        "deadlines",
        "schedules",
        "flow",
    }
