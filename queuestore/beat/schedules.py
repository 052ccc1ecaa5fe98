"""The schedules' tick: make the tasks of the schedules whose time came, and publish them.

Beat runs it every ``schedules_interval`` as the ``queuestore.schedules`` task.
Any number of beats may run it at once: the store makes each tick's task once
(:meth:`TaskStore.run_schedules <queuestore.TaskStore.run_schedules>`), and only the
caller that made a task publishes it (the sweep publishes what a lost publish left).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from queuestore.broker.publisher import Publisher

log = logging.getLogger(__name__)


def run_schedules(publisher: Publisher, *, grace: timedelta, limit: int = 100) -> int:
    """Make and publish the tasks of the ticks that came; how many tasks were made.

    ``grace``: how late a tick may come and still run under the ``skip`` policy.
    """
    made = publisher.store.run_schedules(grace=grace, limit=limit)
    for task in publisher.admitted([task for task in made if publisher.starts_soon(task)]):
        if not publisher.try_publish(task):
            break  # the broker is down: the sweep publishes the rest
    publisher.marks.flush()
    if made:
        log.info("the schedules made %d tasks", len(made))
    return len(made)
