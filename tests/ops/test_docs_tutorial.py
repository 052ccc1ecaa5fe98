"""docs/tutorial.md, typed in order: every command it shows runs, and succeeds.

The page is read block by block, in order. A code block whose first line is
``# NAME`` is a file the reader saves as NAME; a ``console`` block's ``$ ``
lines are commands, typed in the terminal its title names (``title="terminal
3: ..."``; a block without one is typed in terminal 1). Each terminal is a bash
of its own, so a variable or an export holds only in the terminal the page sets
it in. A worker, beat or API server holds its terminal: it runs there in the
background, the test waits for it to be ready as a reader would (the worker's
``ready``, beat's start, its port), and the next command typed in that
terminal first stops it with Ctrl-C (SIGINT to its process group), as the page
tells the reader to. Every other command must exit 0. At the end the API the
page starts shows the page's task to the page's token, whose principal it names.

What differs from a reader's machine, and only that:

- ``uv run`` is left out (the commands run in this checkout's environment),
  and ``uv sync`` is not run;
- a fresh folder stands for the repository, and for HOME;
- the database the page creates (``app``) gets a fresh name on the tests'
  PostgreSQL server (``PGHOST``, ``PGUSER``... point ``createdb`` at it) and is
  dropped at the end; Redis is the tests' Redis; ports 8000 and 9100 are free ports.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.ops.ops_support import free_port, port_open, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
TOKEN = "a-long-random-token"
PRINCIPAL = "alice"
TOOLS = ["bash", "setsid", "createdb", "openssl", "curl", "grep"]
COMMAND_TIMEOUT = 120.0
"""The longest one command may take (the demo stops itself within a minute)."""

END = "__tutorial_command_ended__"

EXPECTED = [
    ("tasks watch --until input_required", "input_required"),
    ("tasks resume", "working"),
    ("tasks watch -- $ID", "completed"),
    ("tasks cancel", "cancelled"),
    ("grep queuestore_tasks", "queuestore_tasks{"),
    ("/tasks?total=true", '"owner":"alice"'),
]
"""What a command's output shows, as the page says: (part of the command, part of the output)."""


# -- the page ---------------------------------------------------------------------------


@dataclass
class Step:
    """A file to save, or a command to type in a terminal."""

    terminal: str = "1"
    command: str | None = None
    file: str | None = None
    content: str = ""


FENCE = re.compile(r"^```(\S*)(.*)$")
TITLE = re.compile(r'title="terminal (\d+)')
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")
ASSIGNMENTS = re.compile(r"((?:\w+=\S*\s+)*)(.*)", re.DOTALL)
"""A command's leading variable assignments (``A=1 B=2 command``), and the rest."""


def steps(page: str) -> list[Step]:
    """The page's files and commands, in order."""
    found: list[Step] = []
    lines = page.splitlines()
    at = 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        at += 1
        if opening is None:
            continue
        body: list[str] = []
        while not lines[at].startswith("```"):
            body.append(lines[at])
            at += 1
        at += 1
        language, info = opening.groups()
        if body and body[0].startswith("# ") and language != "console":
            found.append(Step(file=body[0][2:].strip(), content="\n".join(body) + "\n"))
        elif language == "console":
            titled = TITLE.search(info)
            terminal = titled[1] if titled else "1"
            found += [Step(terminal, command) for command in commands(body)]
    return found


def commands(body: list[str]) -> Iterator[str]:
    """The ``$ `` commands of a console block, each with the lines the shell reads with it."""
    at = 0
    while at < len(body):
        line = body[at]
        at += 1
        if not line.startswith("$ "):
            continue  # output
        command = line[2:]
        heredoc = HEREDOC.search(command)
        if heredoc is not None:
            while body[at] != heredoc[1]:
                command += "\n" + body[at]
                at += 1
            command += "\n" + body[at]
            at += 1
        while not complete(command):
            command += "\n" + body[at]
            at += 1
        yield command


def complete(command: str) -> bool:
    """Whether the shell runs ``command`` as it is (no trailing ``\\``, no open quote)."""
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def uncommented(command: str) -> str:
    """``command`` without its trailing ``# comment`` (a ``#`` outside quotes, after a space)."""
    quote = None
    for at, character in enumerate(command):
        if quote is not None:
            quote = None if character == quote else quote
        elif character in "'\"":
            quote = character
        elif character == "#" and (at == 0 or command[at - 1].isspace()):
            return command[:at].rstrip()
    return command


def test_the_page_reads_as_the_test_expects() -> None:
    read = steps(TUTORIAL.read_text())
    assert [step.file for step in read if step.file] == ["reports.py"]
    typed = [step.command for step in read if step.command]
    assert typed[:2] == ["uv sync --all-extras", "uv run queuestore demo"]
    assert {step.terminal for step in read if step.command} == {"1", "2", "3", "4"}
    assert any("<<EOF" in command and command.endswith("\nEOF") for command in typed)
    for part, _ in EXPECTED:
        assert any(part in command for command in typed), part
    assert TOKEN in TUTORIAL.read_text()
    assert uncommented("a 'b # c' d  # e") == "a 'b # c' d"


# -- the reader's machine ------------------------------------------------------------------


@dataclass
class Background:
    """A process that holds its terminal, in a process group of its own."""

    pid: int
    log: Path
    command: str

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


@dataclass
class Terminal:
    """A bash reading typed commands, and what it runs in the background."""

    name: str
    cwd: Path
    env: dict[str, str]
    shell: subprocess.Popen[str] = field(init=False)
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    running: Background | None = None
    reader: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )
        assert self.shell.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.shell.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put(line)

    def type(self, command: str, *, timeout: float = COMMAND_TIMEOUT) -> tuple[int, str]:
        """Run ``command`` in the foreground: its exit code and output."""
        assert self.shell.stdin is not None
        self.shell.stdin.write(f"{command}\nprintf '\\n{END} %s\\n' $?\n")
        self.shell.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"terminal {self.name}: `{command}` still running after {timeout}s:\n"
                    + "".join(output)
                ) from None
            if line.startswith(END):
                return int(line.split()[1]), "".join(output).rstrip("\n")
            output.append(line)

    def start(self, command: str, log: Path) -> Background:
        """Run ``command`` in the background, in a process group of its own."""
        parts = ASSIGNMENTS.fullmatch(uncommented(command))
        assert parts is not None
        assignments, rest = parts.groups()
        code, output = self.type(
            f"{assignments}setsid {rest} > {shlex.quote(str(log))} 2>&1 < /dev/null &\necho $!"
        )
        assert code == 0, output
        self.running = Background(int(output.splitlines()[-1]), log, command)
        return self.running

    def interrupt(self) -> None:
        """Ctrl-C what holds the terminal, and wait until it has stopped."""
        running, self.running = self.running, None
        if running is None:
            return
        with _gone():
            os.killpg(running.pid, signal.SIGINT)
        try:
            self.type(f"wait {running.pid}", timeout=60)
        except AssertionError:
            with _gone():
                os.killpg(running.pid, signal.SIGKILL)
            raise

    def close(self) -> None:
        with _gone():
            self.interrupt()
        if self.shell.stdin is not None:
            self.shell.stdin.close()
        try:
            self.shell.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.shell.pid, signal.SIGKILL)
            self.shell.wait(timeout=10)
        self.reader.join(timeout=10)
        if self.shell.stdout is not None:
            self.shell.stdout.close()


class _gone:
    """Ignore a process that is gone already (or a wait that failed while closing)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, (ProcessLookupError, AssertionError))


def ready(process: Background, ports: list[int]) -> None:
    """Wait until ``process`` is ready as its terminal shows it (or died)."""
    markers = {"queuestore worker": "ready.", "queuestore beat": "beat: Starting"}
    marker = next((m for word, m in markers.items() if word in process.command), None)

    def up() -> bool:
        if not process.alive():
            pytest.fail(f"`{process.command}` exited:\n{process.text()[-3000:]}")
        return (marker is None or marker in process.text()) and all(map(port_open, ports))

    wait_for(up, timeout=90, what=f"`{process.command}` to be ready")


HOLDS_ITS_TERMINAL = re.compile(r"\bqueuestore (worker|beat|serve)\b")


@dataclass
class Reader:
    """The machine the page's commands run on."""

    root: Path
    env: dict[str, str]
    replacements: dict[str, str]
    ports: dict[str, int]
    terminals: dict[str, Terminal] = field(default_factory=dict)
    transcript: list[tuple[str, str]] = field(default_factory=list)

    def terminal(self, name: str) -> Terminal:
        if name not in self.terminals:
            self.terminals[name] = Terminal(name, self.root, self.env)
        return self.terminals[name]

    def as_run_here(self, command: str) -> str:
        command = re.sub(r"\buv run ", "", command)
        for shown, here in self.replacements.items():
            command = command.replace(shown, here)
        return command

    def do(self, step: Step) -> None:
        if step.file is not None:
            (self.root / step.file).write_text(step.content)
            return
        assert step.command is not None
        if step.command.startswith("uv sync"):
            return
        terminal = self.terminal(step.terminal)
        terminal.interrupt()  # the reader's Ctrl-C: anything typed there stops what ran
        command = self.as_run_here(step.command)
        if HOLDS_ITS_TERMINAL.search(command):
            log = self.root / f"terminal-{step.terminal}-{len(self.transcript)}.log"
            ports = [port for port in self.ports.values() if str(port) in command]
            ready(terminal.start(command, log), ports)
            self.transcript.append((step.command, ""))
            return
        code, output = terminal.type(command)
        assert code == 0, f"terminal {step.terminal}: `{step.command}` exited {code}:\n{output}"
        self.transcript.append((step.command, output))

    def close(self) -> None:
        for terminal in self.terminals.values():
            terminal.close()


# -- the test ------------------------------------------------------------------------------


@pytest.fixture
def reader(shared: ModuleType, tmp_path: Path) -> Iterator[Reader]:
    def tools() -> None:
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise FileNotFoundError(", ".join(missing))

    shared.require_service("the tutorial's tools", tools)
    redis_url = shared.require_redis()
    admin_url = shared.pg_admin_url()
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    shared.require_service("PostgreSQL", lambda: admin.connect().close())
    database = f"queuestore_tutorial_{secrets.token_hex(6)}"
    host, port = admin_url.host or "127.0.0.1", admin_url.port or 5432
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("QUEUESTORE_", "PG", "VIRTUAL_ENV", "PYTHON"))
    }
    env |= {
        "HOME": str(tmp_path),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        "PGHOST": host,
        "PGPORT": str(port),
        "PGUSER": admin_url.username or "postgres",
    }
    if admin_url.password:
        env["PGPASSWORD"] = str(admin_url.password)
    ports = {"8000": free_port(), "9100": free_port()}
    made = Reader(
        root=tmp_path,
        env=env,
        replacements={
            "postgresql://localhost/app": f"postgresql://{host}:{port}/{database}",
            "createdb app": f"createdb {database}",
            "redis://localhost:6379/1": redis_url,
            **{shown: str(port) for shown, port in ports.items()},
        },
        ports=ports,
    )
    try:
        yield made
    finally:
        made.close()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


def test_the_tutorial_runs_as_typed(reader: Reader) -> None:
    page = TUTORIAL.read_text()
    for shown in reader.replacements:
        assert shown in page, f"the tutorial no longer shows {shown!r}: update the test"
    for step in steps(page):
        reader.do(step)

    for part, shown in EXPECTED:
        outputs = [output for command, output in reader.transcript if part in command]
        assert any(shown in output for output in outputs), (part, outputs)

    # The page sends the reader to the dashboard, signed in with its token: the API
    # names the principal, and lists the task the page submitted last, as its owner's.
    code, task_id = reader.terminal("3").type("echo $ID")
    assert code == 0
    api = f"http://127.0.0.1:{reader.ports['8000']}"
    signed = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{api}/whoami", headers=signed).json() == {
        "principal": PRINCIPAL,
        "admin": False,
    }
    listed = httpx.get(f"{api}/tasks", headers=signed).json()["tasks"]
    assert task_id in [task["id"] for task in listed]
    assert {task["owner"] for task in listed} == {PRINCIPAL}
