"""What the ops tests share: the deployment they run on, and the ``queuestore`` command
run through its real entry point as a subprocess.

Processes come from the integration harness (``tests/integration/harness.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.integration.harness import Deployment, LoggedProcess, free_port, port_open, wait_for

__all__ = [
    "Deployment",
    "LoggedProcess",
    "Ops",
    "free_port",
    "ops_env",
    "port_open",
    "queuestore_command",
    "run_cli",
    "start_queuestore",
    "wait_for",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

OPS_ENV = {
    # Two runs at most, so the reaper's retry and failure can both be provoked quickly.
    "QUEUESTORE_MAX_LOST_RUNS": "2",
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
