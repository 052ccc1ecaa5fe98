"""``queuestore schedules``: add, list, show, change, pause, resume, trigger, delete.

On the embedded default's SQLite file with the ``workers`` app's jobs, in
process; tests/ops/test_ops_cli.py runs a schedule through a real beat and worker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from queuestore import SqlTaskStore
from queuestore.ops.cli import app


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty QUEUESTORE_HOME, and no other QUEUESTORE_* setting: the embedded default."""
    for name in [name for name in os.environ if name.startswith("QUEUESTORE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def cli(*arguments: str) -> Any:
    return CliRunner().invoke(app, list(arguments), env={"COLUMNS": "120"})


def as_json(*arguments: str) -> Any:
    result = cli(*arguments, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_schedule_is_added_listed_changed_paused_resumed_triggered_and_deleted(
    home: Path,
) -> None:
    added = as_json(
        "schedules", "add", "examples.crunch", '{"seconds": 1}', "--cron", "0 2 * * *",
        "--timezone", "Europe/Paris", "--catch-up", "each", "--catch-up-limit", "3",
        "--id", "nightly", "--owner", "alice",
    )  # fmt: skip
    assert (added["id"], added["cron"], added["catch_up"], added["owner"]) == (
        "nightly",
        "0 2 * * *",
        "each",
        "alice",
    )
    assert added["next_run_at"].endswith("01:00:00Z")  # 02:00 in Paris, in winter

    listed = cli("schedules", "list")
    assert "nightly" in listed.output
    assert "cron 0 2 * * * Europe/Paris" in listed.output
    assert as_json("schedules", "list", "--owner", "bob") == {"schedules": []}

    changed = as_json("schedules", "change", "nightly", "--every", "90", "--input", "{}")
    assert (changed["cron"], changed["every"], changed["input"]) == (None, 90.0, {})
    paused = as_json("schedules", "pause", "nightly")
    assert (paused["paused"], paused["next_run_at"]) == (True, None)

    task = as_json("schedules", "trigger", "nightly", "--owner", "alice")
    assert (task["name"], task["owner"], task["status"]) == (
        "examples.crunch",
        "alice",
        "submitted",
    )
    shown = as_json("schedules", "show", "nightly")
    assert (shown["last_task_id"], shown["last_status"]) == (task["id"], "submitted")
    assert "paused, last" in cli("schedules", "show", "nightly").output

    resumed = as_json("schedules", "resume", "nightly")
    assert resumed["paused"] is False
    assert resumed["next_run_at"] is not None
    assert cli("schedules", "delete", "nightly").exit_code == 0
    assert cli("schedules", "show", "nightly").exit_code == 1


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["examples.nope", "--every", "60"], "no job named 'examples.nope'"),
        (["examples.crunch", '{"seconds": "long"}', "--every", "60"], "input.seconds"),
        (["examples.crunch", "--cron", "61 * * * *"], "cron: '61 * * * *' is not a cron"),
        (["examples.crunch"], "give cron or every"),
        (["examples.crunch", "--cron", "* * * * *", "--every", "60"], "not both"),
        (["examples.crunch", "--every", "soon"], "--every: 'soon' is not a duration"),
        (["examples.crunch", "--every", "60", "--timezone", "Mars/Olympus"], "no timezone"),
        (["examples.crunch", "--every", "60", "--catch-up", "sometimes"], "catch_up"),
        (["examples.crunch", "[]", "--every", "60"], "INPUT must be a JSON object"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    home: Path, arguments: list[str], said: str
) -> None:
    result = cli("schedules", "add", *arguments)

    assert result.exit_code == 2, result.output
    assert said in result.output
    store = SqlTaskStore(f"sqlite:///{home / 'queuestore.db'}")
    try:
        store.migrate()  # a usage error may come before the store is opened
        assert store.list_schedules() == []
    finally:
        store.close()
