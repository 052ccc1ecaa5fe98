"""The ``curl`` commands the docs show against the API, run with curl as a reader types them.

Every command a page shows for ``localhost:8000`` runs, as written, against an
API served on a free port (its host and port the only change); ``$ID`` is a task
of the token's principal, waiting for input, with a delivered and a dead
delivery, so that each command the pages show can succeed. Each must answer 2xx:
a header the server needs and the page leaves out (a body's ``Content-Type``)
fails here, not for the reader. Event streams (``-N``) stay open by design and
are left to the API tests.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import uvicorn
from celery import Celery

from queuestore import InMemoryTaskStore, Settings, TaskQueue, TaskStore
from queuestore.http import create_app
from queuestore.store.deliveries import Settlement

ROOT = Path(__file__).resolve().parents[2]
API = "localhost:8000"
TOKENS = {"t-alice": "alice", "a-long-random-token": "alice"}
"""The tokens the pages show, and their principal."""
HOOK_HOST = "hooks.example.com"
HOOK_ADDRESS = "93.184.216.34"
"""Where the pages' receiver resolves here: a public address, so no lookup leaves the host."""

PROMPT = re.compile(r"^\$ (.*)$")


def shown_commands() -> Iterator[tuple[str, str]]:
    """``(page, command)`` for each ``curl`` of the API in a console block of the docs."""
    for page in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            found = PROMPT.match(line)
            if found is None or not found[1].startswith("curl ") or API not in found[1]:
                continue
            command = found[1]
            following = number + 1
            while not complete(command):  # continued on the next line, as the shell reads it
                command += "\n" + lines[following]
                following += 1
            yield f"{page.relative_to(ROOT)}:{number + 1}", command


def complete(command: str) -> bool:
    """Whether the shell would run ``command`` as it is (no open quote, no trailing ``\\``)."""
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command)
    except ValueError:  # no closing quotation
        return False
    return True


COMMANDS = [(where, command) for where, command in shown_commands() if " -sN " not in command]


def test_the_pages_show_creates_with_bodies() -> None:
    bodies = [command for _, command in COMMANDS if " -d " in command]
    assert any("callback" in command for command in bodies)
    assert any("tasks:batch" in command for command in bodies)
    assert len(bodies) >= 6


@pytest.fixture(scope="module")
def curl(shared: ModuleType) -> str:
    def check() -> None:
        if shutil.which("curl") is None:
            raise FileNotFoundError("curl")

    shared.require_service("curl", check)
    return str(shutil.which("curl"))


@pytest.fixture
def public_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages' receiver host resolves to a public address, with no network."""
    lookup = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == HOOK_HOST:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (HOOK_ADDRESS, port or 443))]
        return lookup(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def served(public_hook: None) -> Iterator[tuple[str, TaskQueue]]:
    """``(base URL, queue)`` of an API on a free loopback port, on the in-memory store."""
    celery = Celery("docs-commands", broker="memory://", set_as_current=False)
    queue = TaskQueue(InMemoryTaskStore(), celery)
    app = create_app(Settings(http_tokens=TOKENS, cursor_secret="docs"), queue=queue)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the API stopped while starting"
        assert time.monotonic() < deadline, "the API did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", queue
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        celery.close()


def waiting_task(store: TaskStore) -> str:
    """A task of alice's waiting for input, whose delivery 1 was delivered and 2 is dead."""
    task = store.create("reports.build", owner="alice")
    store.add_callback(task.id, f"https://{HOOK_HOST}/reports", events="all")
    store.update(task.id, status="working")
    store.update(task.id, status="input_required", status_message="Publish?")
    for settlement in (Settlement.delivered(200), Settlement.dead("HTTP 410", 410)):
        (outgoing,) = store.take_deliveries(limit=10)
        assert store.settle_delivery(outgoing.delivery, settlement)
    assert [d.id for d in store.deliveries(task.id)] == [1, 2]
    return task.id


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_a_curl_the_docs_show_succeeds(
    curl: str, served: tuple[str, TaskQueue], where: str, command: str, tmp_path: Path
) -> None:
    address, queue = served
    task_id = waiting_task(queue.store)
    ran = subprocess.run(
        ["bash", "-c", command.replace(API, address) + ' -o body -w "%{http_code}"'],
        env={"PATH": str(Path(curl).parent), "ID": task_id},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.returncode == 0, f"{where}: {command}\n{ran.stderr}"
    body = (tmp_path / "body").read_text()
    assert ran.stdout.startswith("2"), f"{where}: {command}\nHTTP {ran.stdout}: {body}"
