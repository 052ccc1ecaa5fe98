"""The names of the maintenance tasks a ``TaskQueue`` registers and beat runs.

A leaf module: the callers' side (:mod:`queuestore.submit.queue`, which registers
them) and the run side (:mod:`queuestore.core.logs`, which tells them apart from
jobs) both name them from here.
"""

from __future__ import annotations

from typing import Final

JANITOR_TASK: Final = "queuestore.beat.janitor"
"""Deletes terminal tasks older than their TTL."""

REAPER_TASK: Final = "queuestore.reaper"
"""Retries or fails the runs whose lease stopped being renewed."""

SWEEP_TASK: Final = "queuestore.sweep"
"""Publishes the jobs of submitted tasks whose publish did not happen."""

MAINTENANCE_TASKS: Final = frozenset({JANITOR_TASK, REAPER_TASK, SWEEP_TASK})
"""Every maintenance task's name."""
