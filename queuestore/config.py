"""Configuration from the environment (``QUEUESTORE_*``), with an embedded default.

With nothing set, tasks live in an SQLite file and the broker is Celery's
filesystem transport, both under ``.queuestore/`` in the working directory:
a bare machine runs the whole flow without any server.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from queuestore.core.concurrency import ConcurrencyLimits
from queuestore.core.flow import FlowControl, RateLimit
from queuestore.core.urls import UrlPolicy
from queuestore.core.validation import DEFAULT_MAX_PAYLOAD_BYTES

# What the settings build is imported where it is built: reading the settings
# (`queuestore tasks list`, `config show`) needs neither Celery nor the SQL store.
if TYPE_CHECKING:
    from celery import Celery

    from queuestore.push.deliverer import DeliveryPolicy
    from queuestore.push.signing import SigningSecret
    from queuestore.store.base import TaskStore
    from queuestore.store.sql import SqlTaskStore
    from queuestore.submit.queue import TaskQueue

EMBEDDED_HOME = Path(".queuestore")


def _seconds(value: Any) -> Any:
    """Read a bare number (as the environment gives it) as seconds."""
    if isinstance(value, str):
        try:
            return timedelta(seconds=float(value))
        except ValueError:
            return value
    return value


Duration = Annotated[timedelta, BeforeValidator(_seconds)]


def _json_text(value: Any) -> Any:
    """Read a JSON text (as the environment gives it, or as a caller may) as its value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _signing_secret(value: SecretStr) -> SecretStr:
    from queuestore.push.signing import SigningSecret

    SigningSecret.parse(value.get_secret_value())  # a ValueError that does not echo the key
    return value


SigningKeys = Annotated[
    list[Annotated[SecretStr, AfterValidator(_signing_secret)]], BeforeValidator(_json_text)
]


def _networks(value: list[str]) -> list[str]:
    UrlPolicy.allowing(*value)  # a ValueError naming the malformed network
    return value


Networks = Annotated[list[str], BeforeValidator(_json_text), AfterValidator(_networks)]

LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
    BeforeValidator(lambda value: value.upper() if isinstance(value, str) else value),
]


MASK = "********"


def mask_url_passwords(value: str) -> str:
    """``value`` with the password of each URL in it replaced by ``********``.

    Each of several ``;``-separated URLs (kombu's failover lists) is masked;
    everything else is kept as written.
    """
    return ";".join(_mask_one(part) for part in value.split(";"))


def _mask_one(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


RENAMED: Final = {
    "QUEUESTORE_DISPATCH_INTERVAL": "QUEUESTORE_SWEEP_INTERVAL",
    "QUEUESTORE_DISPATCH_GRACE": "QUEUESTORE_PUBLISH_GRACE",
    "QUEUESTORE_REDISPATCH_AFTER": "QUEUESTORE_REPUBLISH_AFTER",
    "QUEUESTORE_MAX_ATTEMPTS": "QUEUESTORE_MAX_LOST_RUNS",
}
"""Variables of earlier releases, and the ones that replaced them: set, they are refused
rather than silently ignored (see docs/howto/deploy.md, upgrading)."""


class RateLimitSetting(BaseModel):
    """One job's rate limit in ``rate_limits``: checked as :class:`~queuestore.RateLimit`."""

    model_config = {"extra": "forbid", "frozen": True}

    limit: PositiveInt
    per: PositiveFloat = 1.0
    key: str | None = None
    cost: PositiveInt | str = 1

    @model_validator(mode="after")
    def _a_rate_limit(self) -> RateLimitSetting:
        RateLimit(self.limit, per=timedelta(seconds=self.per), key=self.key, cost=self.cost)
        return self


class Settings(BaseSettings):
    """Every knob of a queuestore deployment; each reads ``QUEUESTORE_<NAME>``.

    Durations accept seconds (``30``) or ISO 8601 (``PT30S``). Its ``repr``
    hides the passwords in URLs, as secrets are hidden.
    """

    # Errors name the setting, never its value: it may be a secret or hold a password.
    model_config = SettingsConfigDict(
        env_prefix="QUEUESTORE_", extra="ignore", hide_input_in_errors=True
    )

    home: Path = Field(EMBEDDED_HOME, description="Folder of the embedded database and broker.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite in home.")
    database_pool_size: int = Field(
        2,
        ge=1,
        description="PostgreSQL connections each process keeps (its threads share them), "
        "beside one per LISTEN.",
    )
    database_prepare: bool = Field(
        True,
        description="Let psycopg prepare statements it runs often; false behind PgBouncer "
        "before 1.21 in transaction mode.",
    )
    database_listen: bool = Field(
        True,
        description="Wake waiters with LISTEN/NOTIFY; false behind a pooler in transaction "
        "mode (PgBouncer): they poll.",
    )
    broker_url: str = Field("filesystem://", description="Celery broker URL.")
    require_owner: bool = Field(
        False, description="Refuse tasks without an owner; anonymous callers see nothing."
    )
    max_payload_bytes: int = Field(
        DEFAULT_MAX_PAYLOAD_BYTES,
        description="Largest input, result, metadata or artifact, in bytes of compact UTF-8 JSON.",
    )
    cursor_secret: SecretStr | None = Field(
        None,
        description="Key that signs pagination cursors; share it between processes. "
        "Unset: a random key per process.",
    )
    auto_migrate: bool | None = Field(
        None, description="Migrate the schema on start; default: only for SQLite."
    )

    lease: Duration = Field(
        timedelta(seconds=30),
        description="How long a run holds its task without a heartbeat before the reaper "
        "may retry it.",
    )
    heartbeat_interval: Duration = Field(
        timedelta(seconds=1), description="How often a running job renews its lease."
    )
    report_interval: Duration = Field(
        timedelta(milliseconds=200),
        description="How often a job's progress and artifacts are written; 0: at once.",
    )
    max_lost_runs: int = Field(
        3,
        ge=1,
        description="Runs a task may lose to dying workers before it fails with WorkerLost.",
    )
    terminate_on_cancel: bool = Field(
        True,
        description="Cancel interrupts a running job at once (prefork pool); false for "
        "solo, threads or gevent pools.",
    )
    timeout_grace: Duration = Field(
        timedelta(seconds=10),
        description="How long a run past its timeout has to stop once interrupted; then a "
        "prefork pool process kills itself (the task is failed at its timeout either way).",
    )
    timeout_interrupt: bool = Field(
        True,
        description="Raise RunTimedOut in the thread of a job past its timeout (every pool); "
        "false: the job sees it only at its next report or step.",
    )

    janitor_ttl: Duration = Field(
        timedelta(days=1), description="How long a finished task is kept before the janitor."
    )
    janitor_interval: Duration = Field(
        timedelta(minutes=1), description="How often beat runs the janitor."
    )
    janitor_batch_size: int = Field(
        1000, ge=1, description="Rows the janitor deletes per transaction."
    )
    reaper_interval: Duration = Field(
        timedelta(seconds=10), description="How often beat runs the reaper (expired leases)."
    )
    sweep_interval: Duration = Field(
        timedelta(seconds=10),
        description="How often beat runs the sweep (tasks never published).",
    )
    publish_grace: Duration = Field(
        timedelta(seconds=10),
        description="How old an unpublished task must be before the sweep publishes it.",
    )
    schedules_interval: Duration = Field(
        timedelta(seconds=5),
        description="How often beat makes the tasks of the schedules whose tick came.",
    )
    schedules_grace: Duration = Field(
        timedelta(seconds=30),
        description="How late a schedule's tick may be made and still run under the skip policy.",
    )
    ack_after: Duration | None = Field(
        None,
        description="How long a job runs before its message is acknowledged (its task "
        "claimed), so no broker timeout redelivers it; unset: half the lease.",
    )
    republish_after: Duration | None = Field(
        timedelta(hours=1),
        description="Publish again a task published this long ago and never claimed; unset: never.",
    )
    priorities: bool = Field(
        False,
        description="Brokers deliver waiting tasks by priority (submit's priority, 0-9); "
        "RabbitMQ queues are declared with x-max-priority, so an existing queue must be "
        "deleted or renamed.",
    )
    owner_concurrency: PositiveInt | None = Field(
        None,
        description="The most running tasks of one owner; the others wait in the store, "
        "holding no worker. Unset: no limit. Tasks without an owner are not limited by it.",
    )
    job_concurrency: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="The most running tasks of a job, whatever their owners, as a JSON "
        'object mapping job names to limits (`{"reports.build": 2}`).',
    )
    rate_limits: Annotated[dict[str, RateLimitSetting], BeforeValidator(_json_text)] = Field(
        default_factory=dict,
        description="The most starts of a job per period, across every worker, as a JSON "
        'object mapping job names to `{"limit": 10, "per": 1.0}` (seconds), with an '
        'optional `"key"` (`"owner"` or `"input.<field>"`: a limit per key) and `"cost"` '
        '(units a start costs: a number or `"input.<field>"`).',
    )
    pause_recheck: Duration = Field(
        timedelta(seconds=10),
        description="How often a task waiting for a pause with no end is tried again; "
        "a resume is heard within it.",
    )
    schedule_ahead: Duration | None = Field(
        None,
        description="How long before a scheduled task's start its message is published, "
        "with a countdown; longer than the sweep interval, shorter than the lease minus "
        "ack_after; unset: 12 s, or less where the lease leaves less.",
    )

    # Push
    webhook_secrets: SigningKeys = Field(
        default_factory=list,
        description="Keys that sign the callbacks (Standard Webhooks, `whsec_<base64>`), as "
        "a JSON list; each delivery carries one signature per key, so add the new key first "
        "to rotate. Empty: deliveries are unsigned. `queuestore deliver --new-secret` makes one.",
    )
    callback_allow_networks: Networks = Field(
        default_factory=list,
        description="Networks callbacks may reach although private, loopback or link-local "
        '(refused otherwise), as a JSON list: `["10.0.0.0/8", "127.0.0.1"]`.',
    )
    delivery_timeout: float = Field(
        10.0, gt=0, description="Seconds one callback call may take, its connection included."
    )
    delivery_concurrency: PositiveInt = Field(
        8, description="Callback calls a `queuestore deliver` process makes at once."
    )
    delivery_backoff: float = Field(
        1.0, gt=0, description="Seconds before a failed delivery's first retry; then doubled."
    )
    delivery_backoff_max: float = Field(
        300.0, gt=0, description="The longest wait between two tries of a delivery, seconds."
    )
    delivery_max_age: Duration = Field(
        timedelta(hours=24),
        description="A delivery still failing this long after its change is given up (dead).",
    )
    delivery_lease: Duration = Field(
        timedelta(seconds=60),
        description="How long a delivery taken by a deliverer is its own; one that dies "
        "mid-call leaves it to the others after this. Longer than delivery_timeout.",
    )

    # HTTP API
    http_host: str = Field("127.0.0.1", description="Address `queuestore serve` listens on.")
    http_port: int = Field(8000, ge=0, le=65535, description="Port `queuestore serve` listens on.")
    http_tokens: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description=(
            "Static bearer tokens of the HTTP API, as a JSON object mapping each token to "
            "its principal (the owner of the tasks it creates and sees)."
        ),
    )
    http_token_verifier: str | None = Field(
        None,
        description=(
            "Import path (`module:name`) of a callable that maps a bearer token to its "
            "principal, or None when the token is invalid; it may be async. "
            "Used instead of http_tokens."
        ),
    )
    http_idempotency_secret: SecretStr | None = Field(
        None,
        description="Key that derives an anonymous caller's task id from its Idempotency-Key; "
        "share it between API processes. Unset: the cursor secret, else a random key per "
        "process.",
    )
    http_trusted_header: str | None = Field(
        None,
        description=(
            "Request header naming the principal, set by an authenticating proxy in front "
            "of the API (e.g. X-Forwarded-User). Only set it when every request comes "
            "through that proxy, which must drop the header from clients."
        ),
    )
    http_admins: Annotated[list[str], BeforeValidator(_json_text)] = Field(
        default_factory=list,
        description=(
            "Principals of the HTTP API that operate it, as a JSON list "
            "(`[\"ops@example.com\"]`): a token's principal, or the trusted header's value. "
            "They see and act on every owner's tasks and read the operator's views; every "
            "other principal sees only its own tasks. Each of their actions is logged with "
            "who took it."
        ),
    )
    http_max_body_bytes: int = Field(
        3 * DEFAULT_MAX_PAYLOAD_BYTES,
        ge=1024,
        description="Largest request body the HTTP API reads; a larger one gets 413.",
    )
    http_retry_after: int = Field(
        5, ge=1, description="Seconds in Retry-After when the store is unavailable (503)."
    )

    # Operations
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of a worker's Prometheus /metrics endpoint; unset: no endpoint.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Worker log lines as text, or as one JSON object per line.",
    )
    log_level: LogLevel | None = Field(
        None,
        description="Level of worker and beat logs; unset: the command's --loglevel "
        "(`queuestore worker`/`beat`: INFO, `celery`: WARNING).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_renamed_variables(cls, data: Any) -> Any:
        """Refuse a variable an earlier release read under another name."""
        found = sorted(old for old in RENAMED if old in os.environ)
        if found:
            names = ", ".join(f"{old} is now {RENAMED[old]}" for old in found)
            raise ValueError(f"renamed settings: {names}; set the new names instead")
        return data

    @property
    def flow(self) -> FlowControl:
        """The flow control ``rate_limits`` sets."""
        return FlowControl(
            rates={
                name: RateLimit(
                    rate.limit, per=timedelta(seconds=rate.per), key=rate.key, cost=rate.cost
                )
                for name, rate in self.rate_limits.items()
            }
        )

    @property
    def limits(self) -> ConcurrencyLimits:
        """The concurrency limits ``owner_concurrency`` and ``job_concurrency`` set."""
        return ConcurrencyLimits(per_owner=self.owner_concurrency, per_job=self.job_concurrency)

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to an SQLite file inside ``home``."""
        return self.database_url or f"sqlite:///{self.home / 'queuestore.db'}"

    @property
    def url_policy(self) -> UrlPolicy:
        """The callback URLs accepted: public addresses, and ``callback_allow_networks``."""
        return UrlPolicy.allowing(*self.callback_allow_networks)

    @property
    def delivery_policy(self) -> DeliveryPolicy:
        """How deliverers call receivers: the ``delivery_*`` settings."""
        from queuestore.push.deliverer import DeliveryPolicy

        return DeliveryPolicy(
            timeout=self.delivery_timeout,
            backoff=self.delivery_backoff,
            backoff_max=self.delivery_backoff_max,
            max_age=self.delivery_max_age,
            lease=self.delivery_lease,
        )

    @property
    def signing_secrets(self) -> list[SigningSecret]:
        """``webhook_secrets``, parsed."""
        from queuestore.push.signing import SigningSecret

        return [SigningSecret.parse(secret.get_secret_value()) for secret in self.webhook_secrets]

    def make_store(self) -> SqlTaskStore:
        """A store on the configured database, migrated first when ``auto_migrate`` says so."""
        from queuestore.store.sql import SqlTaskStore

        # Built from the URL, the store owns its engine: close() releases the pool.
        store = SqlTaskStore(
            self.resolved_database_url,
            pool_size=self.database_pool_size,
            prepare=self.database_prepare,
            listen=self.database_listen,
            url_policy=self.url_policy,
            require_owner=self.require_owner,
            max_payload_bytes=self.max_payload_bytes,
            cursor_secret=(
                self.cursor_secret.get_secret_value() if self.cursor_secret is not None else None
            ),
        )
        migrate = self.auto_migrate
        if migrate is None:
            migrate = store.engine.dialect.name == "sqlite"
        if migrate:
            store.migrate()
        return store

    def configure(self, app: Celery) -> Celery:
        """Apply :meth:`celery_config` to ``app`` (beat keeps its schedule in ``home``).

        Its worker and beat also log as ``log_format`` and ``log_level`` say,
        each line about a task carrying the task's id and job, and its worker
        serves Prometheus metrics when ``metrics_port`` is set.
        """
        from queuestore.core.logs import install_celery_logging
        from queuestore.metrics import prepare_multiprocess_dir

        app.conf.update(self.celery_config())
        app.conf.beat_schedule_filename = str(self.home / "celerybeat-schedule")
        install_celery_logging(self.log_format, self.log_level)
        if self.metrics_port is not None:
            prepare_multiprocess_dir()
            try:
                from queuestore.metrics.prometheus import serve_worker_metrics
            except ImportError as exc:
                raise ImportError(
                    f"metrics_port needs the metrics extra (queuestore[metrics]): {exc}"
                ) from exc

            serve_worker_metrics(app, self.metrics_port)
        return app

    def make_queue(
        self, app: Celery, store: TaskStore | None = None, *, beat: bool = True
    ) -> TaskQueue:
        """A :class:`TaskQueue` on ``app`` with these settings' lease, retries and publishing.

        Args:
            store: the store to use; by default :meth:`make_store`.
            beat: also install the janitor, reaper and sweep beat schedule.
        """
        from queuestore.submit.queue import TaskQueue

        queue = TaskQueue(
            store if store is not None else self.make_store(),
            app,
            lease=self.lease,
            heartbeat_interval=self.heartbeat_interval,
            report_interval=self.report_interval,
            max_lost_runs=self.max_lost_runs,
            terminate_on_cancel=self.terminate_on_cancel,
            publish_grace=self.publish_grace,
            republish_after=self.republish_after,
            ack_after=self.ack_after,
            schedule_ahead=self.schedule_ahead,
            priorities=self.priorities,
            limits=self.limits,
            timeout_grace=self.timeout_grace,
            timeout_interrupt=self.timeout_interrupt,
            flow=self.flow,
            pause_recheck=self.pause_recheck,
        )
        if beat:
            queue.install_beat_schedule(
                janitor_ttl=self.janitor_ttl,
                janitor_interval=self.janitor_interval,
                janitor_batch_size=self.janitor_batch_size,
                reaper_interval=self.reaper_interval,
                sweep_interval=self.sweep_interval,
                schedules_interval=self.schedules_interval,
                schedules_grace=self.schedules_grace,
            )
        return queue

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, mask_url_passwords(value) if isinstance(value, str) else value

    def celery_config(self) -> dict[str, Any]:
        """Celery settings for durable jobs: late acks, one message at a time, no results."""
        config: dict[str, Any] = {
            "broker_url": self.broker_url,
            "task_acks_late": True,
            "worker_prefetch_multiplier": 1,
            "task_ignore_result": True,
            "task_serializer": "json",
            "accept_content": ["json"],
            "broker_connection_retry_on_startup": True,
            "worker_hijack_root_logger": False,
            "enable_utc": True,
        }
        if self.broker_url.startswith("filesystem://"):
            # Kombu's own filesystem transport can hand a consumer a half-written
            # message under concurrent publishers; ours publishes atomically.
            from queuestore.broker.filesystem import TRANSPORT as FILESYSTEM_TRANSPORT

            config["broker_transport"] = FILESYSTEM_TRANSPORT
            config["broker_transport_options"] = self.filesystem_broker_options()
        elif self.priorities:
            from queuestore.broker.transports import priority_config

            config |= priority_config(self.broker_url)
        return config

    def filesystem_broker_options(self) -> dict[str, Any]:
        """Folders of the embedded broker (created if missing) and a short poll."""
        root = self.home / "broker"
        folders = {
            "data_folder_in": root / "queue",
            "data_folder_out": root / "queue",
            "processed_folder": root / "processed",
            "control_folder": root / "control",
        }
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        return {key: str(folder) for key, folder in folders.items()} | {"polling_interval": 0.1}
