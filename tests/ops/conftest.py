"""Fixtures of the ops tests: one PostgreSQL + Redis deployment whose worker and beat
are started with ``queuestore worker`` and ``queuestore beat``, and a runner of the
``queuestore`` command as a subprocess.

The worker logs JSON and serves Prometheus metrics on a free port, so the CLI,
log and metrics tests share it. Processes come from the integration harness.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from kombu import Connection

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import Deployment, LoggedProcess, free_port, port_open, wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REDIS_URL = os.environ.get("QUEUESTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

OPS_ENV = {
    # Two runs at most, so the reaper's retry and failure can both be provoked quickly.
    "QUEUESTORE_MAX_ATTEMPTS": "2",
    "QUEUESTORE_LOG_FORMAT": "json",
    "QUEUESTORE_LOG_LEVEL": "INFO",
    # Cursors printed by one command must page in the next one.
    "QUEUESTORE_CURSOR_SECRET": "ops-tests",
}


def queuestore_command(*arguments: str) -> list[str]:
    """The ``queuestore`` command, through its real entry point in this interpreter."""
    return [sys.executable, "-m", "queuestore", *arguments]


@dataclass
class Ops:
    """The deployment, its worker (with metrics) and beat, and a CLI runner on it."""

    deployment: Deployment
    worker: LoggedProcess
    beat: LoggedProcess
    metrics_port: int

    def env(self, **extra: str) -> dict[str, str]:
        return ops_env(self.deployment, **extra)

    def cli(
        self, *arguments: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run ``queuestore ARGUMENTS`` to completion, output captured (piped, not a tty)."""
        return run_cli(self.deployment, *arguments, timeout=timeout, **env)


def ops_env(deployment: Deployment, **extra: str) -> dict[str, str]:
    """The deployment's environment, with this folder's ``ops_app`` importable."""
    env = deployment.env(**(OPS_ENV | extra))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    env.pop("COLUMNS", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def run_cli(
    deployment: Deployment, *arguments: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``queuestore ARGUMENTS`` to completion, output captured (piped, not a tty)."""
    return subprocess.run(
        queuestore_command(*arguments),
        env=ops_env(deployment, **env),
        cwd=deployment.root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_queuestore(
    deployment: Deployment, name: str, arguments: list[str], env: dict[str, str]
) -> LoggedProcess:
    process = LoggedProcess.start(
        name,
        queuestore_command(*arguments),
        env=env,
        cwd=deployment.root,
        log=deployment.root / f"{name}.log",
    )
    deployment.processes.append(process)
    return process


@pytest.fixture(scope="session")
def shared(pytestconfig: pytest.Config) -> ModuleType:
    """``tests/conftest.py``: ``require_service`` and ``fresh_pg_database``."""
    path = Path(__file__).resolve().parents[1] / "conftest.py"
    for plugin in pytestconfig.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if file is not None and Path(file).resolve() == path:
            return plugin  # type: ignore[no-any-return]
    raise RuntimeError(f"{path} is not loaded as a conftest")


def redis_url(shared: ModuleType) -> str:
    def check() -> None:
        with Connection(REDIS_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)

    shared.require_service("Redis", check)
    return REDIS_URL


@pytest.fixture(scope="session")
def pg_database(shared: ModuleType) -> Iterator[Callable[[], str]]:
    """Makes fresh PostgreSQL databases, dropped at the end of the session."""
    with ExitStack() as stack:

        def make() -> str:
            url = stack.enter_context(shared.fresh_pg_database("queuestore_ops"))
            return str(url.render_as_string(hide_password=False))

        yield make


@pytest.fixture(scope="session")
def ops(
    shared: ModuleType,
    pg_database: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Ops]:
    """PostgreSQL + Redis; ``queuestore worker`` (JSON logs, metrics) and ``queuestore beat``."""
    broker = redis_url(shared)
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
