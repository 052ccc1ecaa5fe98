"""How a queue runs its tasks: the lease, the write intervals, publishing and the limits.

One frozen value shared by every side of a queue: the callers' verbs publish
by it, the run side leases and reports by it, and beat sweeps and reaps by
it. :class:`~queuestore.TaskQueue` documents each field; building it checks
that the durations fit together.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from queuestore.core.concurrency import NO_LIMITS, ConcurrencyLimits
from queuestore.core.flow import NO_FLOW, FlowControl

DEFAULT_SCHEDULE_AHEAD = timedelta(seconds=12)
"""How early a scheduled task's message goes out, where the lease leaves room for it."""


@dataclass(frozen=True)
class QueueOptions:
    """The durations and limits of one queue (see :class:`~queuestore.TaskQueue`'s arguments).

    Build it with :meth:`build`, which works out ``ack_after`` and
    ``schedule_ahead`` from the lease where they are not given.

    Raises:
        ValueError: durations that do not fit together.
        TypeError: ``limits`` is not a :class:`~queuestore.ConcurrencyLimits`.
    """

    lease: timedelta
    heartbeat_interval: timedelta
    report_interval: timedelta
    max_lost_runs: int
    terminate_on_cancel: bool
    publish_grace: timedelta
    republish_after: timedelta | None
    ack_after: timedelta
    schedule_ahead: timedelta
    priorities: bool
    limits: ConcurrencyLimits
    timeout_grace: timedelta = timedelta(seconds=10)
    timeout_interrupt: bool = True
    flow: FlowControl = NO_FLOW
    pause_recheck: timedelta = timedelta(seconds=10)

    @classmethod
    def build(
        cls,
        *,
        lease: timedelta = timedelta(seconds=30),
        heartbeat_interval: timedelta = timedelta(seconds=1),
        report_interval: timedelta = timedelta(milliseconds=200),
        max_lost_runs: int = 3,
        terminate_on_cancel: bool = True,
        publish_grace: timedelta = timedelta(seconds=10),
        republish_after: timedelta | None = timedelta(hours=1),
        ack_after: timedelta | None = None,
        schedule_ahead: timedelta | None = None,
        priorities: bool = False,
        limits: ConcurrencyLimits = NO_LIMITS,
        timeout_grace: timedelta = timedelta(seconds=10),
        timeout_interrupt: bool = True,
        flow: FlowControl = NO_FLOW,
        pause_recheck: timedelta = timedelta(seconds=10),
    ) -> QueueOptions:
        """The options, with ``ack_after`` (half the lease) and ``schedule_ahead``
        (12 s, or less where the lease leaves less) worked out when None."""
        ack_after = lease / 2 if ack_after is None else ack_after
        if schedule_ahead is None:
            schedule_ahead = min(DEFAULT_SCHEDULE_AHEAD, (lease - ack_after) * 0.9)
        return cls(
            lease=lease,
            heartbeat_interval=heartbeat_interval,
            report_interval=report_interval,
            max_lost_runs=max_lost_runs,
            terminate_on_cancel=terminate_on_cancel,
            publish_grace=publish_grace,
            republish_after=republish_after,
            ack_after=ack_after,
            schedule_ahead=schedule_ahead,
            priorities=priorities,
            limits=limits,
            timeout_grace=timeout_grace,
            timeout_interrupt=timeout_interrupt,
            flow=flow,
            pause_recheck=pause_recheck,
        )

    def __post_init__(self) -> None:
        if not isinstance(self.limits, ConcurrencyLimits):
            raise TypeError("limits must be a queuestore.ConcurrencyLimits")
        if not isinstance(self.flow, FlowControl):
            raise TypeError("flow must be a queuestore.FlowControl")
        if self.pause_recheck <= timedelta(0):
            raise ValueError("pause_recheck must be more than zero")
        if self.timeout_grace < timedelta(0):
            raise ValueError("timeout_grace must be zero or more")
        if self.heartbeat_interval >= self.lease:
            raise ValueError("heartbeat_interval must be shorter than the lease")
        if not timedelta(0) < self.ack_after < self.lease:
            raise ValueError("ack_after must be more than zero, and shorter than the lease")
        if not timedelta(0) <= self.report_interval < self.lease:
            raise ValueError("report_interval must be zero or more, and shorter than the lease")
        if not timedelta(0) < self.schedule_ahead < self.lease - self.ack_after:
            raise ValueError(
                "schedule_ahead must be more than zero, and shorter than lease - ack_after"
            )
