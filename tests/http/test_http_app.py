"""The application in-process (Starlette's TestClient) on the in-memory store: principals
from every source, the verifier settings, and how the app owns what it builds.

The real-process tests are in test_http_api.py; these cover configuration quickly.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient

from queuestore import (
    ConcurrencyLimits,
    InMemoryTaskStore,
    Settings,
    TaskContext,
    TaskQueue,
    TaskStatus,
    job,
)
from queuestore.core.validation import NAME_PATTERN
from queuestore.http import StaticTokens, create_app
from queuestore.http.app import load_queue
from queuestore.http.auth import load_verifier
from queuestore.http.idempotency import task_id_for


@pytest.fixture
def queue() -> Iterator[TaskQueue]:
    app = Celery("http-unit", broker="memory://", set_as_current=False)
    made = TaskQueue(InMemoryTaskStore(), app)
    yield made
    app.close()


def client(queue: TaskQueue, **settings: Any) -> TestClient:
    return TestClient(create_app(Settings(**settings), queue=queue))


def owner_of_new_task(http: TestClient, **headers: str) -> object:
    response = http.post("/tasks", json={"name": "job"}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["owner"]


def test_static_tokens_map_tokens_to_principals(queue: TaskQueue) -> None:
    with client(queue, http_tokens={"t1": "alice"}) as http:
        assert owner_of_new_task(http, Authorization="Bearer t1") == "alice"
        assert owner_of_new_task(http, Authorization="bearer   t1 ") == "alice"
        assert owner_of_new_task(http) is None
        assert http.get("/tasks", headers={"Authorization": "Bearer t2"}).status_code == 401
    assert "t1" not in repr(StaticTokens({"t1": "alice"}))
    assert "t1" not in repr(Settings(http_tokens={"t1": "alice"}))


def test_no_verifier_refuses_every_bearer_token(queue: TaskQueue) -> None:
    with client(queue) as http:
        response = http.get("/tasks", headers={"Authorization": "Bearer anything"})
        assert response.status_code == 401
        assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def _async_verifier(token: str) -> str | None:
    return token.removeprefix("user-") if token.startswith("user-") else None


def test_verifier_given_in_code_may_be_async(queue: TaskQueue) -> None:
    app = create_app(Settings(http_tokens={"ignored": "x"}), queue=queue, verifier=_async_verifier)
    with TestClient(app) as http:
        assert owner_of_new_task(http, Authorization="Bearer user-carol") == "carol"
        assert http.get("/tasks", headers={"Authorization": "Bearer ignored"}).status_code == 401


def test_verifier_from_an_import_path(queue: TaskQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    module = ModuleType("qs_test_verifiers")
    module.verify = {"k": "dave"}.get  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "qs_test_verifiers", module)
    with client(queue, http_token_verifier="qs_test_verifiers:verify") as http:
        assert owner_of_new_task(http, Authorization="Bearer k") == "dave"
    with pytest.raises(ValueError, match="not callable"):
        load_verifier("qs_test_verifiers:missing")
    with pytest.raises(ValueError, match="module:name"):
        load_verifier("verify")


def test_trusted_header_only_when_configured(queue: TaskQueue) -> None:
    with client(queue, http_trusted_header="X-User") as http:
        assert owner_of_new_task(http, **{"X-User": "erin"}) == "erin"
        assert owner_of_new_task(http, **{"X-User": "  "}) is None
    with client(queue) as http:
        assert owner_of_new_task(http, **{"X-User": "erin"}) is None


def test_idempotency_keys_are_per_principal() -> None:
    secret = b"s" * 32
    assert task_id_for("alice", "k", secret=secret) == task_id_for("alice", "k", secret=secret)
    assert task_id_for("alice", "k", secret=secret) != task_id_for("bob", "k", secret=secret)
    assert task_id_for(None, "k", secret=secret) != task_id_for("", "k", secret=secret)
    assert len(task_id_for("alice", "k", secret=secret)) == 22


def test_an_anonymous_idempotent_id_needs_the_servers_secret() -> None:
    secret, other = b"s" * 32, b"t" * 32
    anonymous = task_id_for(None, "k", secret=secret)
    assert anonymous == task_id_for(None, "k", secret=secret)
    assert anonymous != task_id_for(None, "k", secret=other)
    # Not the key-only digest an outsider could compute.
    material = "\0".join(("queuestore.http idempotency v1", "-", "k")).encode()
    guessable = base64.urlsafe_b64encode(hashlib.sha256(material).digest()[:16])
    assert anonymous != guessable.rstrip(b"=").decode()


def test_an_anonymous_caller_cannot_list_or_watch_but_reads_by_id(queue: TaskQueue) -> None:
    with client(queue, http_tokens={"t1": "alice"}) as http:
        created = http.post("/tasks", json={"name": "job"})
        assert created.status_code == 201
        assert http.get(f"/tasks/{created.json()['id']}").status_code == 200
        for path in ("/tasks", "/events"):
            refused = http.get(path)
            assert refused.status_code == 401
            assert refused.json()["type"].endswith("unauthorized")
            assert refused.headers["www-authenticate"].startswith("Bearer")
        listed = http.get("/tasks", headers={"Authorization": "Bearer t1"})
        assert listed.status_code == 200


def test_an_anonymous_idempotency_key_keeps_its_task_across_processes(queue: TaskQueue) -> None:
    headers = {"Idempotency-Key": "order-42"}
    ids = []
    for _ in range(2):  # two API processes sharing the secret
        with client(queue, http_idempotency_secret="shared") as http:
            ids.append(http.post("/tasks", json={"name": "job"}, headers=headers).json()["id"])
    assert ids[0] == ids[1]
    with client(queue, http_idempotency_secret="another") as http:
        assert http.post("/tasks", json={"name": "job"}, headers=headers).json()["id"] != ids[0]


def test_settings_alone_build_a_working_app(tmp_path: Path) -> None:
    """No queue given: the embedded SQLite store (migrated on start) and the settings' broker."""
    settings = Settings(home=tmp_path, broker_url="memory://")
    with TestClient(create_app(settings)) as http:
        assert http.get("/readyz").json() == {"status": "ok"}
        task_id = http.post("/tasks", json={"name": "job"}).json()["id"]
        assert http.get(f"/tasks/{task_id}").json()["status"] == "submitted"


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("no_such_module_here", "No module named 'no_such_module_here'"),
        ("json:dumps", "--app json:dumps: no TaskQueue or Celery app named dumps"),
    ],
)
def test_serve_refuses_a_bad_app_in_one_line(app: str, message: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "queuestore", "serve", "--app", app, "--port", "0"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUEUESTORE_")}
    done = subprocess.run(
        command,
        check=False,
        env=env | {"QUEUESTORE_HOME": str(tmp_path)},
        capture_output=True,
        timeout=60,
    )
    # As every queuestore command: bad usage exits 2 with one line on stderr.
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().strip().splitlines() == [f"queuestore: error: {message}"]


def test_serve_finds_the_app_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `celery -A` and `queuestore worker -A` do: the tutorial's reports.py, run from
    # its folder by the `queuestore` script (whose own folder is first on sys.path).
    (tmp_path / "served_from_here.py").write_text(
        "from celery import Celery\n\napp = Celery('here', broker='memory://')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    settings = Settings(home=tmp_path)
    served = load_queue("served_from_here", settings)
    try:
        assert served.app.main == "here"
        assert str(tmp_path) not in sys.path  # imported, not left on the path
    finally:
        served.store.close()
        monkeypatch.delitem(sys.modules, "served_from_here")


def test_browsers_cross_site_writes_are_refused(queue: TaskQueue) -> None:
    with client(queue, http_trusted_header="X-User") as http:
        for site in ("cross-site", "same-site"):
            refused = http.post(
                "/tasks", json={"name": "job"}, headers={"X-User": "erin", "Sec-Fetch-Site": site}
            )
            assert refused.status_code == 403
            assert refused.json()["type"] == "urn:queuestore:problem:cross-site-request"
        reads = {"Sec-Fetch-Site": "cross-site", "X-User": "erin"}
        assert http.get("/tasks", headers=reads).status_code == 200
        same = http.post("/tasks", json={"name": "job"}, headers={"Sec-Fetch-Site": "same-origin"})
        assert same.status_code == 201
    assert not list(queue.store.iterate(owner="erin"))


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://testserver:8080"},
        {"Referer": "https://evil.example/page.html"},
        {"Origin": "https://evil.example", "Referer": "http://testserver/dashboard"},
    ],
    ids=["foreign-origin", "null-origin", "other-port", "foreign-referer", "origin-wins"],
)
def test_without_fetch_metadata_a_foreign_origin_cannot_write(
    queue: TaskQueue, headers: dict[str, str]
) -> None:
    with client(queue, http_trusted_header="X-User") as http:
        task = http.post("/tasks", json={"name": "job"}, headers={"X-User": "erin"}).json()
        # An empty form a foreign page posts: no fetch metadata, the proxy's cookie.
        form = {"Content-Type": "application/x-www-form-urlencoded", "X-User": "erin"}
        refused = http.post(f"/tasks/{task['id']}/cancel", content=b"", headers=form | headers)
        assert refused.status_code == 403
        assert refused.json()["type"] == "urn:queuestore:problem:cross-site-request"
        assert http.get(f"/tasks/{task['id']}", headers={"X-User": "erin"}).json()["status"] == (
            "submitted"
        )


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://testserver"},
        {"Origin": "http://TestServer:80"},
        {"Referer": "http://testserver/dashboard"},
    ],
    ids=["no-headers", "same-origin", "same-origin-default-port", "same-origin-referer"],
)
def test_without_fetch_metadata_a_same_origin_or_non_browser_write_is_served(
    queue: TaskQueue, headers: dict[str, str]
) -> None:
    with client(queue, http_trusted_header="X-User") as http:
        created = http.post("/tasks", json={"name": "job"}, headers={"X-User": "erin", **headers})
        assert created.status_code == 201, created.text


class _BrokenStore(InMemoryTaskStore):
    def get(self, task_id: str, *, owner: Any = None) -> Any:
        raise RuntimeError("secret internals at /srv/app.py line 12")


def test_a_bug_is_a_bare_500_problem(caplog: pytest.LogCaptureFixture) -> None:
    app = Celery("http-unit-broken", broker="memory://", set_as_current=False)
    queue = TaskQueue(_BrokenStore(), app)
    try:
        with TestClient(create_app(Settings(), queue=queue), raise_server_exceptions=False) as http:
            response = http.get("/tasks/AAAAAAAAAAAAAAAAAAAAAA")
    finally:
        app.close()
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "urn:queuestore:problem:internal-error"
    assert "secret" not in response.text
    assert "Traceback" not in response.text
    assert "secret internals" in caplog.text  # the details are in the server's log


def test_get_answers_304_for_the_version_the_client_has(queue: TaskQueue) -> None:
    with client(queue) as http:
        task_id = http.post("/tasks", json={"name": "job"}).json()["id"]
        first = http.get(f"/tasks/{task_id}")
        assert first.headers["etag"] == '"1"'
        unchanged = http.get(f"/tasks/{task_id}", headers={"If-None-Match": '"1"'})
        assert unchanged.status_code == 304
        assert unchanged.content == b""
        http.post(f"/tasks/{task_id}/cancel")
        changed = http.get(f"/tasks/{task_id}", headers={"If-None-Match": 'W/"1", "7"'})
        assert changed.status_code == 200
        assert changed.headers["etag"] == '"2"'
        assert changed.json()["status"] == "cancelled"


def test_pages_link_to_the_next_one(queue: TaskQueue) -> None:
    with client(queue, http_tokens={"t1": "alice"}) as http:
        http.headers["Authorization"] = "Bearer t1"
        for _ in range(3):
            http.post("/tasks", json={"name": "job", "context_id": "c"})
        page = http.get("/tasks", params={"context_id": "c", "limit": 2})
        cursor = page.json()["next_cursor"]
        assert page.links["next"]["url"].endswith(f"cursor={cursor}")
        following = http.get(page.links["next"]["url"])
        assert len(following.json()["tasks"]) == 1
        assert "link" not in following.headers


def test_a_job_the_servers_app_does_not_know_is_refused_and_nothing_is_written(
    queue: TaskQueue,
) -> None:
    @job(queue.app, name="reports.build")
    def build(ctx: TaskContext) -> None:
        return None

    with client(queue) as http:
        refused = http.post("/tasks", json={"name": "reports.biuld"})
        assert refused.status_code == 422
        assert refused.json()["type"].endswith("unknown-job")
        assert "reports.build" in refused.json()["detail"]
        assert queue.store.list().tasks == []
        assert http.post("/tasks", json={"name": "reports.build"}).status_code == 201


def test_any_job_name_is_accepted_where_the_server_knows_no_jobs(queue: TaskQueue) -> None:
    with client(queue) as http:
        assert http.post("/tasks", json={"name": "defined.in.the.workers"}).status_code == 201


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def test_a_405_lists_every_method_its_path_allows(queue: TaskQueue) -> None:
    with client(queue) as http:
        paths = http.get("/openapi.json").json()["paths"]
        assert paths
        for template, operations in paths.items():
            allowed = {method.upper() for method in operations}
            path = template.replace("{task_id}", "AAAAAAAAAAAAAAAAAAAAAA")
            for method in set(METHODS) - allowed:
                answer = http.request(method, path)
                assert answer.status_code == 405, (method, path)
                assert set(answer.headers["allow"].split(", ")) == allowed, (method, path)


def test_the_dashboard_allows_its_own_inline_script_and_style_by_digest(queue: TaskQueue) -> None:
    with client(queue) as http:
        page = http.get("/dashboard")
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in page.headers["content-security-policy"].split(";")
    )
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        body = page.text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert policy[directive] == f"'sha256-{digest}'"
    markup = page.text.split("<script>", 1)[0]
    assert re.search(r"\s(style|on[a-z]+)\s*=", markup) is None  # no inline attribute to allow


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested", id="deep"),
        pytest.param(b'{"name": "a\xff"}', "not UTF-8: byte 0xff at 11", id="not-utf-8"),
        pytest.param('{"name": "a"}'.encode("utf-16"), "not UTF-8", id="utf-16"),
        pytest.param(b'{"input": {"a": NaN}}', "NaN is not a JSON number", id="nan"),
        pytest.param(b'{"input": [-Infinity]}', "-Infinity is not", id="infinity"),
        pytest.param(b'{"input": ' + b"9" * 5000 + b"}", "more than 4300 digits", id="huge-int"),
        pytest.param(b'{"name": "a"} {}', "Extra data", id="two-documents"),
    ],
)
def test_a_body_that_is_not_json_is_malformed_json_and_writes_nothing(
    queue: TaskQueue, body: bytes, reason: str
) -> None:
    with client(queue, http_tokens={"t": "alice"}) as http:
        task = http.post("/tasks", json={"name": "a"}, headers={"Authorization": "Bearer t"})
        for path in ("/tasks", f"/tasks/{task.json()['id']}/cancel"):
            answer = http.post(
                path,
                content=body,
                headers={"Authorization": "Bearer t", "Content-Type": "application/json"},
            )
            assert answer.status_code == 400, answer.text
            assert answer.json()["type"] == "urn:queuestore:problem:malformed-json"
            assert reason in answer.json()["detail"]
    assert queue.store.count() == 1
    assert queue.store.get(task.json()["id"]).status is TaskStatus.SUBMITTED


def test_a_byte_order_mark_before_a_json_body_is_ignored(queue: TaskQueue) -> None:
    with client(queue) as http:
        created = http.post(
            "/tasks",
            content=b'\xef\xbb\xbf{"name": "a"}',
            headers={"Content-Type": "application/json"},
        )
    assert created.status_code == 201, created.text


def test_a_batch_holds_up_to_a_thousand_items(queue: TaskQueue) -> None:
    items = [{"name": "job", "input": {"n": n}} for n in range(1000)]
    with client(queue) as http:
        response = http.post("/tasks:batch", json={"tasks": items})
        assert response.status_code == 201, response.text
        assert [task["input"]["n"] for task in response.json()["tasks"]] == list(range(1000))
        over = http.post("/tasks:batch", json={"tasks": [*items, items[0]]})
        assert over.status_code == 422, over.text
    assert queue.store.count() == 1000


def test_the_job_name_pattern_means_the_same_in_json_schema() -> None:
    # The OpenAPI document states NAME_PATTERN, which clients read as ECMA-262. Its \s
    # is not Python's (no U+001C..U+001F or U+0085; U+FEFF): every name the document
    # allows must be one the store takes, so the pattern names those C0/C1 itself.
    ecma_whitespace = r"\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
    as_ecma_reads_it = NAME_PATTERN.replace("\\s", ecma_whitespace)
    for char in map(chr, range(0x10000)):
        if re.match(as_ecma_reads_it, char):
            assert re.match(NAME_PATTERN, char), repr(char)


def test_running_shows_the_caller_s_runs_beside_the_limits() -> None:
    app = Celery("http-limits", broker="memory://", set_as_current=False)
    limits = ConcurrencyLimits(per_owner=2, per_job={"report": 1})
    queue = TaskQueue(InMemoryTaskStore(), app, limits=limits)
    tokens = {"ta": "alice", "tb": "bob"}
    with client(queue, http_tokens=tokens) as http:
        for name in ("job", "job", "report"):
            created = http.post(
                "/tasks", json={"name": name}, headers={"Authorization": "Bearer ta"}
            )
            queue.store.claim(created.json()["id"], "w", timedelta(seconds=30), limits=limits)
        http.post("/tasks", json={"name": "job"}, headers={"Authorization": "Bearer tb"})

        alice = http.get("/tasks:running", headers={"Authorization": "Bearer ta"})
        bob = http.get("/tasks:running", headers={"Authorization": "Bearer tb"})
        anonymous = http.get("/tasks:running")

    assert alice.status_code == 200, alice.text
    # The owner's limit let two run; the third (a report) waits for one of them.
    assert alice.json() == {
        "running": 2,
        "limit": 2,
        "jobs": {"job": {"running": 2, "limit": None}, "report": {"running": 0, "limit": 1}},
    }
    assert bob.json() == {"running": 0, "limit": 2, "jobs": {"report": {"running": 0, "limit": 1}}}
    assert anonymous.status_code == 401
    app.close()


def test_whoami_names_the_callers_principal(queue: TaskQueue) -> None:
    with client(queue, http_tokens={"t1": "alice"}, http_trusted_header="X-User") as http:
        assert http.get("/whoami").json() == {"principal": None, "admin": False}
        assert http.get("/whoami", headers={"Authorization": "Bearer t1"}).json() == {
            "principal": "alice",
            "admin": False,
        }
        carol = http.get("/whoami", headers={"X-User": "carol"}).json()
        assert carol == {"principal": "carol", "admin": False}
        refused = http.get("/whoami", headers={"Authorization": "Bearer t2"})
        assert refused.status_code == 401
        assert refused.json()["type"].endswith("unauthorized")


def test_a_page_counts_the_tasks_its_filters_match_when_asked(queue: TaskQueue) -> None:
    for _ in range(3):
        queue.submit("job", owner="alice")
    queue.store.cancel(queue.submit("job", owner="alice").id)
    queue.submit("job", owner="bob")
    alice = {"Authorization": "Bearer t1"}
    with client(queue, http_tokens={"t1": "alice"}) as http:
        page = http.get("/tasks", params={"limit": 2, "total": "true"}, headers=alice).json()
        assert (len(page["tasks"]), page["total"]) == (2, 4)
        following = http.get(
            "/tasks",
            params={"limit": 2, "total": "true", "cursor": page["next_cursor"]},
            headers=alice,
        ).json()
        assert (len(following["tasks"]), following["total"]) == (2, 4)
        live = http.get(
            "/tasks", params={"status": "submitted", "total": "true"}, headers=alice
        ).json()
        assert live["total"] == 3
        assert http.get("/tasks", headers=alice).json()["total"] is None  # not counted
