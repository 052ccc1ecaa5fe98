"""Fixtures of the ops tests: one PostgreSQL + Redis deployment whose worker and beat
are started with ``queuestore worker`` and ``queuestore beat``.

The worker logs JSON and serves Prometheus metrics on a free port, so the CLI,
log and metrics tests share it (helpers in ``ops_support.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from types import ModuleType

import pytest

from tests.ops.ops_support import (
    Deployment,
    Ops,
    free_port,
    ops_env,
    port_open,
    run_cli,
    start_queuestore,
    wait_for,
)


@pytest.fixture(scope="package")
def pg_database(shared: ModuleType) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases, dropped when the package's tests end."""
    with ExitStack() as stack:

        def make() -> str:
            url = stack.enter_context(shared.fresh_pg_database("queuestore_ops"))
            return str(url.render_as_string(hide_password=False))

        yield make


@pytest.fixture(scope="package")
def ops(
    shared: ModuleType,
    pg_database: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Ops]:
    """PostgreSQL + Redis; ``queuestore worker`` (JSON logs, metrics) and ``queuestore beat``."""
    broker = shared.require_redis()
    deployment = Deployment(
        root=tmp_path_factory.mktemp("ops"), database_url=pg_database(), broker_url=broker
    )
    try:
        migrated = run_cli(deployment, "db", "upgrade")
        assert migrated.returncode == 0, migrated.stderr
        metrics_port = free_port()
        node = f"ops-{uuid.uuid4().hex[:8]}"
        worker = start_queuestore(
            deployment,
            node,
            [
                "worker",
                "-A",
                "ops_app",
                "--pool=prefork",
                "--concurrency=2",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                f"--hostname={node}@%h",
            ],
            ops_env(deployment, QUEUESTORE_METRICS_PORT=str(metrics_port)),
        )
        wait_for(
            lambda: f"{node}@" in worker.text() and "ready." in worker.text(),
            timeout=60,
            what="the worker to be ready",
            logs=[worker],
        )
        wait_for(
            lambda: port_open(metrics_port), timeout=30, what="the metrics port", logs=[worker]
        )
        beat = start_queuestore(
            deployment,
            "beat",
            ["beat", "-A", "ops_app", f"--schedule={deployment.home / 'beat-schedule'}"],
            ops_env(deployment),
        )
        yield Ops(deployment, worker, beat, metrics_port)
    finally:
        deployment.close()
