"""What several benchmarks share: a scratch PostgreSQL database, child processes, ports.

The benchmarks run as scripts (``uv run python bench/<name>.py``), so this
folder is on ``sys.path`` and they import this module by its name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg

from queuestore import SqlTaskStore
from queuestore.run.tether import tethered

HERE = Path(__file__).resolve().parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
"""An existing database on the benchmark's server, used to create and drop others."""

# The floor: a lifecycle's three writes (insert, claim, complete) as raw psycopg
# statements on queuestore's own table and indexes, each returning the row as
# the store's statements do.
RAW_COLUMNS = (
    "id, name, input, owner, context_id, status, status_message, progress, result, error, "
    "artifacts, metadata, answers, created_at, updated_at, started_at, finished_at, ttl_ms, "
    "attempt, version, worker_id, lease_expires_at"
)
RAW_INSERT = (
    "INSERT INTO queuestore_tasks (id, name, input, owner, context_id, status, artifacts, "
    "metadata, answers, created_at, updated_at, attempt, version) VALUES (%s, %s, %s, NULL, "
    f"NULL, 'submitted', '[]', '{{}}', '[]', now(), now(), 0, 1) RETURNING {RAW_COLUMNS}"
)
RAW_CLAIM = (
    "UPDATE queuestore_tasks SET status = 'working', worker_id = %s, attempt = attempt + 1, "
    "lease_expires_at = now() + interval '30 seconds', started_at = coalesce(started_at, now()),"
    " updated_at = now(), version = version + 1 WHERE id = %s AND status IN ('submitted', "
    f"'working') AND worker_id IS NULL RETURNING {RAW_COLUMNS}"
)
RAW_COMPLETE = (
    "UPDATE queuestore_tasks SET status = 'completed', progress = 1.0, result = %s, "
    "artifacts = %s, worker_id = NULL, lease_expires_at = NULL, published_at = NULL, "
    "finished_at = now(), updated_at = now(), version = version + 1 "
    f"WHERE id = %s AND status = 'working' AND worker_id = %s RETURNING {RAW_COLUMNS}"
)


@contextlib.contextmanager
def scratch_database(prefix: str, *, migrate: bool = False) -> Iterator[str]:
    """A fresh database ``<prefix>_<random>`` (migrated if asked), dropped at the end.

    Yields a ``postgresql://`` URL (psycopg 3 for SQLAlchemy, libpq for psycopg).
    """
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        if migrate:
            store = SqlTaskStore(url)
            try:
                store.migrate()
            finally:
                store.close()
        yield url
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def process(
    command: list[str], env: dict[str, str], log: Path, *, cwd: Path = HERE
) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own session, its output in ``log``, stopped by its process group.

    It is tethered to this process: if the benchmark dies without stopping it
    (an exception past this block, a SIGKILL), the child ends too.
    """
    with log.open("ab") as out:
        child = subprocess.Popen(
            tethered(command),
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=10)


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
