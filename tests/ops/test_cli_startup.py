"""The command starts at once: its help and its usage errors import no database,
broker or validation library (the timings are in bench/cli_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "alembic", "celery", "kombu", "queuestore.config", "queuestore.store")


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    report = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    done = subprocess.run(
        [sys.executable, "-c", code + report],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_command_imports_nothing_heavy() -> None:
    assert heavy(imported_after("import queuestore.ops.cli")) == []


@pytest.mark.parametrize(
    "arguments",
    [["--help"], ["tasks", "--help"], ["tasks", "list", "--help"], ["tasks", "lsit"]],
    ids=["help", "group-help", "command-help", "usage-error"],
)
def test_help_and_usage_errors_import_nothing_heavy(arguments: list[str]) -> None:
    code = f"from queuestore.ops.cli import main\nmain({arguments!r})"
    assert heavy(imported_after(code)) == []


def test_the_package_imports_a_public_name_only_when_asked() -> None:
    assert heavy(imported_after("import queuestore")) == []
    asked = imported_after("from queuestore import TaskStatus")
    assert "queuestore.core.models" in asked
    assert "sqlalchemy" not in asked
    assert "celery" not in asked


def test_the_package_lists_and_gives_every_public_name() -> None:
    import queuestore

    assert set(queuestore.__all__) <= set(dir(queuestore))
    for name in queuestore.__all__:
        assert getattr(queuestore, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = queuestore.Nothing  # type: ignore[attr-defined]
