"""Real processes for the integration tests: workers, beat, and servers the tests own.

Every process is started in a session of its own, so that stopping or killing
it (SIGTERM, then SIGKILL after a timeout) reaches its children -- the prefork
pool and the embedded beat -- and nothing else. Waits are bounded polls that
fail with the tail of every log involved.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest
from celery import Celery

from queuestore import Settings, SqlTaskStore, StoreUnavailable, Task, TaskQueue, TaskStatus
from queuestore.push.signing import SigningSecret
from queuestore.run.tether import tethered

HERE = Path(__file__).resolve().parent
APP_MODULE = "integration_app"
"""The ``-A`` module of the workers: the ``workers`` app plus the test jobs."""

FAST = {
    "QUEUESTORE_LEASE": "3",
    "QUEUESTORE_HEARTBEAT_INTERVAL": "0.25",
    "QUEUESTORE_MAX_LOST_RUNS": "3",
    "QUEUESTORE_REAPER_INTERVAL": "1",
    "QUEUESTORE_SWEEP_INTERVAL": "1",
    "QUEUESTORE_PUBLISH_GRACE": "1",
    "QUEUESTORE_JANITOR_TTL": "3600",
    "QUEUESTORE_JANITOR_INTERVAL": "1",
    "QUEUESTORE_AUTO_MIGRATE": "false",
}
"""Short leases and intervals, so that reaping, sweeping and cleaning take seconds."""

STARTUP_TIMEOUT = 60.0
TASK_TIMEOUT = 45.0


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    logs: Iterable[LoggedProcess] = (),
    interval: float = 0.05,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}{tails(logs)}")
        time.sleep(interval)


def unavailable(message: str) -> NoReturn:
    """Skip the test on a developer's machine; fail it under ``CI``.

    The rule of ``require_service`` in tests/conftest.py, for what a test needs
    installed rather than running: CI must never go green by skipping.
    """
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def count_lines(process: LoggedProcess, *needles: str) -> int:
    """How many lines of ``process``'s log contain every one of ``needles``."""
    return sum(all(n in line for n in needles) for line in process.text().splitlines())


def tails(processes: Iterable[LoggedProcess], lines: int = 40) -> str:
    return "".join(process.tail(lines) for process in processes)


@dataclass
class LoggedProcess:
    """A process we started in its own session, its output going to a log file.

    It is tethered to the test process: if pytest dies (a timeout's SIGKILL,
    a crash), the worker, beat or server ends too.
    """

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(
        cls, name: str, command: list[str], *, env: dict[str, str], cwd: Path, log: Path
    ) -> LoggedProcess:
        with log.open("ab") as output:
            process = subprocess.Popen(
                tethered(command),
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(name, process, log)

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        last = "\n".join(self.text().splitlines()[-lines:])
        return f"\n--- last {lines} lines of {self.name} (pid {self.pid}) ---\n{last}\n"

    def alive(self) -> bool:
        return self.process.poll() is None

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is this process or one of its children (same process group)."""
        try:
            return os.getpgid(pid) == self.pid
        except ProcessLookupError:
            return False

    def kill(self) -> None:
        """SIGKILL the whole process group at once: a worker dying without warning."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process (a warm shutdown), then SIGKILL its group after ``timeout``."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        # Whatever is left of the group (pool processes, embedded beat) goes too.
        self._signal_group(signal.SIGKILL)
        if self.alive():
            self.process.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP the whole process group: a long GC pause, a frozen VM."""
        self._signal_group(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the process group after :meth:`freeze`."""
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, signum: int) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)


SIGNING_SECRET = SigningSecret.parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
"""The deliverers' signing secret (Standard Webhooks' example key)."""

PUSH = {
    "QUEUESTORE_CALLBACK_ALLOW_NETWORKS": '["127.0.0.1"]',
    "QUEUESTORE_WEBHOOK_SECRETS": json.dumps([str(SIGNING_SECRET)]),
    "QUEUESTORE_DELIVERY_TIMEOUT": "2",
    "QUEUESTORE_DELIVERY_BACKOFF": "0.2",
    "QUEUESTORE_DELIVERY_BACKOFF_MAX": "1",
    "QUEUESTORE_DELIVERY_LEASE": "3",
    "QUEUESTORE_LOG_LEVEL": "INFO",
}
"""A deliverer's settings in these tests: quick to time out, retry and take a lost lease."""


@dataclass
class Receiver:
    """A webhook receiver process (``receiver.py``) and the requests it logged.

    ``stop`` and ``start`` again take it down and bring it back on the same port.
    """

    log: Path
    status: int = 204
    delay: float = 0.0
    port: int = 0
    process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        command = [
            sys.executable,
            str(HERE / "receiver.py"),
            str(self.log),
            "--port",
            str(self.port),
        ]
        command += ["--status", str(self.status), "--delay", str(self.delay)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.process.stdout.close()  # it prints nothing more
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
            self.process = None

    def requests(self) -> list[dict[str, Any]]:
        """Every request received: ``received_at``, ``path``, ``headers``, ``body``."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def events(self) -> list[dict[str, Any]]:
        """The bodies received, parsed."""
        return [json.loads(request["body"]) for request in self.requests()]

    def wait_for(self, count: int, timeout: float = TASK_TIMEOUT) -> list[dict[str, Any]]:
        """The requests, once ``count`` of them arrived."""

        def arrived() -> list[dict[str, Any]] | None:
            got = self.requests()
            return got if len(got) >= count else None

        return list(wait_for(arrived, timeout=timeout, what=f"{count} requests at the receiver"))


@dataclass
class Deployment:
    """One queuestore deployment under test: a database, a broker, a queue, a home.

    Workers get it through ``QUEUESTORE_*`` variables; the test process builds
    its own :class:`TaskQueue` from the same settings, as a web app would.
    """

    root: Path
    database_url: str
    broker_url: str
    overrides: dict[str, str] = field(default_factory=dict)
    queue_name: str = field(default_factory=lambda: f"qs-it-{uuid.uuid4().hex[:12]}")
    processes: list[LoggedProcess] = field(default_factory=list)
    _queue: TaskQueue | None = None

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.records.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def records(self) -> Path:
        return self.root / "records"

    def env(self, **extra: str) -> dict[str, str]:
        inherited = {
            key: value for key, value in os.environ.items() if not key.startswith("QUEUESTORE_")
        }
        python_path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        return (
            inherited
            | FAST
            | self.overrides
            | extra
            | {
                "QUEUESTORE_HOME": str(self.home),
                "QUEUESTORE_DATABASE_URL": self.database_url,
                "QUEUESTORE_BROKER_URL": self.broker_url,
                "QUEUESTORE_TEST_QUEUE": self.queue_name,
                "QUEUESTORE_TEST_RECORDS": str(self.records),
                "PYTHONPATH": python_path,
            }
        )

    def settings(self) -> Settings:
        """The settings the workers read, given explicitly: this process's env is not theirs."""
        values = {
            key.removeprefix("QUEUESTORE_").lower(): value
            for key, value in self.env().items()
            if key.startswith("QUEUESTORE_") and not key.startswith("QUEUESTORE_TEST_")
        }
        return Settings(**values)

    @property
    def queue(self) -> TaskQueue:
        """The caller's side: a TaskQueue on the same store and broker as the workers."""
        if self._queue is None:
            settings = self.settings()
            app = settings.configure(Celery(f"caller-{self.queue_name}", set_as_current=False))
            app.conf.task_default_queue = self.queue_name
            self._queue = settings.make_queue(app, beat=False)
        return self._queue

    def migrate(self) -> None:
        store = SqlTaskStore(self.database_url)
        try:
            store.migrate()
        finally:
            store.close()

    # -- processes ------------------------------------------------------------

    def start_worker(
        self,
        *,
        pool: str = "prefork",
        concurrency: int = 2,
        beat: bool = False,
        wait: bool = True,
        app: str = APP_MODULE,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        options: Iterable[str] = (),
        **extra_env: str,
    ) -> LoggedProcess:
        """A ``celery worker`` on this deployment's queue (``-B`` for embedded beat).

        ``app`` is the Celery app's module, imported from ``cwd`` (the deployment's
        root by default); ``env`` replaces :meth:`env`'s for a deployment of its own;
        ``options`` are more ``celery worker`` options.
        """
        node = f"it-{uuid.uuid4().hex[:8]}"
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            f"--hostname={node}@%h",
            "--loglevel=INFO",
            *options,
        ]
        if beat:
            command += ["--beat", f"--schedule={self.home / f'beat-{node}'}"]
        worker = LoggedProcess.start(
            f"worker {node}",
            command,
            env=self.env(**extra_env) if env is None else env | extra_env,
            cwd=self.root if cwd is None else cwd,
            log=self.root / f"{node}.log",
        )
        self.processes.append(worker)
        if wait:
            self.wait_ready(worker, f"{node}@")
        return worker

    def start_beat(self) -> LoggedProcess:
        """A separate ``celery beat`` process, which outlives any one worker."""
        node = f"beat-{uuid.uuid4().hex[:8]}"
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            APP_MODULE,
            "beat",
            f"--schedule={self.home / node}",
            "--loglevel=INFO",
        ]
        beat = LoggedProcess.start(
            node, command, env=self.env(), cwd=self.root, log=self.root / f"{node}.log"
        )
        self.processes.append(beat)
        return beat

    def start_deliverer(self, name: str = "deliver", **extra_env: str) -> LoggedProcess:
        """A ``queuestore deliver`` process, signing with :data:`SIGNING_SECRET`.

        The deployment's callbacks may reach 127.0.0.1; attempts time out,
        back off and lease quickly (see :data:`PUSH`).
        """
        node = f"{name}-{uuid.uuid4().hex[:8]}"
        deliverer = LoggedProcess.start(
            node,
            [sys.executable, "-m", "queuestore", "deliver"],
            env=self.env(**(PUSH | extra_env)),
            cwd=self.root,
            log=self.root / f"{node}.log",
        )
        self.processes.append(deliverer)
        self.wait_log(deliverer, "delivering callbacks from")
        return deliverer

    def wait_ready(self, worker: LoggedProcess, node: str) -> None:
        def ready() -> bool:
            if not worker.alive():
                pytest.fail(f"{worker.name} exited with {worker.process.returncode}{worker.tail()}")
            return any(
                node in line and line.rstrip().endswith("ready.")
                for line in worker.text().splitlines()
            )

        wait_for(ready, timeout=STARTUP_TIMEOUT, what=f"{worker.name} to be ready", logs=[worker])

    def close(self) -> None:
        """Stop every process we started, drop our queue from a shared broker, close pools."""
        for process in self.processes:
            process.thaw()  # a frozen process would sit out its SIGTERM
            process.stop()
        self.processes.clear()
        if self._queue is None:
            return
        app = self._queue.app
        if not self.broker_url.startswith("filesystem://"):
            # Best effort: the broker may be one a test stopped on purpose.
            with suppress(Exception), app.connection_for_write() as connection:
                connection.default_channel.queue_delete(self.queue_name)
        app.close()
        self._queue.store.close()
        self._queue = None

    # -- observing --------------------------------------------------------------

    def records_of(self, task_id: str) -> list[str]:
        """The events the test jobs recorded for a task: ``<attempt> <event> <pid>`` lines."""
        path = self.records / task_id
        return path.read_text().splitlines() if path.exists() else []

    def messages_of(self, task_id: str) -> list[str]:
        """``published`` and ``received`` lines: each publish and each delivery of its message."""
        path = self.records / f"{task_id}.messages"
        return path.read_text().split() if path.exists() else []

    def events_of(self, task_id: str) -> list[str]:
        """The records without pids: ``<attempt> <event>``."""
        return [line.rsplit(" ", 1)[0] for line in self.records_of(task_id)]

    def logs(self) -> str:
        return tails(self.processes)

    def wait_status(
        self, task_id: str, *statuses: TaskStatus, timeout: float = TASK_TIMEOUT
    ) -> Task:
        """Wait until the task is in one of ``statuses``; fail with the task and logs if not."""
        wanted = set(statuses)
        seen: list[Task] = []

        def reached() -> Task | None:
            try:
                task = self.queue.store.get(task_id)
            except StoreUnavailable:
                return None  # a caller polling through a database restart sees one failure
            seen[:] = [task]
            return task if task.status in wanted else None

        deadline = time.monotonic() + timeout
        while (task := reached()) is None:
            if time.monotonic() >= deadline:
                last = seen[0].model_dump_json(indent=1) if seen else "(never read)"
                pytest.fail(
                    f"task {task_id} did not reach {sorted(wanted)} within {timeout}s; "
                    f"it is {last}\nrecords: {self.records_of(task_id)}{self.logs()}"
                )
            time.sleep(0.05)
        return task

    def wait_log(self, process: LoggedProcess, *needles: str, timeout: float = TASK_TIMEOUT) -> str:
        """Wait for a log line that contains every one of ``needles``; return it."""

        def line() -> str | None:
            for candidate in process.text().splitlines():
                if all(needle in candidate for needle in needles):
                    return candidate
            return None

        return str(
            wait_for(line, timeout=timeout, what=f"a log line with {needles}", logs=[process])
        )


def _broker_for(kind: str, request: pytest.FixtureRequest, root: Path) -> str:
    if "://" in kind:
        return kind  # a broker the test runs itself
    if kind == "redis":
        return str(request.getfixturevalue("redis_url"))
    if kind == "rabbitmq":
        return str(request.getfixturevalue("amqp_url"))
    if kind == "filesystem":
        return "filesystem://"
    raise ValueError(kind)


def _database_for(kind: str, request: pytest.FixtureRequest, root: Path) -> str:
    if kind == "postgres":
        return str(request.getfixturevalue("pg_database")())
    if kind == "sqlite":
        return f"sqlite:///{root / 'queuestore.db'}"
    raise ValueError(kind)


def build_deployment(
    request: pytest.FixtureRequest,
    root: Path,
    broker: str,
    database: str,
    **overrides: str,
) -> Deployment:
    """A migrated deployment on ``broker`` (redis, rabbitmq, filesystem) and ``database``.

    Shared services come from the ``redis_url``, ``amqp_url`` and ``pg_database``
    fixtures, which skip or fail (under CI) when the service is down.
    """
    deployment = Deployment(
        root=root,
        database_url=_database_for(database, request, root),
        broker_url=_broker_for(broker, request, root),
        overrides=overrides,
    )
    deployment.migrate()
    return deployment


DeploymentFactory = Callable[..., Deployment]
"""The ``deployment`` fixture: ``(broker, database, **QUEUESTORE_overrides) -> Deployment``."""


class RedisServer:
    """A throwaway ``redis-server`` of our own, which a test may stop and restart."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server is not installed")
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: LoggedProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.workdir),
        ]
        self.process = LoggedProcess.start(
            f"redis-server :{self.port}",
            command,
            env=dict(os.environ),
            cwd=self.workdir,
            log=self.workdir / "redis.log",
        )
        wait_for(
            lambda: port_open(self.port),
            timeout=STARTUP_TIMEOUT,
            what="redis-server to listen",
            logs=[self.process],
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


class PostgresCluster:
    """A PostgreSQL cluster of our own (``initdb`` + ``pg_ctl``), which a test may restart.

    As root, PostgreSQL refuses to run, so the cluster then belongs to the
    ``postgres`` OS user (via ``runuser``) in a folder that user can write.
    """

    def __init__(self, workdir: Path) -> None:
        self.bindir = _postgres_bindir()
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self.prefix: list[str] = []
        if self.as_root:
            runuser = shutil.which("runuser")
            if runuser is None:
                unavailable("running as root without runuser: cannot start PostgreSQL")
            self.prefix = [runuser, "-u", "postgres", "--"]
        self.workdir = workdir
        self.data = workdir / "data"
        self.logfile = workdir / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            shutil.chown(self.workdir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", options, "-w", "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        command = [*self.prefix, str(self.bindir / tool), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if check and result.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            pytest.fail(f"{tool} failed: {result.stdout}{result.stderr}\n{log}")


def _postgres_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found is not None:
        return Path(found).resolve().parent
    # Debian and Ubuntu keep the server tools out of PATH.
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not candidates:
        unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    return candidates[-1].parent


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
"""Debian's server script itself (``/usr/sbin``'s wrapper would switch to the rabbitmq user)."""


class RabbitMQNode:
    """A RabbitMQ node of our own, on ports of its own, with a short ``consumer_timeout``.

    Its configuration, database, logs and Erlang cookie live in ``workdir``; it
    shares only the machine's epmd, under a node name of its own.
    """

    def __init__(self, workdir: Path, *, consumer_timeout: timedelta) -> None:
        if not RABBITMQ_SERVER.exists():
            unavailable(f"{RABBITMQ_SERVER} is not installed")
        self.workdir = workdir
        self.port = free_port()
        self.dist_port = free_port()
        self.name = f"qs-it-{uuid.uuid4().hex[:8]}@localhost"
        self.consumer_timeout = consumer_timeout
        self.process: LoggedProcess | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self) -> None:
        config = self.workdir / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"consumer_timeout = {int(self.consumer_timeout.total_seconds() * 1000)}\n"
            "loopback_users = none\n"
        )
        # The broker checks consumer timeouts on each channel tick (60 s by default).
        advanced = self.workdir / "advanced.config"
        advanced.write_text("[{rabbit, [{channel_tick_interval, 1000}]}].\n")
        (self.workdir / "enabled_plugins").write_text("[].\n")
        (self.workdir / "rabbitmq-env.conf").write_text("")
        env = dict(os.environ) | {
            "HOME": str(self.workdir),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(advanced),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "rabbitmq-env.conf"),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
        }
        self.process = LoggedProcess.start(
            f"rabbitmq {self.name}",
            [str(RABBITMQ_SERVER)],
            env=env,
            cwd=self.workdir,
            log=self.workdir / "rabbitmq.out",
        )
        wait_for(
            lambda: port_open(self.port),
            timeout=STARTUP_TIMEOUT,
            what="the private RabbitMQ node to listen",
            logs=[self.process],
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=30.0)
            self.process = None
