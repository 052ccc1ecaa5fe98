"""Flow control: rate limits on starts, and pauses of a job, an owner or a key.

``FlowControl(rates={"llm.call": RateLimit(10, per=timedelta(seconds=1),
key="input.provider")})`` lets at most ten tasks of ``llm.call`` start in any
one second for each provider, across every worker. A rate limit counts
*starts* (claims), not running tasks (that is :class:`ConcurrencyLimits`):
the store keeps a log of the starts of each bucket (a job, or a job and a key)
over the last period, and a claim is admitted in the same atomic decision
only while the costs logged in the period, plus its own, fit the limit. A
sliding log, not a token bucket or GCRA: it holds the limit over *every*
window of the period, wherever the window starts, and it still lets a burst
of the full limit through at once.

A task the limit refuses waits in the store, unclaimed, with no broker
message: it is given the time a start of its bucket frees (``run_at``), each
waiting task a later one, so that they come back one by one rather than all
together, and the sweep publishes it then, as a scheduled start.

A *pause* stops every start of a job name, an owner, or a key (the key a rate
limit takes from the task) until a time, or until it is resumed; running tasks
finish. A job that meets a provider's limit raises :class:`RetryAfter` (or
calls ``ctx.pause``): its key is paused until then, and the task runs again
after it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from queuestore.core.models import Task

_FIELD = re.compile(r"^input\.([A-Za-z0-9_\-]{1,100})$")
"""A key or cost taken from a field of the task's input: ``input.<field>``."""


def input_field(spec: str) -> str | None:
    """The input field ``spec`` names (``input.provider``), or None when it is not one."""
    match = _FIELD.match(spec)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` units of starts per ``per``, for one job (per key with ``key``).

    Args:
        limit: the units that may start in any window of ``per``.
        per: the period.
        key: where each task's key comes from: ``"owner"``, or ``"input.<field>"``
            (the field's value as text). Each key has its own limit; a task without
            one shares the limit of the empty key. None: one limit for the job.
        cost: the units one start costs: a number, or ``"input.<field>"`` (an
            integer in the task's input; 1 when absent). A cost above ``limit``
            counts as ``limit``.

    Raises:
        ValueError: a limit, period or cost out of range, or a key or cost that
            names nothing a task has.
    """

    limit: int
    per: timedelta = timedelta(seconds=1)
    key: str | None = None
    cost: int | str = 1

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError("a rate limit must be an integer of 1 or more")
        if not isinstance(self.per, timedelta) or self.per < timedelta(milliseconds=1):
            raise ValueError("a rate limit's period must be 1 ms or more")
        if self.key is not None and self.key != "owner" and input_field(self.key) is None:
            raise ValueError('a rate limit\'s key is "owner" or "input.<field>"')
        if isinstance(self.cost, str):
            if input_field(self.cost) is None:
                raise ValueError('a rate limit\'s cost is a number or "input.<field>"')
        elif isinstance(self.cost, bool) or not isinstance(self.cost, int) or self.cost < 1:
            raise ValueError("a rate limit's cost must be an integer of 1 or more")

    @property
    def period_ms(self) -> int:
        """The period in whole milliseconds."""
        return max(1, round(self.per.total_seconds() * 1000))


@dataclass(frozen=True, repr=False, eq=False)
class FlowControl:
    """The rate limits of a queue, by job name.

    A job not named here starts as fast as workers take it; pauses apply to
    every job whatever this says.
    """

    rates: Mapping[str, RateLimit] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rates = dict(self.rates)
        for name, rate in rates.items():
            if not isinstance(name, str) or not name:
                raise ValueError("rates names jobs by their names, non-empty texts")
            if not isinstance(rate, RateLimit):
                raise TypeError(f"rates[{name!r}] must be a queuestore.RateLimit")
        object.__setattr__(self, "rates", MappingProxyType(dict(sorted(rates.items()))))

    def __repr__(self) -> str:
        return f"FlowControl(rates={dict(self.rates)!r})"

    def __bool__(self) -> bool:
        return bool(self.rates)

    def __hash__(self) -> int:
        return hash(tuple(self.rates.items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlowControl):
            return NotImplemented
        return dict(self.rates) == dict(other.rates)

    def key_of(self, task: Task) -> str | None:
        """The task's key, as its job's rate limit takes it; None without one."""
        rate = self.rates.get(task.name)
        if rate is None or rate.key is None:
            return None
        if rate.key == "owner":
            return task.owner
        return _as_text(task.input.get(input_field(rate.key) or ""))

    def bucket_of(self, task: Task) -> str | None:
        """The bucket whose starts the task's rate limit counts: ``job`` or ``job|key``."""
        rate = self.rates.get(task.name)
        if rate is None:
            return None
        if rate.key is None:
            return task.name
        return f"{task.name}|{self.key_of(task) or ''}"

    def cost_of(self, task: Task) -> int:
        """The units a start of ``task`` costs, at most its limit."""
        rate = self.rates.get(task.name)
        if rate is None:
            return 0
        cost = rate.cost
        if isinstance(cost, str):
            given = task.input.get(input_field(cost) or "")
            cost = given if isinstance(given, int) and not isinstance(given, bool) else 1
        return max(1, min(cost, rate.limit))

    def use(self, counted: Mapping[str, tuple[int, datetime | None]]) -> list[RateUse]:
        """How much of each rate limit is used, from ``counted``: by bucket, the units
        its starts still counting cost and the latest turn given to a task waiting in it.

        One entry for a job's one limit (used or not), one per key in use or with a
        turn to come for a keyed limit; by job, then key.
        """
        uses: list[RateUse] = []
        for name, rate in self.rates.items():
            if rate.key is None:
                used, turn = counted.get(name, (0, None))
                uses.append(RateUse(name, None, used, rate.limit, rate.per, turn))
                continue
            prefix = f"{name}|"
            for bucket in sorted(b for b in counted if b.startswith(prefix)):
                used, turn = counted[bucket]
                key = bucket.removeprefix(prefix)
                uses.append(RateUse(name, key, used, rate.limit, rate.per, turn))
        return uses


@dataclass(frozen=True, slots=True)
class RateUse:
    """The use of a rate limit in its current period, for a job or one of its keys.

    ``used`` units of ``limit`` per ``per``: the costs of the starts of the last
    period (a start counts for one period after it). ``next_turn`` is the latest
    turn given to a task of the bucket waiting for a start, while it is to come:
    tasks wait for turns until then (None: no task waits for one).
    """

    job: str
    key: str | None
    used: int
    limit: int
    per: timedelta
    next_turn: datetime | None

    def as_json(self) -> dict[str, Any]:
        """The use as a JSON object (``per`` in seconds)."""
        return {
            "job": self.job,
            "key": self.key,
            "used": self.used,
            "limit": self.limit,
            "per_seconds": self.per.total_seconds(),
            "next_turn": None if self.next_turn is None else self.next_turn.isoformat(),
        }


def _as_text(value: Any) -> str | None:
    """An input value as the SQL stores read it for a key: text, and integers as digits."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


NO_FLOW = FlowControl()
"""No rate limit: the default."""


class PauseKind(StrEnum):
    """What a pause stops: every start of a job name, of an owner, or of a key."""

    JOB = "job"
    OWNER = "owner"
    KEY = "key"


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause in force: no task of ``kind`` ``value`` starts until ``until`` (None: resumed)."""

    kind: PauseKind
    value: str
    until: datetime | None
    reason: str | None
    created_at: datetime

    @property
    def target(self) -> str:
        """``kind:value``, as the store keys it."""
        return target(self.kind, self.value)

    def as_json(self) -> dict[str, Any]:
        """The pause as a JSON object."""
        return {
            "kind": self.kind.value,
            "value": self.value,
            "until": None if self.until is None else self.until.isoformat(),
            "reason": self.reason,
            "created_at": self.created_at.isoformat(),
        }


def target(kind: PauseKind | str, value: str) -> str:
    """The key of a pause of ``kind`` ``value`` in the store."""
    return f"{PauseKind(kind).value}:{value}"


class RetryAfter(Exception):
    """Raised by a job that met a provider's limit: pause its key, run again after.

    ``raise RetryAfter(30)``, ``RetryAfter(timedelta(...))``, ``RetryAfter(when)``
    or ``RetryAfter(response.headers["Retry-After"])`` (seconds or an HTTP date).
    No task of ``key`` (by default the task's own key, as its job's rate limit
    takes it, else its job name) starts anywhere until then, and this task
    runs again after it, from the start of the job. It is not a failure: no
    error is kept and no retry counted.

    Raises:
        ValueError: ``after`` is neither a duration, a time nor a Retry-After value.
    """

    def __init__(
        self,
        after: float | timedelta | datetime | str,
        *,
        key: str | None = None,
        message: str | None = None,
    ) -> None:
        self.until = retry_after(after)
        self.key = key
        super().__init__(message or f"rate limited until {self.until.isoformat()}")


def retry_after(value: float | timedelta | datetime | str, now: datetime | None = None) -> datetime:
    """The time ``value`` means: seconds from now, a duration, a time, or an HTTP
    ``Retry-After`` header value (delta-seconds or an HTTP date).

    Raises:
        ValueError: a value that is none of those, or a time without a zone.
    """
    now = now or datetime.now(UTC)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a Retry-After time must be timezone-aware")
        return value.astimezone(UTC)
    if isinstance(value, timedelta):
        return now + max(value, timedelta(0))
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return now + timedelta(seconds=int(text))
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            raise ValueError(f"not a Retry-After value: {value!r}") from None
        return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"not a Retry-After value: {value!r}")
    return now + timedelta(seconds=max(float(value), 0.0))
