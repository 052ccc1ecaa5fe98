"""Metrics: the light part, importable without the ``metrics`` extra.

It owns the environment variable prometheus-client's multiprocess mode reads,
which must be set before ``prometheus_client`` is first imported, so settings
can prepare it without importing the Prometheus side. The counters, the
collectors and the servers are in :mod:`queuestore.metrics.prometheus`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The folder where prefork children count, for the main process to read."""


def multiprocess_dir() -> Path | None:
    """The multiprocess folder from ``PROMETHEUS_MULTIPROC_DIR``, if set."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def prepare_multiprocess_dir() -> None:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at a new folder unless it is set already.

    Prefork children count into files the main process reads; the folder must
    be known before ``prometheus_client`` is imported, so nothing is changed once
    it has been. The folder is removed when this process exits (not when a forked
    child does).
    """
    if MULTIPROC_ENV in os.environ or "prometheus_client" in sys.modules:
        return
    folder = tempfile.mkdtemp(prefix="queuestore-metrics-")
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    os.environ[MULTIPROC_ENV] = folder
