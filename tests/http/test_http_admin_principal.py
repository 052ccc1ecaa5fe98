"""Operators of the API (``http_admins``): who they are, and the dependency that admits only them.

A principal the setting names is an admin, whether a bearer token or the
trusted header named it; ``require_admin`` admits it, refuses any other
principal with 403 and an anonymous caller with 401; every admin action is
logged with who took it (queuestore.http.admin).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from celery import Celery
from fastapi import FastAPI
from fastapi.testclient import TestClient

from queuestore import InMemoryTaskStore, Settings, TaskQueue
from queuestore.http import create_app
from queuestore.http.service import Admin, ServiceDep

TOKENS = {"t-ops": "ops", "t-alice": "alice"}


@pytest.fixture
def app() -> Iterator[FastAPI]:
    celery = Celery("http-admin", broker="memory://", set_as_current=False)
    settings = Settings(http_tokens=TOKENS, http_admins='["ops", "proxy-ops"]')
    served = create_app(settings, queue=TaskQueue(InMemoryTaskStore(), celery))

    @served.get("/admin-only")
    async def admin_only(admin: Admin, service: ServiceDep) -> dict[str, str]:
        service.audit(admin, "looked", task_id="t1")
        return {"admin": admin}

    yield served
    celery.close()


def test_whoami_says_who_operates_the_server(app: FastAPI) -> None:
    with TestClient(app) as http:
        ops = http.get("/whoami", headers={"Authorization": "Bearer t-ops"}).json()
        alice = http.get("/whoami", headers={"Authorization": "Bearer t-alice"}).json()
        anonymous = http.get("/whoami").json()

    assert ops == {"principal": "ops", "admin": True}
    assert alice == {"principal": "alice", "admin": False}
    assert anonymous == {"principal": None, "admin": False}


def test_require_admin_admits_only_the_admins_and_logs_what_they_do(
    app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(app) as http, caplog.at_level(logging.INFO, "queuestore.http.admin"):
        admitted = http.get("/admin-only", headers={"Authorization": "Bearer t-ops"})
        refused = http.get("/admin-only", headers={"Authorization": "Bearer t-alice"})
        anonymous = http.get("/admin-only")

    assert (admitted.status_code, admitted.json()) == (200, {"admin": "ops"})
    assert (refused.status_code, refused.json()["type"]) == (
        403,
        "urn:queuestore:problem:forbidden",
    )
    assert anonymous.status_code == 401
    (line,) = [r for r in caplog.records if r.name == "queuestore.http.admin"]
    assert line.getMessage() == "admin ops: looked task_id=t1"


def test_a_trusted_header_may_name_an_admin() -> None:
    celery = Celery("http-admin-proxy", broker="memory://", set_as_current=False)
    settings = Settings(http_trusted_header="X-User", http_admins=["proxy-ops"])
    try:
        with TestClient(create_app(settings, queue=TaskQueue(InMemoryTaskStore(), celery))) as http:
            assert http.get("/whoami", headers={"X-User": "proxy-ops"}).json()["admin"] is True
            assert http.get("/whoami", headers={"X-User": "bob"}).json()["admin"] is False
    finally:
        celery.close()
