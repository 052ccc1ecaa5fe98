"""The dashboard in headless Chromium (Debian's ``chromium``) against the real API and worker.

Signed in as Alice, the page lists her tasks and not Bob's; a task created
after the page loaded appears, and its worker's progress moves, without a
reload (the page's event stream); the cancel button cancels it in the store, and the
resume button answers a task that waits for input.
A screenshot is saved in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from http_browser import Chromium
from http_deployment import Api, HttpDeployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

CHROMIUM = os.environ.get("QUEUESTORE_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture
def browser(shared: ModuleType, tmp_path: Path, pg: HttpDeployment) -> Iterator[Chromium]:
    def check() -> None:
        if shutil.which(CHROMIUM) is None:
            raise FileNotFoundError(f"{CHROMIUM} (install Debian's chromium)")

    shared.require_service("Chromium", check)
    with Chromium(CHROMIUM, tmp_path, pg.env()) as chromium:
        yield chromium


def row(task_id: str) -> str:
    return f"document.querySelector('tr[data-task-id={json.dumps(task_id)}]')"


def test_dashboard_lists_follows_and_cancels(browser: Chromium, api: Api, tmp_path: Path) -> None:
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        earlier = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        hidden = bob.post("/tasks", json={"name": "http.add", "input": {"a": 5, "b": 5}}).json()

        browser.navigate(f"{api.url}/dashboard")
        browser.evaluate(
            "document.getElementById('token').value = 'token-alice';"
            "document.querySelector('#signin button[type=submit]').click();"
            "window.notReloaded = true"
        )
        browser.wait(f"{row(earlier['id'])} !== null", what="Alice's earlier task in the list")
        browser.wait("document.getElementById('live').dataset.state === 'open'", what="live")
        assert browser.evaluate(f"{row(hidden['id'])} === null"), "Bob's task is shown to Alice"

        task = alice.post(
            "/tasks", json={"name": "http.steps", "input": {"count": 60, "pause": 0.25}}
        ).json()
        browser.wait(f"{row(task['id'])} !== null", what="the new task, without a reload")
        progress = f"Number({row(task['id'])}.querySelector('td.progress').dataset.progress || 0)"
        first = browser.wait(f"{progress} > 0 && {progress}", what="the worker's progress")
        browser.wait(f"{progress} > {first}", what="more progress")
        assert browser.evaluate(f"{row(task['id'])}.dataset.status") == "working"
        assert browser.evaluate("window.notReloaded === true")

        browser.evaluate(f"{row(task['id'])}.click()")
        browser.wait("document.getElementById('cancel') !== null", what="the cancel button")
        browser.evaluate("document.getElementById('cancel').click()")
        browser.wait(f"{row(task['id'])}.dataset.status === 'cancelled'", what="cancelled row")
        assert alice.get(f"/tasks/{task['id']}").json()["status"] == "cancelled"
        assert browser.evaluate("document.getElementById('cancel') === null")
        assert browser.evaluate("window.notReloaded === true")

        asking = alice.post("/tasks", json={"name": "http.ask", "input": {"question": "Go?"}})
        asked = asking.json()["id"]
        browser.wait(f"{row(asked)}?.dataset.status === 'input_required'", what="a question")
        browser.evaluate(f"{row(asked)}.click()")
        browser.wait("document.getElementById('resume') !== null", what="the resume button")
        browser.evaluate(
            "document.getElementById('answer').value = 'yes';"
            "document.getElementById('resume').click()"
        )
        browser.wait(f"{row(asked)}.dataset.status === 'completed'", what="the resumed task")
        assert alice.get(f"/tasks/{asked}").json()["result"] == {"answer": "yes"}
        assert browser.evaluate("window.notReloaded === true")

        shot = browser.screenshot(tmp_path / "dashboard.png")
        assert shot.read_bytes().startswith(b"\x89PNG")
