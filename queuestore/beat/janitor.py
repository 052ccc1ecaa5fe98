"""The janitor: deletes terminal tasks past their TTL, never a live one.

It runs as the ``queuestore.beat.janitor`` beat task (see
``TaskQueue.install_beat_schedule``) or by hand with ``queuestore janitor``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)


def run_janitor(store: TaskStore, ttl: timedelta, *, batch_size: int = 1000) -> int:
    """Delete terminal tasks older than ``ttl`` (or their own ttl) in bounded batches.

    Returns:
        How many tasks were removed.
    """
    removed = store.cleanup(ttl, batch_size=batch_size)
    # INFO when it acted; every interval at INFO would bury the lines that matter.
    log.log(
        logging.INFO if removed else logging.DEBUG,
        "the janitor removed %d expired tasks (ttl %s)",
        removed,
        ttl,
    )
    return removed
