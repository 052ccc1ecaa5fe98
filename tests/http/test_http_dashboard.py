"""The dashboard in headless Chromium (Debian's ``chromium``) against the real API and worker.

Signed in as Alice, the page says so, lists her tasks and not Bob's, and counts
them; a task created after the page loaded appears, and its worker's progress
moves, without a reload (the page's event stream); the cancel button cancels it
in the store, and the resume button answers a task that waits for input; a
scheduled task that has not started shows when it starts. With nothing to show,
the page says whose tasks it lists and why there are none. Every time is 24-hour,
in the browser's time zone, to the second, with the zone, in the list (which
shows creation, its order) and in the detail alike.
At 1280 and at 800 px nothing overflows its panel, the status and the time are
never cut, the action buttons stand apart, only a running job without progress
draws a moving bar, a failed row shows its error, and an injected inline handler
does not run (the policy allows the page's own script by digest). Screenshots are
saved in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
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


def sign_in(browser: Chromium, token: str) -> None:
    browser.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.querySelector('#signin button[type=submit]').click()"
    )


def text_of(browser: Chromium, element_id: str) -> str:
    return str(browser.evaluate(f"document.getElementById({json.dumps(element_id)}).innerText"))


KOLKATA = timezone(timedelta(hours=5, minutes=30), "Asia/Kolkata")
"""A time zone without summer time, so the expected local times are plain arithmetic."""

TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \S+")
"""How the page shows every time: 24-hour, to the second, with the zone's name."""


def counted(tasks: int) -> str:
    return f"{tasks} task" if tasks == 1 else f"{tasks} tasks"


def local(instant: str) -> str:
    """``instant`` as the page shows it in Kolkata."""
    moment = datetime.fromisoformat(instant).astimezone(KOLKATA)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + " GMT+5:30"


def test_dashboard_lists_follows_and_cancels(browser: Chromium, api: Api, tmp_path: Path) -> None:
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        earlier = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        hidden = bob.post("/tasks", json={"name": "http.add", "input": {"a": 5, "b": 5}}).json()

        browser.navigate(f"{api.url}/dashboard")
        assert text_of(browser, "who") == "not signed in"
        sign_in(browser, "token-alice")
        browser.evaluate("window.notReloaded = true")
        browser.wait(f"{row(earlier['id'])} !== null", what="Alice's earlier task in the list")
        browser.wait("document.getElementById('live').dataset.state === 'open'", what="live")
        assert browser.evaluate(f"{row(hidden['id'])} === null"), "Bob's task is shown to Alice"
        assert text_of(browser, "who") == "signed in as alice"
        mine = alice.get("/tasks", params={"total": "true", "limit": 1}).json()["total"]
        assert text_of(browser, "count") == counted(mine)

        task = alice.post(
            "/tasks", json={"name": "http.steps", "input": {"count": 60, "pause": 0.25}}
        ).json()
        browser.wait(f"{row(task['id'])} !== null", what="the new task, without a reload")
        assert text_of(browser, "count") == counted(mine + 1)
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


# Layout checks, as script: each is a list of what does not fit, empty when all is well.
OVERFLOWS = """(() => {
  const cut = (e) => e.scrollWidth > e.clientWidth + 1;
  const out = (inner, outer) => inner.getBoundingClientRect().right
    > outer.getBoundingClientRect().right + 1;
  const found = [];
  for (const section of document.querySelectorAll('main > section')) {
    if (cut(section)) found.push('section#' + section.id + ' scrolls sideways');
    for (const e of section.querySelectorAll('*')) {
      if (e.closest('td, pre')) continue;  // cells end in an ellipsis; pre scrolls
      if (out(e, section)) found.push(e.tagName + '#' + e.id + ' leaves section#' + section.id);
    }
  }
  const table = document.querySelector('table');
  if (cut(table)) found.push('the table is wider than its panel');
  const header = document.querySelector('header');
  for (const e of header.children) {
    if (out(e, header)) found.push(e.tagName + '#' + e.id + ' leaves the header');
  }
  if (document.documentElement.scrollWidth > window.innerWidth) {
    found.push('the page scrolls sideways');
  }
  return found;
})()"""

CUT_CELLS = """[...document.querySelectorAll('td.status, td.created, th')]
  .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent)"""

ACTIONS_APART = """(() => {
  const parts = [...document.querySelectorAll('#detail .actions > *')];
  const boxes = parts.map((e) => e.getBoundingClientRect());
  const gaps = [];
  for (let i = 1; i < boxes.length; i++) {
    if (boxes[i].top >= boxes[i - 1].bottom) continue;  // wrapped onto the next line
    gaps.push(boxes[i].left - boxes[i - 1].right);
  }
  return [parts.map((e) => e.id), gaps];
})()"""


@pytest.mark.parametrize("width", [1280, 800])
def test_dashboard_fits_its_panels_and_shows_what_each_row_is(
    browser: Chromium, api: Api, tmp_path: Path, width: int
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
        asking = alice.post("/tasks", json={"name": "http.ask", "input": {"question": "Go?"}})
        waiting = asking.json()
        try:
            for task, status in ((failed, "failed"), (done, "completed")):
                wait_for_status(alice, task["id"], status)
            wait_for_status(alice, cancelled["id"], "input_required")
            alice.post(f"/tasks/{cancelled['id']}/cancel", json={})
            wait_for_status(alice, waiting["id"], "input_required")

            browser.resize(width)
            browser.navigate(f"{api.url}/dashboard")
            sign_in(browser, "token-alice")
            for task, status in (
                (failed, "failed"),
                (done, "completed"),
                (cancelled, "cancelled"),
                (running, "working"),
                (waiting, "input_required"),
            ):
                browser.wait(
                    f"{row(task['id'])}?.dataset.status === {json.dumps(status)}", what=status
                )
            browser.evaluate(f"{row(waiting['id'])}.click()")
            browser.wait("document.getElementById('resume') !== null", what="the detail's actions")

            assert browser.evaluate("window.innerWidth") == width
            assert browser.evaluate(OVERFLOWS) == []
            assert browser.evaluate(CUT_CELLS) == []  # input_required and the times, whole
            ids, gaps = browser.evaluate(ACTIONS_APART)
            assert ids == ["answer", "resume", "cancel"]
            assert gaps, "the actions are not side by side"
            assert all(gap >= 6 for gap in gaps), gaps

            # The list shows when each task was created (its order), as the detail does.
            created = browser.evaluate(
                f"{row(waiting['id'])}.querySelector('td.created').innerText"
            )
            assert TIME.fullmatch(created), created
            details = text_of(browser, "detail")
            assert f"created\n{created}" in details
            for label in ("updated", "started"):
                shown = re.search(rf"{label}\n(.*)", details)
                assert shown is not None
                assert TIME.fullmatch(shown[1]), details

            message = f"{row(failed['id'])}.querySelector('td.message')"
            assert browser.evaluate(f"{message}.textContent") == "RuntimeError: disk full"
            assert browser.evaluate(f"{message}.hasAttribute('data-error')")
            moving = (
                "document.querySelectorAll('tr:not([data-status=working]) progress:indeterminate')"
            )
            assert browser.evaluate(f"{moving}.length") == 0
            assert browser.evaluate(f"{row(cancelled['id'])}.querySelector('progress')") is None
            browser.screenshot(tmp_path / f"dashboard-{width}.png")

            # The page's policy allows its own script by digest, never an injected handler.
            browser.evaluate(
                "const img = Object.assign(document.createElement('div'), {"
                ' innerHTML: \'<img src="/no-such-image" onerror="window.injected = true">\' });'
                "img.firstChild.addEventListener('error', () => { window.failedToLoad = true; });"
                "document.body.append(img)"
            )
            browser.wait("window.failedToLoad === true", what="the injected image's error event")
            assert browser.evaluate("window.injected === undefined")
        finally:  # free the worker's slots for the next tests
            alice.post(f"/tasks/{running['id']}/cancel", json={})
            alice.post(f"/tasks/{waiting['id']}/cancel", json={})


def test_every_time_is_local_24_hour_to_the_second_with_its_zone(
    browser: Chromium, api: Api
) -> None:
    with api.client("token-alice") as alice:
        task = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        task = wait_for_status(alice, task["id"], "completed")
        browser.time_zone("Asia/Kolkata")
        browser.navigate(f"{api.url}/dashboard")
        sign_in(browser, "token-alice")
        browser.wait(f"{row(task['id'])} != null", what="the task")
        browser.evaluate(f"{row(task['id'])}.click()")
        browser.wait("document.getElementById('detail').dataset.taskId", what="the detail")

        cell = f"{row(task['id'])}.querySelector('td.created')"
        assert browser.evaluate(f"{cell}.innerText") == local(task["created_at"])
        assert browser.evaluate(f"{cell}.querySelector('time').dateTime") == task["created_at"]
        details = text_of(browser, "detail")
        for label in ("created", "started", "updated", "finished"):
            assert f"{label}\n{local(task[label + '_at'])}" in details, details


def test_with_no_tasks_to_show_the_dashboard_says_whose_it_lists_and_why(
    browser: Chromium, pg: HttpDeployment, api: Api
) -> None:
    browser.navigate(f"{api.url}/dashboard")
    browser.wait("!document.getElementById('empty').hidden", what="the empty list's words")
    assert text_of(browser, "who") == "not signed in"
    assert "Sign in with a bearer token to see your tasks" in text_of(browser, "empty")
    assert text_of(browser, "error") == ""

    sign_in(browser, "not-a-token")
    browser.wait("document.getElementById('who').innerText === 'token not valid'", what="refusal")
    assert "The token is not valid" in text_of(browser, "empty")

    sign_in(browser, "token-alice")
    browser.wait("document.getElementById('live').dataset.state === 'open'", what="the stream")
    browser.evaluate(
        "document.getElementById('f-name').value = 'no.such.job';"
        "document.querySelector('#filters button').click()"
    )
    browser.wait("document.getElementById('count').innerText === '0 tasks match'", what="0 match")
    assert text_of(browser, "empty") == "No task owned by alice matches these filters."
    assert browser.evaluate("document.getElementById('tasks').rows.length") == 0

    newcomer = pg.start_api(
        QUEUESTORE_HTTP_TOKENS=json.dumps({"token-carol": "carol", "token-alice": "alice"})
    )
    try:
        browser.navigate(f"{newcomer.url}/dashboard")
        sign_in(browser, "token-carol")
        browser.wait("document.getElementById('count').innerText === '0 tasks'", what="0 tasks")
        assert text_of(browser, "who") == "signed in as carol"
        empty = text_of(browser, "empty")
        assert empty.startswith("No tasks owned by carol yet.")
        assert "tasks created without an owner, or by another principal, are not shown" in empty
    finally:
        pg.stop(newcomer)


def test_dashboard_shows_when_a_scheduled_task_starts(browser: Chromium, api: Api) -> None:
    start = datetime.now(UTC) + timedelta(hours=1)
    with api.client("token-alice") as alice:
        done = alice.post("/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}).json()
        wait_for_status(alice, done["id"], "completed")
        past = alice.post(
            "/tasks",
            json={
                "name": "http.add",
                "input": {"a": 3, "b": 4},
                "run_at": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
            },
        ).json()
        wait_for_status(alice, past["id"], "completed")
        scheduled = alice.post(
            "/tasks",
            json={"name": "http.add", "input": {"a": 2, "b": 3}, "run_at": start.isoformat()},
        ).json()
        try:
            browser.time_zone("Asia/Kolkata")
            browser.navigate(f"{api.url}/dashboard")
            sign_in(browser, "token-alice")
            starts = f"{row(scheduled['id'])}?.querySelector('td.message time.starts')"
            browser.wait(f"{starts} != null", what="the scheduled task's start")
            assert browser.evaluate(f"{starts}.dateTime") == scheduled["run_at"]
            # In the browser's time zone, as every time on the page.
            text = browser.evaluate(f"{starts}.textContent")
            assert text == "starts " + local(scheduled["run_at"])
            message = f"{row(scheduled['id'])}.querySelector('td.message')"
            assert browser.evaluate(f"{message}.title") == scheduled["run_at"]
            assert browser.evaluate(f"{row(done['id'])}.querySelector('time.starts')") is None

            browser.evaluate(f"{row(scheduled['id'])}.click()")
            browser.wait("document.getElementById('detail').dataset.taskId", what="the detail")
            details = browser.evaluate("document.querySelector('#detail dl').innerText")
            assert f"scheduled\n{local(scheduled['run_at'])}" in details

            # A start already past is not shown as one to come.
            assert browser.evaluate(f"{row(past['id'])}.querySelector('time.starts')") is None
            browser.evaluate(f"{row(past['id'])}.click()")
            browser.wait(
                f"document.getElementById('detail').dataset.taskId === {json.dumps(past['id'])}",
                what="the past task's detail",
            )
            details = browser.evaluate("document.querySelector('#detail dl').innerText")
            assert "scheduled" not in details
            assert f"not before\n{local(past['run_at'])}" in details
        finally:
            alice.post(f"/tasks/{scheduled['id']}/cancel", json={})
        browser.wait(f"{row(scheduled['id'])}.dataset.status === 'cancelled'", what="cancelled")
        assert browser.evaluate(f"{row(scheduled['id'])}.querySelector('time.starts')") is None


def test_dashboard_shows_each_retried_runs_error(browser: Chromium, api: Api) -> None:
    with api.client("token-alice") as alice:
        flaky = alice.post("/tasks", json={"name": "http.flaky"}).json()
        wait_for_status(alice, flaky["id"], "failed")
        browser.navigate(f"{api.url}/dashboard")
        sign_in(browser, "token-alice")
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
