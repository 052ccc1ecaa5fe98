"""The janitor: deletes terminal tasks past their TTL, never a live one.

It runs as the ``queuestore.beat.janitor`` beat task (see
``TaskQueue.install_beat_schedule``) or by hand with ``queuestore janitor``.
It also keeps the operator's view small: it folds the rollup's fresh entries
(dropping series older than two days) and removes the rows of workers silent
for longer than ``ttl``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from queuestore.store.base import TaskStore

log = logging.getLogger(__name__)


def run_janitor(store: TaskStore, ttl: timedelta, *, batch_size: int = 1000) -> int:
    """Delete terminal tasks older than ``ttl`` (or their own ttl) in bounded batches.

    Then fold the rollup and forget the workers silent for longer than ``ttl``.

    Returns:
        How many tasks were removed.
    """
    removed = store.cleanup(ttl, batch_size=batch_size)
    folded = store.fold_rollup()
    forgotten = store.forget_workers(ttl)
    # INFO when it acted; every interval at INFO would bury the lines that matter.
    log.log(
        logging.INFO if removed or forgotten else logging.DEBUG,
        "the janitor removed %d expired tasks (ttl %s), folded %d rollup entries, "
        "forgot %d silent workers",
        removed,
        ttl,
        folded,
        forgotten,
    )
    return removed
