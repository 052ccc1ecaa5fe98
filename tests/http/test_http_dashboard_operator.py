"""The operator's dashboard in headless Chromium, against the real API, worker and store.

Signed in as an operator (``http_admins``), the page opens on the overview:
tiles that equal the API's counts, charts drawn as SVG whose every series has
points, the backlog by job and owner, the oldest waiting task and the jobs'
table; the workers view lists the live worker with the task it runs, pauses
and resumes a job, and shows each key's use of a rate limit; the tasks
view lists two owners' tasks with an owner column and filter, and its detail
draws the task's timeline and acts on another owner's task. A plain principal
sees neither view nor anyone else's task. At 1280 and 800 px nothing leaves its
panel. The page loads nothing from elsewhere: its policy is ``default-src
'self'``, every resource it fetched is its own origin's, and the browser
refuses an injected remote image and a fetch to another host.

Screenshots of each view are saved in the test's folder, and in
``QUEUESTORE_DASHBOARD_SHOTS`` (a folder) when it is set: the how-to's images.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from queuestore import FlowControl, RateLimit, SqlTaskStore
from tests.http.http_browser import Chromium
from tests.http.http_deployment import Api, HttpDeployment
from tests.http.http_support import wait_for_status

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

CHROMIUM = os.environ.get("QUEUESTORE_TEST_CHROMIUM", "/usr/bin/chromium")
SHOTS = os.environ.get("QUEUESTORE_DASHBOARD_SHOTS")
LOAD_MINUTES = float(os.environ.get("QUEUESTORE_DASHBOARD_LOAD_MINUTES", "8"))
"""With SHOTS: minutes of varied work run first, so the how-to's charts have a history."""


@pytest.fixture
def browser(shared: ModuleType, tmp_path: Path, pg: HttpDeployment) -> Iterator[Chromium]:
    def check() -> None:
        if shutil.which(CHROMIUM) is None:
            raise FileNotFoundError(f"{CHROMIUM} (install Debian's chromium)")

    shared.require_service("Chromium", check)
    with Chromium(CHROMIUM, tmp_path, pg.env()) as chromium:
        yield chromium


def history(api: Api, minutes: float) -> None:
    """Varied work for ``minutes``: a steady stream with failures and retries, and every
    two minutes a burst of slower jobs that the worker's two slots take a while to drain."""
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        began = time.monotonic()
        tick = 0
        while time.monotonic() - began < minutes * 60:
            client = alice if tick % 3 else bob
            steady = [
                {"name": "http.add", "input": {"a": tick, "b": n}} for n in range(4 + tick % 7)
            ]
            if tick % 4 == 0:
                steady.append({"name": "http.fail"})
            if tick % 6 == 0:
                steady.append({"name": "http.flaky"})
            if tick % 12 == 6:
                slow = {"name": "http.steps", "input": {"count": 4, "pause": 0.4}}
                steady += [slow] * 24
            client.post("/tasks:batch", json={"tasks": steady})
            tick += 1
            time.sleep(10)


@pytest.fixture(scope="module")
def work(api: Api) -> Iterator[dict[str, dict[str, Any]]]:
    """Two owners' tasks in every state: done, failed, retried and failed, cancelled,
    waiting for an answer, running; the running ones are cancelled afterwards."""
    if SHOTS:
        history(api, LOAD_MINUTES)
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        made: dict[str, dict[str, Any]] = {}
        for index in range(4):
            alice.post("/tasks", json={"name": "http.add", "input": {"a": index, "b": 1}})
        made["done"] = bob.post(
            "/tasks", json={"name": "http.add", "input": {"a": 1, "b": 2}}
        ).json()
        made["failed"] = bob.post("/tasks", json={"name": "http.fail"}).json()
        made["flaky"] = alice.post("/tasks", json={"name": "http.flaky"}).json()
        made["asking"] = bob.post("/tasks", json={"name": "http.ask"}).json()
        wait_for_status(bob, made["done"]["id"], "completed")
        wait_for_status(bob, made["failed"]["id"], "failed")
        wait_for_status(alice, made["flaky"]["id"], "failed")
        wait_for_status(bob, made["asking"]["id"], "input_required")
        steps = {"name": "http.steps", "input": {"count": 600, "pause": 0.5}}
        made["cancelled"] = alice.post("/tasks", json=steps).json()
        wait_for_status(alice, made["cancelled"]["id"], "working")
        alice.post(f"/tasks/{made['cancelled']['id']}/cancel", json={})
        made["running"] = alice.post("/tasks", json=steps).json()
        wait_for_status(alice, made["running"]["id"], "working")
        yield made
        for key in ("running", "asking"):
            owner = alice if key == "running" else bob
            owner.post(f"/tasks/{made[key]['id']}/cancel", json={})


def sign_in(browser: Chromium, api: Api, token: str, view: str = "") -> None:
    browser.navigate(f"{api.url}/dashboard{view}")
    browser.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.querySelector('#signin button[type=submit]').click()"
    )
    browser.wait("document.getElementById('live').dataset.state === 'open'", what="the stream")


def row(task_id: str) -> str:
    return f"document.querySelector('tr[data-task-id={json.dumps(task_id)}]')"


def go(browser: Chromium, view: str) -> None:
    browser.evaluate(f"location.hash = {json.dumps('#' + view)}")
    browser.wait(
        f"!document.getElementById({json.dumps(view if view != 'tasks' else 'list')}).hidden"
    )


def shoot(browser: Chromium, folder: Path, name: str) -> None:
    path = browser.screenshot(folder / f"{name}.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(SHOTS) / f"{name}.png")


OVERVIEW_READY = (
    "document.querySelectorAll('#charts figure.chart').length === 6"
    " && document.querySelectorAll('#tiles .tile').length === 8"
)

# Layout checks, as script: a list of what does not fit, empty when all is well.
OVERFLOWS = """(() => {
  const cut = (e) => e.scrollWidth > e.clientWidth + 1;
  const out = (inner, outer) => inner.getBoundingClientRect().right
    > outer.getBoundingClientRect().right + 1;
  const found = [];
  for (const section of document.querySelectorAll('main > section:not([hidden])')) {
    if (cut(section)) found.push('section#' + section.id + ' scrolls sideways');
    for (const e of section.querySelectorAll('*')) {
      if (e.closest('td, pre, svg')) continue;  // cells end in an ellipsis; pre scrolls
      if (out(e, section)) found.push(e.tagName + '#' + e.id + ' leaves section#' + section.id);
    }
    for (const table of section.querySelectorAll('table')) {
      if (cut(table) || out(table, section)) found.push('table#' + table.id + ' is too wide');
    }
    for (const svg of section.querySelectorAll('svg')) {
      if (out(svg, svg.closest('figure'))) found.push('a chart leaves its figure');
    }
  }
  const header = document.querySelector('header');
  for (const e of header.children) {
    if (out(e, header)) found.push(e.tagName + '#' + e.id + ' leaves the header');
  }
  if (document.documentElement.scrollWidth > window.innerWidth) {
    found.push('the page scrolls sideways');
  }
  return found;
})()"""

CUT_CELLS = """[...document.querySelectorAll('#tasks td.status, #tasks td.created, #list th')]
  .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent)"""

CHARTS_WITHOUT_POINTS = """[...document.querySelectorAll('#charts figure.chart')]
  .filter((f) => f.querySelectorAll('circle').length === 0).map((f) => f.dataset.chart)"""


def test_an_operator_sees_every_owner_and_the_fleet(
    browser: Chromium, api: Api, work: dict[str, dict[str, Any]]
) -> None:
    sign_in(browser, api, "token-ops")
    browser.wait(OVERVIEW_READY, what="the overview")
    with api.client("token-ops") as ops:
        overview = ops.get("/operator/overview").json()
    assert browser.evaluate("document.getElementById('role').hidden") is False
    assert browser.evaluate("location.hash || 'overview'") in ("overview", "#overview")
    tiles = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#tiles .tile')]"
        ".map((t) => [t.dataset.status, Number(t.querySelector('.n').textContent)]))"
    )
    settled = ("completed", "failed", "cancelled", "input_required")
    assert {k: tiles[k] for k in settled} == {k: overview["counts"][k] for k in settled}
    assert browser.evaluate(CHARTS_WITHOUT_POINTS) == []
    owners = browser.evaluate(
        "[...document.querySelectorAll('#backlog-owners .name')].map((e) => e.textContent)"
    )
    assert owners == [c["key"] or "(no owner)" for c in overview["backlog"]["by_owner"]][:10]
    jobs = browser.evaluate(
        "[...document.querySelectorAll('#jobs tbody tr')].map((r) => r.dataset.job)"
    )
    assert {"http.add", "http.fail", "http.flaky", "http.steps"} <= set(jobs)

    go(browser, "workers")
    running = work["running"]["id"]
    workers = "document.querySelector('#live-workers tbody').innerText"
    browser.wait(f"{workers}.includes({json.dumps(running[:8])})", what="the running worker")
    assert "prefork" in browser.evaluate("document.querySelector('#live-workers tbody').innerText")

    # The operator pauses a job from the workers view, and resumes it.
    browser.wait("document.querySelector('#pauses tbody').innerText.includes('No pause')")
    browser.evaluate(
        "document.getElementById('pause-kind').value = 'job';"
        "document.getElementById('pause-value').value = 'http.add';"
        "document.getElementById('pause-reason').value = 'deploy';"
        "document.querySelector('#pause-form button').click()"
    )
    paused = "document.querySelector('tr[data-pause=\"job:http.add\"]')"
    browser.wait(f"{paused} !== null", what="the pause listed")
    with api.client("token-ops") as ops:
        assert ops.get("/operator/flow").json()["pauses"][0]["reason"] == "deploy"
    browser.evaluate(f"{paused}.querySelector('button').click()")
    browser.wait(f"{paused} === null", what="the pause lifted")

    go(browser, "tasks")
    for key in ("done", "failed", "flaky", "running"):
        browser.wait(f"{row(work[key]['id'])} !== null", what=f"the {key} task")
    owners_shown = browser.evaluate(
        "new Set([...document.querySelectorAll('#tasks td.owner')].map((c) => c.textContent)).size"
    )
    assert owners_shown >= 2
    browser.evaluate(
        "document.getElementById('f-owner').value = 'bob';"
        "document.querySelector('#filters button').click()"
    )
    browser.wait(f"{row(work['running']['id'])} === null", what="alice's tasks filtered out")
    assert set(
        browser.evaluate(
            "[...document.querySelectorAll('#tasks td.owner')].map((c) => c.textContent)"
        )
    ) == {"bob"}

    # The operator answers bob's question from the detail; the timeline tells it.
    asking = work["asking"]["id"]
    browser.evaluate(f"{row(asking)}.click()")
    browser.wait("document.querySelector('#timeline ol.timeline li') !== null", what="the timeline")
    assert browser.evaluate("document.querySelector('#timeline').innerText").count(
        "waiting for input"
    )
    browser.evaluate(
        "document.getElementById('answer').value = '\"go\"';"
        "document.getElementById('resume').click()"
    )
    browser.wait(f"{row(asking)}.dataset.status === 'completed'", what="the answered task done")


def test_a_plain_principal_sees_only_its_own_tasks_and_no_operator_view(
    browser: Chromium, api: Api, work: dict[str, dict[str, Any]]
) -> None:
    sign_in(browser, api, "token-alice", "#overview")
    browser.wait(f"{row(work['running']['id'])} !== null", what="alice's tasks")

    assert browser.evaluate("document.getElementById('overview').hidden") is True
    assert browser.evaluate("document.getElementById('tab-overview').hidden") is True
    assert browser.evaluate("document.getElementById('tab-workers').hidden") is True
    assert browser.evaluate("document.getElementById('role').hidden") is True
    assert browser.evaluate(f"{row(work['done']['id'])} === null")  # bob's
    assert browser.evaluate("document.querySelector('#tasks td.owner') === null")
    refused = browser.evaluate(
        "fetch('/operator/overview', {headers: {Authorization: 'Bearer token-alice'}})"
        ".then((r) => r.status)"
    )
    assert refused == 403


def schedule_row(schedule_id: str) -> str:
    return f"document.querySelector('tr[data-schedule={json.dumps(schedule_id)}]')"


@pytest.mark.parametrize("width", [1280, 800])
def test_the_schedules_view_shows_next_and_last_run_and_acts(
    browser: Chromium, api: Api, tmp_path: Path, width: int
) -> None:
    browser.resize(width, 1000)
    with api.client("token-alice") as alice, api.client("token-bob") as bob:
        made = alice.post(
            "/schedules", json={"name": "http.add", "input": {"a": 1, "b": 1}, "cron": "0 2 * * *"}
        )
        assert made.status_code == 201, made.text
        mine = made.json()
        bobs = bob.post(
            "/schedules", json={"name": "http.add", "input": {"a": 2, "b": 2}, "every": 3600}
        ).json()
        sign_in(browser, api, "token-alice", "#schedules")
        browser.wait(f"{schedule_row(mine['id'])} !== null", what="alice's schedule")
        assert browser.evaluate(f"{schedule_row(bobs['id'])} === null")
        cells = browser.evaluate(
            f"[...{schedule_row(mine['id'])}.children]"
            ".map((td) => td.hidden ? null : td.textContent)"
        )
        assert cells[1:4] == ["http.add", None, "cron 0 2 * * *"]
        assert cells[6] == "—"  # no task yet
        assert browser.evaluate(OVERFLOWS) == []
        shoot(browser, tmp_path, f"schedules-{width}")

        browser.evaluate(f"{schedule_row(mine['id'])}.querySelectorAll('button')[0].click()")
        browser.wait(
            f"{schedule_row(mine['id'])}.children[4].textContent === 'paused'", what="the pause"
        )
        assert alice.get(f"/schedules/{mine['id']}").json()["paused"] is True
        browser.evaluate(f"{schedule_row(mine['id'])}.querySelectorAll('button')[1].click()")
        browser.wait("location.hash === '#tasks'", what="the triggered task")
        task_id = alice.get(f"/schedules/{mine['id']}").json()["last_task_id"]
        wait_for_status(alice, task_id, "completed")
        go(browser, "schedules")
        browser.wait(
            f"{schedule_row(mine['id'])}.children[6].textContent === 'completed'",
            what="the last task's outcome",
        )
        for made, client in ((mine, alice), (bobs, bob)):
            client.delete(f"/schedules/{made['id']}")


RATED = FlowControl(rates={"http.rated": RateLimit(2, per=timedelta(hours=1), key="owner")})


def test_the_workers_view_shows_each_key_s_use_of_a_rate_limit(
    browser: Chromium, pg: HttpDeployment
) -> None:
    limits = {"http.rated": {"limit": 2, "per": 3600, "key": "owner"}}
    rated = pg.start_api(QUEUESTORE_RATE_LIMITS=json.dumps(limits))
    store = SqlTaskStore(pg.env()["QUEUESTORE_DATABASE_URL"], pool_size=1)
    tasks = [store.create("http.rated", owner="carol") for _ in range(3)]
    try:
        # Two starts of carol's key use its limit; the third waits for a turn.
        claims = [store.claim(task.id, "w-1", timedelta(minutes=1), flow=RATED) for task in tasks]
        assert [claim is not None for claim in claims] == [True, True, False]
        refused = store.get(tasks[2].id)
        assert store.wait_for_flow(
            refused.id, version=refused.version, flow=RATED, recheck=timedelta(minutes=1)
        )
        sign_in(browser, rated, "token-ops", "#workers")
        used = "document.querySelector('li[data-rate-use=\"http.rated|carol\"]')"
        browser.wait(f"{used} !== null", what="carol's use of the rate")
        assert browser.evaluate(f"{used}.textContent").startswith(
            "carol: 2 / 2 per 3600 s, tasks wait for turns until "
        )
    finally:
        for task in tasks:
            store.delete(task.id)
        store.close()
        pg.stop(rated)


@pytest.mark.parametrize("width", [1280, 800])
def test_each_view_fits_its_panels_and_every_chart_has_points(
    browser: Chromium, api: Api, work: dict[str, dict[str, Any]], tmp_path: Path, width: int
) -> None:
    browser.resize(width, 1400)
    sign_in(browser, api, "token-ops")
    browser.wait(OVERVIEW_READY, what="the overview")
    assert browser.evaluate(OVERFLOWS) == []
    assert browser.evaluate(CHARTS_WITHOUT_POINTS) == []
    shoot(browser, tmp_path, f"overview-{width}")

    go(browser, "workers")
    browser.wait("document.querySelector('#live-workers tbody tr') !== null", what="a worker")
    assert browser.evaluate(OVERFLOWS) == []
    shoot(browser, tmp_path, f"workers-{width}")

    go(browser, "tasks")
    flaky = work["flaky"]["id"]
    browser.wait(f"{row(flaky)} !== null", what="the retried task")
    browser.evaluate(f"{row(flaky)}.click()")
    browser.wait(
        "document.querySelectorAll('#timeline ol.timeline li').length >= 3", what="its timeline"
    )
    assert "retried" in browser.evaluate(
        "[...document.querySelectorAll('#timeline li')].map((li) => li.dataset.kind).join(' ')"
    )
    assert browser.evaluate("document.getElementById('resubmit') !== null")
    assert browser.evaluate(OVERFLOWS) == []
    assert browser.evaluate(CUT_CELLS) == []  # input_required and the times, whole
    shoot(browser, tmp_path, f"tasks-{width}")


def test_the_page_loads_nothing_from_elsewhere(browser: Chromium, api: Api) -> None:
    with api.client() as client:
        policy = client.get("/dashboard").headers["content-security-policy"]
    assert policy.startswith("default-src 'self';")
    assert "'unsafe-inline'" not in policy
    sign_in(browser, api, "token-ops")
    browser.wait(OVERVIEW_READY, what="the overview")

    origins = browser.evaluate(
        "[...new Set(performance.getEntriesByType('resource').map((e) => new URL(e.name).origin))]"
    )
    assert origins == [api.url]
    blocked = browser.evaluate(
        """new Promise((resolve) => {
          document.addEventListener('securitypolicyviolation', (e) => resolve(e.blockedURI));
          const img = document.createElement('img');
          img.src = 'http://192.0.2.1/pixel.png';
          document.body.append(img);
        })"""
    )
    assert blocked.startswith("http://192.0.2.1")
    refused = browser.evaluate("fetch('http://192.0.2.1/').then(() => 'fetched', (e) => e.name)")
    assert refused == "TypeError"
