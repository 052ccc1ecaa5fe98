"""deploy/: the compose file and Kubernetes manifests, parsed and checked against the
settings object, and every service's command run for real on PostgreSQL and Redis.

No container engine runs here: each command runs as a local process, with the
service's environment (the env example plus the service's own variables) pointed at
the local servers, and the image's /var/lib/queuestore at a temporary folder.
"""

from __future__ import annotations

import os
import random
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
import yaml
from celery import Celery

from queuestore import Settings, TaskStatus
from queuestore.ops.cli import app as cli_app
from tests.ops.ops_support import LoggedProcess, free_port, port_open, wait_for

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
IMAGE_HOME = "/var/lib/queuestore"
QUEUESTORE_SERVICES = ["migrate", "worker", "beat", "deliver", "api"]
EXECUTABLE = Path(sys.executable).parent / "queuestore"


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())  # type: ignore[no-any-return]


def manifests() -> list[dict[str, Any]]:
    return [
        document
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document is not None
    ]


def env_example() -> dict[str, str]:
    values = {}
    for line in (DEPLOY / "queuestore.env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def cli_commands() -> set[str]:
    """The ``queuestore`` command's subcommands."""
    return set(typer.main.get_command(cli_app).commands)  # type: ignore[attr-defined]


def setting_name(variable: str) -> str:
    return variable.removeprefix("QUEUESTORE_").lower()


def containers(kind: str | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(manifest, container)`` of every pod template, or of one kind."""
    for document in manifests():
        if kind is not None and document["kind"] != kind:
            continue
        spec = document.get("spec", {}).get("template", {}).get("spec")
        if spec is not None:
            for container in spec["containers"]:
                yield document, container


# -- the files, parsed ----------------------------------------------------------------


def test_every_variable_the_files_set_is_a_real_setting() -> None:
    fields = set(Settings.model_fields)
    variables: dict[str, str] = {}
    services = compose()["services"]
    for name in QUEUESTORE_SERVICES:
        variables |= services[name].get("environment", {})
    variables |= env_example()
    for document in manifests():
        variables |= document.get("data", {}) | document.get("stringData", {})
    for _, container in containers():
        variables |= {item["name"]: item["value"] for item in container.get("env", [])}
    ours = {key: value for key, value in variables.items() if key.startswith("QUEUESTORE_")}
    assert ours, "no QUEUESTORE_ variable found"
    unknown = {key for key in ours if setting_name(key) not in fields}
    assert unknown == set()
    # And every value is one the settings accept.
    Settings(**{setting_name(key): value for key, value in ours.items()})


def test_the_env_example_documents_every_setting() -> None:
    text = (DEPLOY / "queuestore.env.example").read_text()
    missing = [name for name in Settings.model_fields if f"QUEUESTORE_{name.upper()}=" not in text]
    assert missing == []


def test_services_run_the_queuestore_command_and_k8s_runs_the_same() -> None:
    services = compose()["services"]
    by_service = {name: services[name]["command"] for name in QUEUESTORE_SERVICES}
    for name, command in by_service.items():
        assert command[0] == "queuestore", name
        assert command[1] in cli_commands(), name
    assert by_service["migrate"] == ["queuestore", "db", "upgrade"]
    assert by_service["api"] == ["queuestore", "serve", "--host", "0.0.0.0", "--port", "8000"]
    k8s = sorted(container["command"] for _, container in containers())
    assert k8s == sorted(by_service.values())
    assert services["worker"]["environment"]["QUEUESTORE_METRICS_PORT"] == "9100"
    assert "9100" in services["worker"]["expose"]
    assert "8000:8000" in services["api"]["ports"]
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])


def test_exactly_one_beat() -> None:
    services = compose()["services"]
    assert "replicas" not in services["beat"].get("deploy", {})
    assert "one beat" in (DEPLOY / "compose.yaml").read_text().lower()
    (beat, _), *others = list(containers_of_component("beat"))
    assert others == []
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert "exactly one" in (DEPLOY / "k8s" / "beat.yaml").read_text().lower()


def containers_of_component(component: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for document, container in containers():
        if document["metadata"]["labels"]["app.kubernetes.io/component"] == component:
            yield document, container


def test_api_deployment_has_probes_and_a_service() -> None:
    (deployment, container), *others = list(containers_of_component("api"))
    assert others == []
    assert deployment["kind"] == "Deployment"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8000}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "8000"
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    (service,) = [
        document
        for document in manifests()
        if document["kind"] == "Service" and document["metadata"]["name"] == "queuestore-api"
    ]
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    kustomized = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    assert "api.yaml" in kustomized["resources"]


def test_worker_pods_expose_metrics() -> None:
    ((deployment, container),) = list(containers_of_component("worker"))
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["QUEUESTORE_METRICS_PORT"] == "9100"
    assert {"name": "metrics", "containerPort": 9100} in container["ports"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9100"


# -- the commands, run ------------------------------------------------------------------


class Stack:
    """The compose services' commands as local processes on one database and Redis DB."""

    def __init__(self, root: Path, database_url: str, broker_url: str) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.database_url = database_url
        self.broker_url = broker_url
        self.processes: list[LoggedProcess] = []

    def variables(self, service: str, **overrides: str) -> dict[str, str]:
        declared = env_example() | compose()["services"][service].get("environment", {})
        declared |= {
            "QUEUESTORE_DATABASE_URL": self.database_url,
            "QUEUESTORE_BROKER_URL": self.broker_url,
        }
        declared |= overrides
        return {key: self.local(str(value)) for key, value in declared.items()}

    def env(self, service: str, **overrides: str) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
        inherited.pop("PROMETHEUS_MULTIPROC_DIR", None)
        return inherited | self.variables(service, **overrides)

    def local(self, value: str) -> str:
        return value.replace(IMAGE_HOME, str(self.home))

    def command(self, service: str, **replace: str) -> list[str]:
        command = [self.local(part) for part in compose()["services"][service]["command"]]
        command = [replace.get(part, part) for part in command]
        return [str(EXECUTABLE), *command[1:]]

    def start(
        self, service: str, *, replace: dict[str, str] | None = None, **env: str
    ) -> LoggedProcess:
        process = LoggedProcess.start(
            service,
            self.command(service, **(replace or {})),
            env=self.env(service, **env),
            cwd=self.root,
            log=self.root / f"{service}.log",
        )
        self.processes.append(process)
        return process

    def settings(self, service: str) -> Settings:
        return Settings(**{setting_name(k): v for k, v in self.variables(service).items()})

    def close(self) -> None:
        for process in self.processes:
            process.stop()


@pytest.fixture(scope="module")
def stack(
    shared: ModuleType, pg_database: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    # The services use Celery's default queue: a Redis database of their own keeps
    # other tests' workers from seeing their messages.
    base = shared.require_redis().rsplit("/", 1)[0]
    made = Stack(
        tmp_path_factory.mktemp("deploy"), pg_database(), f"{base}/{random.randint(1, 15)}"
    )
    yield made
    made.close()


def test_migrate_service_migrates(stack: Stack) -> None:
    migrate = stack.start("migrate")
    assert migrate.process.wait(timeout=120) == 0, migrate.tail()
    settings = stack.settings("migrate")
    assert settings.home == stack.home
    store = settings.make_store()
    try:
        assert store.create("deploy.check").status is TaskStatus.SUBMITTED
    finally:
        store.close()


def test_worker_and_beat_services_run_a_job(stack: Stack) -> None:
    migrate = stack.start("migrate")  # they depend on it, as in compose
    assert migrate.process.wait(timeout=120) == 0, migrate.tail()
    port = free_port()
    worker = stack.start("worker", QUEUESTORE_METRICS_PORT=str(port))
    beat = stack.start("beat", QUEUESTORE_LOG_LEVEL="DEBUG")  # beat's sends are DEBUG lines
    wait_for(lambda: "ready." in worker.text(), timeout=90, what="the worker", logs=[worker])
    wait_for(lambda: port_open(port), timeout=30, what="worker metrics", logs=[worker])
    settings = stack.settings("worker")
    celery = settings.configure(Celery("deploy-test", set_as_current=False))
    queue = settings.make_queue(celery, beat=False)
    try:
        task = queue.submit("examples.research", {"topic": "deploys", "sections": 1, "pause": 0})
        done = queue.result(task.id, timeout=60)
        assert done.status is TaskStatus.COMPLETED, worker.tail()
        wait_for(
            lambda: "Sending due task queuestore.reaper" in beat.text(),
            timeout=60,
            what="beat to send the reaper",
            logs=[beat],
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            scraped = response.read().decode()
        assert 'queuestore_tasks{status="completed"}' in scraped
    finally:
        with celery.connection_for_write() as connection:
            connection.default_channel.queue_delete("celery")
        celery.close()
        queue.store.close()


def test_api_service_is_ready_on_its_port(stack: Stack) -> None:
    assert "serve" in cli_commands(), "the api service runs `queuestore serve`"
    migrate = stack.start("migrate")  # the api depends on it, as in compose
    assert migrate.process.wait(timeout=120) == 0, migrate.tail()
    port = free_port()
    api = stack.start("api", replace={"8000": str(port)})
    wait_for(lambda: port_open(port), timeout=90, what="the API", logs=[api])
    for path in ("/livez", "/readyz"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            assert response.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert "queuestore_tasks" in response.read().decode()
