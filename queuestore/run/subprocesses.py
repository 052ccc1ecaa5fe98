"""Celery processes started by a command of ours, and stopped with everything they started.

The demo and the example servers run a worker (and beat) beside themselves on
the embedded default, so that one command shows the whole flow. The block
that started them stops them; if the command itself is killed, they stop on
their own (:mod:`~queuestore.run.tether`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from queuestore.run.tether import tethered


@contextmanager
def celery_process(
    app: str, *arguments: str, env: Mapping[str, str], cwd: Path, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``celery -A APP ARGUMENTS`` for the block's duration, its output in ``log``.

    The process gets a session of its own, so that stopping it also stops the
    prefork children it started, and nothing of it outlives the block; it is
    tethered to this process, so nothing of it outlives this process either,
    even killed. Enter the block in a thread that lives as long as the process.
    """
    command = tethered([sys.executable, "-m", "celery", "-A", app, *arguments])
    with log.open("w") as output:
        process = subprocess.Popen(
            command,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            stop_process_group(process)


def stop_process_group(process: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """Stop ``process`` warmly (SIGTERM), then its whole process group for good."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # Prefork children share the worker's process group; none may outlive it.
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
