"""Schedules: a job that runs on a cron expression or an interval, kept in the store.

A :class:`Schedule` names a job, its input and owner, when it ticks (a cron
expression in a timezone, or a fixed interval) and what happens to the ticks
nobody saw (:class:`CatchUp`). The rules of time live here once: the next tick
after an instant (:func:`next_tick`), and which of the ticks due by now become
tasks (:func:`due_ticks`). Each tick's task has an id derived from the schedule
and the tick (:func:`tick_task_id`), so one tick can never make two tasks.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import AwareDatetime, BaseModel, ConfigDict, JsonValue

from queuestore.core.errors import InvalidTaskData
from queuestore.core.models import TaskStatus

MIN_EVERY: Final = timedelta(seconds=1)
"""The shortest interval a schedule may tick at."""

MAX_CATCH_UP: Final = 1000
"""The most missed ticks a schedule may run each of."""

SCHEDULE_KEY: Final = "queuestore.schedule"
"""The metadata key of a schedule's task that names its schedule."""

TICK_KEY: Final = "queuestore.tick"
"""The metadata key of a schedule's task that gives its tick (ISO 8601, UTC)."""


class CatchUp(StrEnum):
    """What a schedule does with the ticks no beat saw in time (beat stopped, paused store).

    ``skip``: a tick seen later than the grace is dropped; ``once``: all the
    ticks due make one task; ``each``: each makes its task, the latest
    ``catch_up_limit`` of them.
    """

    SKIP = "skip"
    ONCE = "once"
    EACH = "each"


class Schedule(BaseModel):
    """A job that runs on a cron expression or an interval; frozen, JSON-serialisable.

    Attributes:
        id: url-safe, chosen by the store unless given.
        name: the job each tick submits.
        input: the job's input, the same for every tick.
        owner: the owner of the schedule and of its tasks.
        cron: a cron expression (five fields, or six with seconds), read in ``timezone``.
        every: an interval, in place of ``cron``; ticks are ``every`` apart from
            ``anchor_at``.
        timezone: an IANA name such as ``Europe/Paris``.
        catch_up: see :class:`CatchUp`.
        catch_up_limit: with ``each``, the most missed ticks run.
        paused: a paused schedule does not tick; resumed, it ticks from then on.
        next_run_at: the next tick (None while paused).
        last_run_at: the tick (or the trigger) of its latest task.
        last_task_id: that task's id.
        last_status: that task's status at the read; None once the janitor deleted it.
        anchor_at: when its interval counts from: its creation, its last change of
            timing, or its resume.
        version: +1 on every write.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    input: dict[str, JsonValue] = {}
    owner: str | None = None
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    catch_up: CatchUp = CatchUp.SKIP
    catch_up_limit: int = 10
    paused: bool = False
    next_run_at: AwareDatetime | None = None
    last_run_at: AwareDatetime | None = None
    last_task_id: str | None = None
    last_status: TaskStatus | None = None
    anchor_at: AwareDatetime
    created_at: AwareDatetime
    updated_at: AwareDatetime
    version: int = 1


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule ticks: a cron expression in a timezone, or an interval from ``origin``."""

    cron: str | None
    every: timedelta | None
    timezone: str
    origin: datetime

    @classmethod
    def of(cls, schedule: Schedule) -> Timing:
        return cls(schedule.cron, schedule.every, schedule.timezone, schedule.anchor_at)


def check_timing(
    cron: object, every: object, timezone: object
) -> tuple[str | None, timedelta | None, str]:
    """The checked timing: exactly one of ``cron`` and ``every``, and a known timezone.

    Raises:
        InvalidTaskData: a bad cron expression, interval or timezone, or both or neither.
    """
    if (cron is None) == (every is None):
        raise InvalidTaskData("give cron or every, exactly one", field="cron")
    zone = check_timezone(timezone)
    if cron is not None:
        if not isinstance(cron, str) or len(cron) > 200:
            raise InvalidTaskData("must be a cron expression", field="cron")
        try:
            CronSim(cron, datetime.now(_zone(zone)))
        except CronSimError as exc:
            raise InvalidTaskData(
                f"{cron!r} is not a cron expression: {exc}", field="cron"
            ) from None
        return cron, None, zone
    if not isinstance(every, timedelta) or every < MIN_EVERY:
        raise InvalidTaskData(f"must be a timedelta of at least {MIN_EVERY}", field="every")
    return None, timedelta(milliseconds=every // timedelta(milliseconds=1)), zone


def check_timezone(value: object) -> str:
    """An IANA timezone name.

    Raises:
        InvalidTaskData: an unknown name.
    """
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidTaskData("must be an IANA timezone name", field="timezone")
    try:
        _zone(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidTaskData(f"no timezone named {value!r}", field="timezone") from None
    return value


def check_catch_up(value: object, limit: object) -> tuple[CatchUp, int]:
    """The checked catch-up policy and limit.

    Raises:
        InvalidTaskData: an unknown policy, or a limit outside 1..:data:`MAX_CATCH_UP`.
    """
    try:
        policy = CatchUp(str(value))
    except ValueError:
        known = ", ".join(CatchUp)
        raise InvalidTaskData(f"must be one of {known}", field="catch_up") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CATCH_UP:
        raise InvalidTaskData(
            f"must be an integer from 1 to {MAX_CATCH_UP}", field="catch_up_limit"
        )
    return policy, limit


@cache
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def next_tick(timing: Timing, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC."""
    if timing.every is not None:
        elapsed = (after - timing.origin) // timing.every + 1
        return (timing.origin + max(elapsed, 1) * timing.every).astimezone(UTC)
    assert timing.cron is not None
    local = after.astimezone(_zone(timing.timezone))
    return next(iter(CronSim(timing.cron, local))).astimezone(UTC)


def due_ticks(
    timing: Timing,
    *,
    policy: CatchUp,
    limit: int,
    first: datetime,
    now: datetime,
    grace: timedelta,
) -> tuple[list[datetime], datetime]:
    """Which ticks from ``first`` (the schedule's ``next_run_at``) to ``now`` make tasks,
    oldest first, and the next tick after ``now``.

    ``skip`` keeps only the latest tick, and only if it came no more than
    ``grace`` ago; ``once`` keeps only the latest (one task for all); ``each``
    keeps the latest ``limit``.
    """
    kept = 1 if policy is not CatchUp.EACH else limit
    ticks = [tick for tick in _ticks_back(timing, now, kept) if tick >= first]
    ticks.reverse()
    if policy is CatchUp.SKIP:
        ticks = [tick for tick in ticks if now - tick <= grace]
    return ticks, next_tick(timing, now)


def _ticks_back(timing: Timing, now: datetime, count: int) -> list[datetime]:
    """Up to ``count`` ticks at or before ``now``, the latest first."""
    if timing.every is not None:
        if now < timing.origin:
            return []
        latest = timing.origin + ((now - timing.origin) // timing.every) * timing.every
        ticks = (latest - n * timing.every for n in range(count))
        return [tick.astimezone(UTC) for tick in ticks if tick >= timing.origin]
    assert timing.cron is not None
    local = (now + timedelta(microseconds=1)).astimezone(_zone(timing.timezone))
    backwards = iter(CronSim(timing.cron, local, reverse=True))
    return [next(backwards).astimezone(UTC) for _ in range(count)]


def tick_task_id(schedule_id: str, tick: datetime) -> str:
    """The id of the task a schedule's tick makes: the same for the same tick, everywhere."""
    stamp = tick.astimezone(UTC).isoformat()
    digest = hashlib.sha256(f"{schedule_id}\x00{stamp}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
