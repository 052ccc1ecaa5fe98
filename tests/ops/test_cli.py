"""The ``queuestore`` command, end to end on the embedded default."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
    assert re.search(r"^owner +alice", shown.output, re.MULTILINE)
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


def test_flow_pauses_shows_and_resumes_a_job_an_owner_and_a_key(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUESTORE_RATE_LIMITS", '{"llm.call": {"limit": 5, "key": "owner"}}')
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0

    paused = runner.invoke(app, ["flow", "pause", "job", "llm.call", "--url", database_url])
    timed = runner.invoke(
        app,
        ["flow", "pause", "key", "openai", "--for", "60", "--reason", "429", "--json"],
        env={"QUEUESTORE_DATABASE_URL": database_url},
    )
    shown = runner.invoke(app, ["flow", "show", "--url", database_url])
    listed = runner.invoke(app, ["flow", "show", "--json", "--url", database_url])

    assert paused.exit_code == 0, paused.output
    assert paused.output.strip() == "paused job llm.call until resumed"
    assert json.loads(timed.output)["reason"] == "429"
    assert "paused key openai until 20" in shown.output
    assert "rate llm.call: 5 per 1 s per owner, cost 1" in shown.output
    document = json.loads(listed.output)
    assert [(p["kind"], p["value"]) for p in document["pauses"]] == [
        ("job", "llm.call"),
        ("key", "openai"),
    ]
    assert document["rate_limits"]["llm.call"]["limit"] == 5
    resumed = runner.invoke(app, ["flow", "resume", "job", "llm.call", "--url", database_url])
    again = runner.invoke(app, ["flow", "resume", "job", "llm.call", "--url", database_url])
    assert resumed.output.strip() == "resumed job llm.call"
    assert again.output.strip() == "job llm.call was not paused"
    bad = runner.invoke(app, ["flow", "pause", "tenant", "x", "--url", database_url])
    both = runner.invoke(app, ["flow", "pause", "job", "x", "--for", "1", "--until", "x"])
    assert bad.exit_code != 0
    assert "job, owner or key" in bad.output
    assert both.exit_code == 2
    assert "not both" in both.output


def test_flow_show_gives_each_rate_limit_s_use_by_key(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = '{"llm.call": {"limit": 5, "per": 3600, "key": "owner"}, "llm.embed": {"limit": 2}}'
    monkeypatch.setenv("QUEUESTORE_RATE_LIMITS", limits)
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    store = SqlTaskStore(database_url)
    flow = Settings(database_url=database_url).flow
    for owner in ("alice", "alice", "bob"):
        task = store.create("llm.call", owner=owner)
        assert store.claim(task.id, "w-1", timedelta(seconds=30), flow=flow) is not None
    store.close()

    shown = runner.invoke(app, ["flow", "show", "--url", database_url])
    listed = runner.invoke(app, ["flow", "show", "--json", "--url", database_url])

    assert shown.exit_code == 0, shown.output
    lines = [line.strip() for line in shown.output.splitlines()]
    assert lines[lines.index("rate llm.call: 5 per 3600 s per owner, cost 1") + 1 :][:2] == [
        "alice: 2 / 5 per 3600 s",
        "bob: 1 / 5 per 3600 s",
    ]
    assert "used now: 0 / 2 per 1 s" in lines
    uses = json.loads(listed.output)["rate_use"]
    assert [(use["job"], use["key"], use["used"]) for use in uses] == [
        ("llm.call", "alice", 2),
        ("llm.call", "bob", 1),
        ("llm.embed", None, 0),
    ]


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
    assert re.search(r"^starts +2031-01-02 08:34:05\+05:30", shown.output, re.MULTILINE)
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

    # The package's app (-A workers) registers the examples.* jobs.
    first = runner.invoke(
        app,
        [*base, "examples.research", '{"topic": "otters"}', "--delay", "90", "--unique-key", "k"],
    )
    assert first.exit_code == 0, first.output
    task_id, status = first.output.split()[:2]
    assert status == "submitted"
    again = runner.invoke(
        app, [*base, "examples.research", '{"topic": "x"}', "--unique-key", "k", "--json"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["id"] == task_id
    at = runner.invoke(
        app, [*base, "examples.crunch", "--at", "2031-01-02T03:04:05+01:00", "--json"]
    )
    assert json.loads(at.output)["run_at"] == "2031-01-02T02:04:05Z"
    urgent = runner.invoke(app, [*base, "examples.crunch", "--priority", "7", "--json"])
    assert json.loads(urgent.output)["priority"] == 7

    store = SqlTaskStore(database_url)
    try:
        task = store.get(task_id)
        assert task.input == {"topic": "otters"}
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
            *("tasks", "submit", "--url", database_url, "examples.crunch", "--json"),
            *("--timeout", "PT5M", "--deadline", "2031-01-02T03:04:05Z"),
            *("--start-by", "2031-01-01T00:00:00Z"),
        ],
    )
    parent = json.loads(submitted.output)
    assert (parent["run_timeout"], parent["deadline_at"], parent["start_by"]) == (
        300.0,
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

    assert (shown["id"], shown["parent_id"], shown["depth"]) == (parent["id"], None, 0)
    assert "steps" not in shown  # --json is the HTTP API's task; its steps are their own read
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
        (["examples.crunch", "[1]"], "INPUT must be a JSON object"),
        (["examples.crunch", "{nope"], "INPUT must be a JSON object"),
        (["examples.crunch", "--delay", "5 minutes"], "--delay:"),
        (
            ["examples.crunch", "--at", "2031-01-01T00:00:00"],
            "--at: '2031-01-01T00:00:00' has no offset",
        ),
        (["examples.crunch", "--at", "tomorrow"], "--at: 'tomorrow' is not an ISO 8601 time"),
        (
            ["examples.crunch", "--delay", "5", "--at", "2031-01-01T00:00:00Z"],
            "give --delay or --at, not both",
        ),
        (["examples.crunch", "--priority", "10"], "--priority"),
        (["examples.crunch", '{"seconds": "long"}'], "input.seconds: does not fit job"),
        (["reports.build"], "no job named 'reports.build' in 'workers'; known: examples."),
        (["reports.build", "--app", "workers"], "no job named 'reports.build'"),
        (["examples.crunch", "--timeout", "soon"], "--timeout: 'soon' is not a duration"),
        (["examples.crunch", "--deadline", "tomorrow"], "--deadline: 'tomorrow' is not an ISO"),
        (
            ["examples.crunch", "--start-by", "2031-01-01T00:00:00"],
            "--start-by: '2031-01-01T00:00:00' has no offset",
        ),
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


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty QUEUESTORE_HOME, and no other QUEUESTORE_* setting: the embedded default."""
    for name in [name for name in os.environ if name.startswith("QUEUESTORE_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("QUEUESTORE_HOME", str(home))
    return home


@pytest.mark.parametrize(
    ("arguments", "code", "answer"),
    [
        (["tasks", "list"], 0, "no tasks"),
        (["tasks", "list", "--json"], 0, '{"tasks":[],"next_cursor":null}'),
        (["tasks", "running"], 0, "no task is running"),
        (["tasks", "watch", "--timeout", "0.1"], 0, ""),
        (["tasks", "show", "nope"], 1, "not found"),
        (["tasks", "deliveries", "nope"], 1, "not found"),
        (["tasks", "redeliver", "nope", "1"], 1, "nope"),
        (["tasks", "cancel", "nope"], 1, "not found"),
        (["tasks", "delete", "nope"], 1, "not found"),
        (["tasks", "submit", "examples.crunch"], 0, "submitted"),
        (["janitor"], 0, "removed 0"),
        (["db", "current"], 0, "none"),
        (["config", "show"], 0, "QUEUESTORE_HOME="),
        (["flow", "show"], 0, "no pause in force"),
    ],
)
def test_every_command_answers_on_a_fresh_home(
    fresh_home: Path, arguments: list[str], code: int, answer: str
) -> None:
    """A newcomer's first command: an empty list is an answer, not a missing table."""
    result = CliRunner().invoke(app, arguments)

    assert result.exit_code == code, result.output
    assert answer in result.output
    assert "no such table" not in result.output


def test_deliver_starts_on_a_fresh_home(fresh_home: Path, tmp_path: Path) -> None:
    deliver = subprocess.Popen(
        [sys.executable, "-m", "queuestore", "deliver"],
        cwd=tmp_path,
        env=os.environ | {"QUEUESTORE_HOME": str(fresh_home)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert deliver.stderr is not None
        started = deliver.stderr.readline()
        time.sleep(1.0)  # its first rounds of taking deliveries
    finally:
        deliver.terminate()
        _, rest = deliver.communicate(timeout=30)
    assert "delivering callbacks" in started, started + rest
    assert "no such table" not in rest
    assert deliver.returncode == 0, rest


# -- one voice: plain help, flags, and the HTTP API's view of a task ------------------


def command_paths() -> list[list[str]]:
    """Every command and group of ``queuestore``, as the words that name it."""
    import typer.main

    found: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


@pytest.mark.parametrize("path", command_paths(), ids=lambda path: " ".join(path) or "queuestore")
def test_help_is_plain_text_with_a_metavar_for_every_value(path: list[str]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})

    assert shown.exit_code == 0, shown.output
    assert "`" not in shown.output  # no Markdown or reST markup, printed as it is
    assert "<bool>" not in shown.output  # a flag takes no value
    options = [line for line in shown.output.splitlines() if line.lstrip().startswith("-")]
    for line in options:
        assert "<" not in line.split("  ")[0], line  # `--url URL`, not `--url <str>`


def test_json_is_a_flag_and_a_value_given_to_a_flag_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import typer.main

    from queuestore.ops.cli import main

    jsons = [
        param
        for path in command_paths()
        for param in getattr(_command(typer.main.get_command(app), path), "params", [])
        if "--json" in param.opts
    ]
    assert len(jsons) >= 8
    assert all(param.is_flag for param in jsons)

    assert main(["tasks", "list", "--json", "true"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1
    assert "--json takes no value: give --json alone, or leave it out" in said


def _command(root: Any, path: list[str]) -> Any:
    for name in path:
        root = root.commands[name]
    return root


def test_show_is_for_people_and_json_is_the_http_api_s_view(database_url: str) -> None:
    from queuestore.core.views import TaskView

    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    store = SqlTaskStore(database_url)
    task = store.create("cli.asks", {"n": 1}, owner="alice")
    store.claim(task.id, "worker-1", timedelta(seconds=30))
    store.update(task.id, status="input_required", status_message="Proceed?")
    task = store.get(task.id)
    base = ["--url", database_url, "--", task.id]

    shown = runner.invoke(app, ["tasks", "show", *base])
    as_json = runner.invoke(app, ["tasks", "show", "--json", *base])
    listed = runner.invoke(app, ["tasks", "list", "--json", "--url", database_url])
    watched = runner.invoke(app, ["tasks", "watch", "--json", "--timeout", "0.1", *base])

    assert shown.exit_code == 0, shown.output
    with pytest.raises(json.JSONDecodeError):
        json.loads(shown.output)
    assert re.search(r"^status +input_required: Proceed\?", shown.output, re.MULTILINE)
    assert "worker-1" not in shown.output
    api_view = TaskView.of(task).model_dump(mode="json")
    assert json.loads(as_json.output) == api_view
    assert json.loads(listed.output)["tasks"] == [api_view]
    assert json.loads(watched.output.splitlines()[0]) == api_view
    for hidden in ("answers", "worker_id", "lease_expires_at", "suspends"):
        assert hidden not in api_view
    store.close()


# -- errors in the user's words -------------------------------------------------------

PYTHON_WORDS = ("Input should", "Signature", "mapping", "Traceback", "timedelta", "pydantic")


@pytest.mark.parametrize(
    ("arguments", "env", "said"),
    [
        (["tasks", "list", "--status", "runing"], {}, "--status: unknown status 'runing'; one of"),
        (["tasks", "list", "--limit", "0"], {}, "--limit: must be an integer from 1 to 1000"),
        (["tasks", "list", "--cursor", "abc"], {}, "--cursor: this cursor was altered"),
        (
            ["tasks", "list"],
            {"QUEUESTORE_LEASE": "soon"},
            "QUEUESTORE_LEASE must be seconds (30) or an ISO 8601 duration (PT30S)",
        ),
        (
            ["tasks", "list"],
            {"QUEUESTORE_OWNER_CONCURRENCY": "many"},
            "QUEUESTORE_OWNER_CONCURRENCY must be a whole number",
        ),
        (["tasks", "list", "--url", "nope"], {}, "(or --url) is not a database URL"),
        (["tasks", "submit", "bad name"], {}, "NAME: must not contain whitespace"),
        (["tasks", "submit", "x.y", "--delay", "soon"], {}, "--delay: 'soon' is not a duration"),
        (
            ["tasks", "submit", "examples.crunch", "--callback", "http://127.0.0.1/hook"],
            {},
            "--callback: callback URL 'http://127.0.0.1/hook' refused: host is a loopback "
            "address 127.0.0.1; QUEUESTORE_CALLBACK_ALLOW_NETWORKS allows such addresses",
        ),
    ],
)
def test_a_refusal_names_what_the_user_typed_and_writes_nothing(
    fresh_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    arguments: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    refused = CliRunner().invoke(app, arguments)

    assert refused.exit_code == 2, refused.output
    assert refused.output.startswith("queuestore: error: ")
    assert refused.output.count("\n") == 1
    assert said in refused.output
    assert not any(word in refused.output for word in PYTHON_WORDS)


def test_a_value_of_the_wrong_kind_for_an_option_says_so_in_plain_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from queuestore.ops.cli import main

    assert main(["tasks", "list", "--limit", "many"]) == 2
    said = capsys.readouterr().err
    assert said == "queuestore: error: queuestore tasks list: Invalid value for '--limit': " + (
        "not a whole number\n"
    )


def test_a_database_without_the_schema_says_to_run_db_upgrade(
    fresh_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUESTORE_AUTO_MIGRATE", "false")  # as on PostgreSQL

    refused = CliRunner().invoke(app, ["tasks", "list"])

    assert refused.exit_code == 1
    assert "no queuestore schema yet; run queuestore db upgrade" in refused.output


def test_the_schema_hint_reads_postgresql_s_words_too() -> None:
    from queuestore.ops.messages import unavailable

    missing = 'database unavailable: relation "queuestore_tasks" does not exist'
    assert unavailable(missing).endswith("run queuestore db upgrade")
    no_database = 'database unavailable: database "queuestore" does not exist'
    assert unavailable(no_database) == no_database


@pytest.fixture
def deliveries(database_url: str) -> Iterator[tuple[str, dict[str, int]]]:
    """A task whose callback has one delivery in each state: dead, delivered, pending."""
    from queuestore.store.deliveries import Settlement

    store = SqlTaskStore(database_url)
    store.migrate()
    task = store.create("cli.hooked")
    store.add_callback(task.id, "https://93.184.216.34/hook", events="all")
    store.claim(task.id, "w", timedelta(seconds=30))
    store.update(task.id, status="input_required")
    ids: dict[str, int] = {}
    for state, settle in (
        ("dead", Settlement.dead("refused")),
        ("delivered", Settlement.delivered(200)),
    ):
        taken = store.take_deliveries(limit=1)[0].delivery
        store.settle_delivery(taken, settle)
        ids[state] = taken.id
        if state == "dead":
            store.update(task.id, status="working")
    store.update(task.id, status="completed")
    ids["pending"] = max(d.id for d in store.deliveries(task.id))
    yield task.id, ids
    store.close()


@pytest.mark.parametrize(
    ("which", "said"),
    [
        ("pending", "is pending, not dead: only a dead delivery is sent again"),
        ("delivered", "is delivered, not dead: only a dead delivery is sent again"),
        ("missing", "has no delivery 999; queuestore tasks deliveries"),
    ],
)
def test_redeliver_says_why_a_delivery_is_not_sent_again(
    database_url: str, deliveries: tuple[str, dict[str, int]], which: str, said: str
) -> None:
    task_id, ids = deliveries
    delivery_id = ids.get(which, 999)

    refused = CliRunner().invoke(
        app, ["tasks", "redeliver", "--url", database_url, "--", task_id, str(delivery_id)]
    )

    assert refused.exit_code == 1
    assert said in refused.output
    assert "not found" not in refused.output


def test_redeliver_sends_a_dead_delivery_again(
    database_url: str, deliveries: tuple[str, dict[str, int]]
) -> None:
    task_id, ids = deliveries

    sent = CliRunner().invoke(
        app, ["tasks", "redeliver", "--url", database_url, "--", task_id, str(ids["dead"])]
    )

    assert sent.exit_code == 0, sent.output
    assert f"delivery {ids['dead']} of {task_id} is pending" in sent.output


def test_cancel_and_resume_say_which_task_they_act_on(database_url: str) -> None:
    store = SqlTaskStore(database_url)
    store.migrate()
    done = store.create("cli.done")
    store.cancel(done.id)
    runner = CliRunner()

    cancelled = runner.invoke(app, ["tasks", "cancel", "--url", database_url, "--", done.id])
    resumed = runner.invoke(app, ["tasks", "resume", "--url", database_url, "--", done.id, "yes"])

    assert cancelled.exit_code == resumed.exit_code == 1
    assert f"task {done.id} is cancelled already: only a live task can be" in cancelled.output
    assert "only a task waiting for input (input_required) takes an answer" in resumed.output
    store.close()


def test_tasks_submit_many_submits_a_file_of_json_lines_all_or_nothing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUESTORE_HOME", str(tmp_path))
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade", "--url", database_url]).exit_code == 0
    lines = tmp_path / "tasks.jsonl"
    lines.write_text(
        '{"name": "examples.crunch", "priority": 3}\n\n'
        '{"name": "examples.research", "input": {"topic": "otters"}, "delay": 90}\n'
    )

    done = runner.invoke(app, ["tasks", "submit-many", "--url", database_url, str(lines), "--json"])

    assert done.exit_code == 0, done.output
    created = json.loads(done.output)
    assert [(task["name"], task["priority"]) for task in created] == [
        ("examples.crunch", 3),
        ("examples.research", 0),
    ]
    assert created[1]["run_at"] is not None
    lines.write_text('{"name": "examples.crunch"}\n{"name": "examples.crunch", "input": 5}\n')
    refused = runner.invoke(app, ["tasks", "submit-many", "--url", database_url, str(lines)])
    assert refused.exit_code != 0
    assert "tasks[1].input" in refused.output
    bad = runner.invoke(
        app, ["tasks", "submit-many", "--url", database_url, "-"], input='{"name": "x", "y": 1}\n'
    )
    assert bad.exit_code == 2
    assert "line 1: unknown field 'y'" in bad.output
    store = SqlTaskStore(database_url)
    assert store.count() == 2
    store.close()
