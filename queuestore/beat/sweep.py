"""The sweep: publish the tasks whose message never went out, or was lost.

A task is committed before its message is published; when the publish fails
(the broker is down), or a scheduled task's start comes near, or a message was
lost with its broker, the task waits in the store, unpublished. Beat runs the
sweep every ``sweep_interval``: it publishes those tasks, the most urgent and
longest waiting first, and under concurrency limits only as many of an
owner's or a job's as it has free slots. It also tends the task tree: it wakes
a parent whose children all ended while nobody woke it, and cancels the live
children of a parent that ended before its cascade ran.
"""

from __future__ import annotations

import logging

from queuestore.broker.publisher import Publisher

log = logging.getLogger(__name__)


def sweep(publisher: Publisher, *, limit: int = 500) -> int:
    """Publish up to ``limit`` unpublished tasks that are due; how many went out.

    Due: unpublished for ``publish_grace`` (so ``submit`` is not raced),
    scheduled to start within ``schedule_ahead``, or published
    ``republish_after`` ago and never claimed. It stops at the first publish
    the broker refuses: the rest wait for the next sweep.
    """
    options = publisher.options
    due = publisher.store.unpublished(
        options.publish_grace,
        republish_after=options.republish_after,
        ahead=options.schedule_ahead,
        limit=limit,
        limits=options.limits,
    )
    published = 0
    for task in due:
        if not publisher.try_publish(task):
            break
        published += 1
    published += _tend_the_tree(publisher, limit)
    publisher.store.prune_flow()  # the rate limits' starts past their period, ended pauses
    publisher.marks.flush()  # one write for the sweep, before the next can run
    if published:  # quiet when it had nothing to do
        log.info("the sweep published %d waiting tasks", published)
    return published


def _tend_the_tree(publisher: Publisher, limit: int) -> int:
    """Wake and publish the parents whose children all ended while no waker came, and
    cancel the live children of ended parents whose cascade never ran; how many published."""
    store = publisher.store
    orphans = store.cancel_orphans(limit=limit)
    if orphans:
        log.warning("the sweep cancelled %d tasks whose parent had ended", len(orphans))
    woken = store.wake_due(limit=limit)
    published = 0
    for task in publisher.admitted(woken):
        if not publisher.try_publish(task):
            break
        published += 1
    return published
