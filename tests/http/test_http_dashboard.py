"""The dashboard in headless Chromium (Debian's ``chromium``) against the real API and worker.

Signed in as Alice, the page lists her tasks and not Bob's; a task created
after the page loaded appears, and its worker's progress moves, without a
reload (the page's event stream); the cancel button cancels it in the store, and the
resume button answers a task that waits for input; a scheduled task that has not
started shows when it starts.
At 1280 px the table fits its panel, only a running job without progress draws a moving
bar, a failed row shows its error, and an injected inline handler does not run (the
policy allows the page's own script by digest). Screenshots are saved in the test's
temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from tests.http.http_browser import Chromium
from tests.http.http_deployment import Api, HttpDeployment
from tests.http.http_support import wait_for_status

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


def test_dashboard_at_1280_fits_its_panel_and_shows_what_each_row_is(
    browser: Chromium, api: Api, tmp_path: Path
) -> None:
    # A long message with long unbroken words (digests), as jobs report them.
    digest = "sha256:" + "0123456789abcdef" * 8
    report = f"verifying {digest} against {digest} before the upload"
    with api.client("token-alice") as alice:
        failed = alice.post(
            "/tasks",
            json={"name": "http.fail", "input": {"message": "disk full", "report": report}},
        ).json()
        done = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        running = alice.post(
            "/tasks", json={"name": "http.steps", "input": {"count": 400, "pause": 0.25}}
        ).json()
        cancelled = alice.post("/tasks", json={"name": "http.ask"}).json()
        for task, status in ((failed, "failed"), (done, "completed")):
            wait_for_status(alice, task["id"], status)
        wait_for_status(alice, cancelled["id"], "input_required")
        alice.post(f"/tasks/{cancelled['id']}/cancel", json={})

        browser.navigate(f"{api.url}/dashboard")
        browser.evaluate(
            "document.getElementById('token').value = 'token-alice';"
            "document.querySelector('#signin button[type=submit]').click()"
        )
        for task, status in (
            (failed, "failed"),
            (done, "completed"),
            (cancelled, "cancelled"),
            (running, "working"),
        ):
            browser.wait(f"{row(task['id'])}?.dataset.status === {json.dumps(status)}", what=status)

        assert browser.evaluate("window.innerWidth") == 1280
        fits = browser.evaluate(
            "(() => { const table = document.querySelector('table');"
            " const panel = table.closest('section').getBoundingClientRect();"
            " const updated = document.querySelector('thead th:last-child')"
            ".getBoundingClientRect();"
            " return [table.scrollWidth <= table.clientWidth + 1,"
            "         table.getBoundingClientRect().right <= panel.right + 1,"
            "         updated.right <= panel.right + 1,"
            "         document.documentElement.scrollWidth <= window.innerWidth]; })()"
        )
        assert fits == [True, True, True, True]

        message = f"{row(failed['id'])}.querySelector('td.message')"
        assert browser.evaluate(f"{message}.textContent") == "RuntimeError: disk full"
        assert browser.evaluate(f"{message}.hasAttribute('data-error')")
        moving = "document.querySelectorAll('tr:not([data-status=working]) progress:indeterminate')"
        assert browser.evaluate(f"{moving}.length") == 0
        assert browser.evaluate(f"{row(cancelled['id'])}.querySelector('progress')") is None
        browser.screenshot(tmp_path / "dashboard-1280.png")

        # The page's policy allows its own script by digest, never an injected handler.
        browser.evaluate(
            "const img = Object.assign(document.createElement('div'), {"
            ' innerHTML: \'<img src="/no-such-image" onerror="window.injected = true">\' });'
            "img.firstChild.addEventListener('error', () => { window.failedToLoad = true; });"
            "document.body.append(img)"
        )
        browser.wait("window.failedToLoad === true", what="the injected image's error event")
        assert browser.evaluate("window.injected === undefined")
        alice.post(f"/tasks/{running['id']}/cancel", json={})


def test_dashboard_shows_when_a_scheduled_task_starts(browser: Chromium, api: Api) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    with api.client("token-alice") as alice:
        done = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        wait_for_status(alice, done["id"], "completed")
        scheduled = alice.post(
            "/tasks",
            json={"name": "http.add", "input": {"a": 2, "b": 3}, "run_at": start.isoformat()},
        ).json()
        try:
            browser.navigate(f"{api.url}/dashboard")
            browser.evaluate(
                "document.getElementById('token').value = 'token-alice';"
                "document.querySelector('#signin button[type=submit]').click()"
            )
            starts = f"{row(scheduled['id'])}?.querySelector('td.message time.starts')"
            browser.wait(f"{starts} != null", what="the scheduled task's start")
            assert browser.evaluate(f"{starts}.dateTime") == scheduled["run_at"]
            # In the browser's time zone, as the updated column.
            local = f"new Date({json.dumps(scheduled['run_at'])}).toLocaleTimeString()"
            text = browser.evaluate(f"{starts}.textContent")
            assert text.startswith("starts ")
            assert text.endswith(browser.evaluate(local))
            message = f"{row(scheduled['id'])}.querySelector('td.message')"
            assert browser.evaluate(f"{message}.title") == scheduled["run_at"]
            assert browser.evaluate(f"{row(done['id'])}.querySelector('time.starts')") is None

            browser.evaluate(f"{row(scheduled['id'])}.click()")
            browser.wait("document.getElementById('detail').dataset.taskId", what="the detail")
            details = browser.evaluate("document.querySelector('#detail dl').innerText")
            assert f"scheduled\n{scheduled['run_at']}" in details
        finally:
            alice.post(f"/tasks/{scheduled['id']}/cancel", json={})
        browser.wait(f"{row(scheduled['id'])}.dataset.status === 'cancelled'", what="cancelled")
        assert browser.evaluate(f"{row(scheduled['id'])}.querySelector('time.starts')") is None


def test_dashboard_shows_each_retried_runs_error(browser: Chromium, api: Api) -> None:
    with api.client("token-alice") as alice:
        flaky = alice.post("/tasks", json={"name": "http.flaky"}).json()
        wait_for_status(alice, flaky["id"], "failed")
        browser.navigate(f"{api.url}/dashboard")
        browser.evaluate(
            "document.getElementById('token').value = 'token-alice';"
            "document.querySelector('#signin button[type=submit]').click()"
        )
        browser.wait(f"{row(flaky['id'])} != null", what="the failed task")
        browser.evaluate(f"{row(flaky['id'])}.click()")
        browser.wait("document.getElementById('detail').dataset.taskId", what="the detail")
        detail = browser.evaluate("document.getElementById('detail').innerText")

    assert "retried runs' errors" in detail
    assert "upstream down (run 1)" in detail  # the retried run's
    assert "upstream down (run 2)" in detail  # the last, as the task's error


def test_dashboard_shows_a_tasks_steps_and_children_and_filters_by_parent(
    browser: Chromium, api: Api
) -> None:
    with api.client("token-alice") as alice:
        parent = alice.post("/tasks", json={"name": "http.fan", "input": {"numbers": [4, 5]}})
        parent_id = parent.json()["id"]
        wait_for_status(alice, parent_id, "completed")
        browser.navigate(f"{api.url}/dashboard")
        browser.evaluate(
            "document.getElementById('token').value = 'token-alice';"
            "document.querySelector('#signin button[type=submit]').click()"
        )
        browser.wait(f"{row(parent_id)} != null", what="the parent")
        browser.evaluate(f"{row(parent_id)}.click()")
        browser.wait("document.getElementById('children') != null", what="its children")
        detail = browser.evaluate("document.getElementById('detail').innerText")
        browser.evaluate("document.querySelector('#children tr').click()")
        browser.wait("document.getElementById('parent') != null", what="a child's detail")
        browser.evaluate(
            f"document.getElementById('f-parent').value = {json.dumps(parent_id)};"
            "document.querySelector('#filters button[type=submit]').click()"
        )
        browser.wait(
            f"document.querySelectorAll('#tasks tr').length === 2 && {row(parent_id)} == null",
            what="the list of the parent's children",
        )

    assert "steps" in detail
    assert "double" in detail
    assert "children" in detail
