"""The connection budget: a worker process keeps at most 2 PostgreSQL connections (plus
one LISTEN) whatever its concurrency, and the lifecycle runs behind PgBouncer in
transaction mode, with prepared statements and LISTEN/NOTIFY off.

Connections are counted per process from ``/proc`` (Linux): the sockets a process
holds to PostgreSQL's port, sampled while its jobs run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import make_url

from queuestore import TaskStatus
from tests.integration.harness import DeploymentFactory, LoggedProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.postgres]

BUDGET = 3
"""A worker process's connections: the pool's 2, and one LISTEN (the heartbeat's stops)."""


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(children.get(current, []))
    return found


def connections_to(pid: int, port: int) -> int:
    """How many established TCP connections ``pid`` holds to ``port``."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return 0
    sockets = {link[8:-1] for link in links if link.startswith("socket:[")}
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in sockets:
                count += 1
    return count


@pytest.mark.parametrize(("pool", "concurrency"), [("threads", 8), ("prefork", 2)])
def test_a_worker_process_keeps_its_connection_budget_at_any_concurrency(
    deployment: DeploymentFactory, pool: str, concurrency: int
) -> None:
    stack = deployment("redis", "postgres")
    port = make_url(stack.database_url).port or 5432
    worker = stack.start_worker(pool=pool, concurrency=concurrency)
    tasks = stack.queue.submit_many(
        [{"name": "tests.sleep", "input": {"seconds": 0.3}} for _ in range(4 * concurrency)]
    )
    most: dict[int, int] = {}

    def all_done() -> bool:
        for pid in descendants(worker.pid):
            most[pid] = max(most.get(pid, 0), connections_to(pid, port))
        return all(stack.queue.store.get(task.id).is_terminal for task in tasks)

    wait_for(all_done, timeout=60, what="the tasks to finish", logs=[worker])
    assert {stack.queue.store.get(task.id).status for task in tasks} == {TaskStatus.COMPLETED}
    assert max(most.values()) <= BUDGET, most


@contextmanager
def pgbouncer(tmp_path: Path, server_port: int) -> Iterator[int]:
    """A PgBouncer of the test's own in transaction mode, on a free port; its port."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.access(binary, os.X_OK):
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    folder = tmp_path / "pgbouncer"
    folder.mkdir()
    port = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host=127.0.0.1 port={server_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 100\ndefault_pool_size = 4\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in (tmp_path, folder, *folder.iterdir()):
        path.chmod(0o777)  # PgBouncer drops root for the server's user (-u) and reads these
    command = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    process = LoggedProcess.start(
        "pgbouncer", command, env=dict(os.environ), cwd=folder, log=folder / "pgbouncer.log"
    )
    try:
        wait_for(
            lambda: "listening on" in process.text(), timeout=15, what="PgBouncer", logs=[process]
        )
        yield port
    finally:
        process.stop()


def test_the_lifecycle_runs_behind_pgbouncer_in_transaction_mode(
    deployment: DeploymentFactory, tmp_path: Path
) -> None:
    stack = deployment(
        "redis", "postgres", QUEUESTORE_DATABASE_PREPARE="false", QUEUESTORE_DATABASE_LISTEN="false"
    )
    direct = make_url(stack.database_url)
    with pgbouncer(tmp_path, direct.port or 5432) as port:
        stack.database_url = direct.set(port=port).render_as_string(hide_password=False)
        worker = stack.start_worker(pool="threads", concurrency=4)
        tasks = stack.queue.submit_many(
            [{"name": "tests.square", "input": {"x": x}} for x in range(20)]
        )
        squares = [stack.queue.result(task.id, timeout=30).result for task in tasks]
        stopped = stack.queue.submit("tests.sleep", {"seconds": 30})
        wait_for(
            lambda: stack.queue.store.get(stopped.id).status == TaskStatus.WORKING,
            timeout=15,
            what="the sleep to start",
            logs=[worker],
        )
        stack.queue.cancel(stopped.id)
        ended = stack.queue.store.wait(stopped.id, timeout=15)
        stack.close()

    assert squares == [x * x for x in range(20)]
    assert ended.status == TaskStatus.CANCELLED
    assert "LISTEN/NOTIFY is off" in worker.text()
