"""The ``queuestore`` command, end to end on the embedded default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuestore import Settings, SqlTaskStore
from queuestore.ops.cli import app
from queuestore.store.sql.migrations import head


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def test_db_upgrade_creates_the_schema_and_current_reports_it(database_url: str) -> None:
    runner = CliRunner()
    upgraded = runner.invoke(app, ["db", "upgrade", "--url", database_url])
    assert upgraded.exit_code == 0, upgraded.output
    current = runner.invoke(app, ["db", "current", "--url", database_url])
    assert current.exit_code == 0, current.output
    assert current.output.strip() == head()
    store = SqlTaskStore(database_url)
    assert store.create("cli.check").status == "submitted"
    store.close()


def test_db_downgrade_to_base_drops_the_table(database_url: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    downgraded = runner.invoke(app, ["db", "downgrade", "base", "--url", database_url])
    assert downgraded.exit_code == 0, downgraded.output
    current = runner.invoke(app, ["db", "current", "--url", database_url])
    assert current.output.strip() == "none"


def test_tasks_commands_show_list_and_cancel(database_url: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    store = SqlTaskStore(database_url)
    task = store.create("cli.job", {"n": 1}, owner="alice", task_id="-starts-with-a-dash")
    listed = runner.invoke(app, ["tasks", "list", "--url", database_url])
    assert task.id in listed.output
    # Ids may start with "-" (url-safe base64): "--" ends the options.
    shown = runner.invoke(app, ["tasks", "show", "--url", database_url, "--", task.id])
    assert '"owner": "alice"' in shown.output
    cancelled = runner.invoke(app, ["tasks", "cancel", "--url", database_url, "--", task.id])
    assert cancelled.exit_code == 0, cancelled.output
    assert store.get(task.id).status == "cancelled"
    again = runner.invoke(app, ["tasks", "cancel", "--url", database_url, "--", task.id])
    assert again.exit_code == 1
    assert "cancelled" in again.output
    missing = runner.invoke(app, ["tasks", "show", "nope", "--url", database_url])
    assert missing.exit_code == 1
    store.close()


def test_tasks_running_counts_each_owner_s_and_job_s_runs_beside_their_limits(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUESTORE_OWNER_CONCURRENCY", "2")
    monkeypatch.setenv("QUEUESTORE_JOB_CONCURRENCY", '{"cli.report": 1}')
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    assert (
        "no task is running"
        in runner.invoke(app, ["tasks", "running", "--url", database_url]).output
    )
    store = SqlTaskStore(database_url)
    for owner, name in [("alice", "cli.job"), ("alice", "cli.job"), (None, "cli.report")]:
        store.claim(store.create(name, owner=owner).id, "w", timedelta(seconds=30))
    store.create("cli.job", owner="alice")  # waiting: not running

    shown = runner.invoke(app, ["tasks", "running", "--url", database_url, "--json"])

    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["running"] == [
        {"owner": "alice", "job": "cli.job", "running": 2, "owner_limit": 2, "job_limit": None},
        {"owner": None, "job": "cli.report", "running": 1, "owner_limit": None, "job_limit": 1},
    ]
    table = runner.invoke(app, ["tasks", "running", "--url", database_url]).output
    assert "alice" in table
    assert "cli.report" in table
    store.close()


@pytest.fixture
def five_thirty_east(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time is UTC+05:30 (a POSIX zone: no tz database needed)."""
    with monkeypatch.context() as patch:
        patch.setenv("TZ", "XST-5:30")
        time.tzset()
        yield
    time.tzset()


@pytest.mark.usefixtures("five_thirty_east")
def test_tasks_list_and_show_give_the_start_of_a_scheduled_task(database_url: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    store = SqlTaskStore(database_url)
    later = store.create("cli.later", run_at=datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC))
    now = datetime.now(UTC)
    soon = store.create("cli.soon", run_at=now)
    cancelled = store.create("cli.dropped", run_at=datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC))
    store.cancel(cancelled.id)
    unscheduled = store.create("cli.now")

    # Wide enough for the whole start: at 80 columns the table cuts it with an ellipsis.
    listed = runner.invoke(app, ["tasks", "list", "--url", database_url], env={"COLUMNS": "120"})
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.output.splitlines() if line.strip()}
    # In local time: the date when the start is not today.
    assert "starts 2031-01-02 08:34:05" in lines[later.id]
    assert f"starts {now.astimezone():%H:%M:%S}" in lines[soon.id]
    assert "starts" not in lines[cancelled.id]
    assert "starts" not in lines[unscheduled.id]

    shown = runner.invoke(app, ["tasks", "show", "--url", database_url, "--", later.id])
    assert '"run_at": "2031-01-02T03:04:05Z"' in shown.output
    as_json = runner.invoke(app, ["tasks", "show", "--json", "--url", database_url, "--", later.id])
    assert '"run_at":"2031-01-02T03:04:05Z"' in as_json.output
    store.close()


@pytest.mark.integration
def test_demo_runs_the_whole_flow_and_leaves_nothing_running(tmp_path: Path) -> None:
    """The README's main command: worker, beat, progress, cancel, input, janitor."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
    demo = subprocess.run(
        [sys.executable, "-m", "queuestore", "demo"],
        cwd=tmp_path,
        env=env | {"COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "cancelled crunch while it was working" in demo.stdout
    assert "removed by the janitor" in demo.stdout
    assert "all done" in demo.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_config_show_hides_the_passwords_in_urls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, as_json: bool
) -> None:
    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path))
    monkeypatch.setenv("QUEUESTORE_DATABASE_URL", "postgresql://app:db-s3cret@db.internal:5432/q")
    monkeypatch.setenv(
        "QUEUESTORE_BROKER_URL", "redis://:br0ker-pw@r1:6379/0;redis://user:other-pw@r2:6379/0"
    )
    shown = CliRunner().invoke(app, ["config", "show", *(["--json"] if as_json else [])])

    assert shown.exit_code == 0, shown.output
    for secret in ("db-s3cret", "br0ker-pw", "other-pw"):
        assert secret not in shown.output
    assert "postgresql://app:********@db.internal:5432/q" in shown.output
    assert "redis://:********@r1:6379/0;redis://user:********@r2:6379/0" in shown.output


def test_the_settings_repr_hides_the_passwords_in_urls(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, database_url="postgresql://app:db-s3cret@db/q", broker_url="amqp://u:pw@mq//"
    )
    shown = repr(settings)
    assert "db-s3cret" not in shown
    assert ":pw@" not in shown
    assert "postgresql://app:********@db/q" in shown
    assert settings.database_url == "postgresql://app:db-s3cret@db/q"


def test_tasks_submit_schedules_and_joins_a_held_key(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path))
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    base = ["tasks", "submit", "--url", database_url]

    first = runner.invoke(
        app, [*base, "reports.build", '{"month": "11"}', "--delay", "90", "--unique-key", "k"]
    )
    assert first.exit_code == 0, first.output
    task_id, status = first.output.split()[:2]
    assert status == "submitted"
    again = runner.invoke(app, [*base, "reports.build", "--unique-key", "k", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["id"] == task_id
    at = runner.invoke(app, [*base, "x.y", "--at", "2031-01-02T03:04:05+01:00", "--json"])
    assert json.loads(at.output)["run_at"] == "2031-01-02T02:04:05Z"
    urgent = runner.invoke(app, [*base, "x.y", "--priority", "7", "--json"])
    assert json.loads(urgent.output)["priority"] == 7

    store = SqlTaskStore(database_url)
    try:
        task = store.get(task_id)
        assert task.input == {"month": "11"}
        assert task.run_at is not None
        assert 80 < (task.run_at - task.created_at).total_seconds() <= 90
        assert store.count() == 3
    finally:
        store.close()


def test_tasks_show_gives_steps_and_children_and_list_walks_the_tree(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queuestore import StepKind, StepStatus
    from queuestore.store.backend import StepOutcome

    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path))
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    submitted = runner.invoke(
        app,
        [
            *("tasks", "submit", "--url", database_url, "x.parent", "--json"),
            *("--timeout", "PT5M", "--deadline", "2031-01-02T03:04:05Z"),
            *("--start-by", "2031-01-01T00:00:00Z"),
        ],
    )
    parent = json.loads(submitted.output)
    assert (parent["run_timeout"], parent["deadline_at"], parent["start_by"]) == (
        "PT5M",
        "2031-01-02T03:04:05Z",
        "2031-01-01T00:00:00Z",
    )
    store = SqlTaskStore(database_url)
    try:
        store.claim(parent["id"], "w1", timedelta(minutes=1))
        step = StepOutcome(name="fetch", kind=StepKind.STEP, status=StepStatus.COMPLETED)
        store.record_step(parent["id"], "w1", step)
        ((child, _),) = store.spawn(parent["id"], "w1", [{"name": "x.child"}])
    finally:
        store.close()
    base = ["tasks", "show", "--url", database_url]

    shown = json.loads(runner.invoke(app, [*base, "--json", "--", parent["id"]]).output)
    table = runner.invoke(app, [*base, "--", parent["id"]]).output

    assert [s["name"] for s in shown["steps"]] == ["fetch"]
    assert shown["children"] == {"total": 1, "live": 1}
    assert "fetch" in table
    assert f"children: 1 (1 live): tasks list --parent {parent['id']}" in table
    listing = ["tasks", "list", "--url", database_url, "--json"]
    children = json.loads(runner.invoke(app, [*listing, "--parent", parent["id"]]).output)
    roots = json.loads(runner.invoke(app, [*listing, "--roots"]).output)
    assert [t["id"] for t in children["tasks"]] == [child.id]
    assert [t["id"] for t in roots["tasks"]] == [parent["id"]]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["x.y", "[1]"], "INPUT must be a JSON object"),
        (["x.y", "{nope"], "INPUT must be a JSON object"),
        (["x.y", "--delay", "5 minutes"], "--delay:"),
        (["x.y", "--at", "2031-01-01T00:00:00"], "run_at: must be a timezone-aware datetime"),
        (["x.y", "--at", "tomorrow"], "--at:"),
        (["x.y", "--delay", "5", "--at", "2031-01-01T00:00:00Z"], "give run_at or delay"),
        (["x.y", "--priority", "10"], "--priority"),
        (["x.y", "--timeout", "soon"], "--timeout:"),
        (["x.y", "--deadline", "tomorrow"], "--deadline:"),
        (["x.y", "--start-by", "2031-01-01T00:00:00"], "start_by: must be a timezone-aware"),
    ],
)
def test_tasks_submit_refuses_bad_values_and_writes_nothing(
    database_url: str, arguments: list[str], message: str
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0

    refused = runner.invoke(app, ["tasks", "submit", "--url", database_url, *arguments])

    assert refused.exit_code == 2
    assert message in refused.output
    store = SqlTaskStore(database_url)
    try:
        assert store.count() == 0
    finally:
        store.close()
