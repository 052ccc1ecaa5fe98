"""Fuzz the API from its own OpenAPI document: no 5xx, every response as documented.

Every schema-valid request must be accepted (``positive_data_acceptance``): the
document states each limit the server enforces. The run is derandomized
(a fixed seed) with a bounded number of examples per operation, 2240 in all.

The servers run on a deployment of their own (a fresh database, a queue with no
worker), so the generated tasks never meet the other tests' assertions: one
without the workers' app, which takes any job name, and one with it
(``--app http_app``), whose document names its jobs and the input each takes,
for the creates. The event streams are left out: they stay open by design, and
test_http_api covers them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from tests.http.http_deployment import Api, HttpDeployment

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.integration]

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.positive_data_acceptance,
]

KEYS = itertools.count()

CALLBACK_URL = "https://93.184.216.34/hook"
"""A callback URL every deployment accepts: a public address, with no name to resolve."""

EXAMPLES = 70
"""Examples per operation: 2100 cases over the thirty operations, 140 over the creates
of the server that knows the jobs."""


def unique(key: str) -> str:
    """``key`` made unlike every other key of the run, and still a valid key."""
    return f"{next(KEYS)}-{key}"[:255].rstrip()


@pytest.fixture(scope="module")
def deployment(make_deployment: Callable[[], HttpDeployment]) -> HttpDeployment:
    return make_deployment()


@pytest.fixture(scope="module")
def fuzzed(deployment: HttpDeployment) -> Iterator[Api]:
    """A server without the workers' app: any job name, any input."""
    api = deployment.start_api(app=None)
    yield api
    deployment.stop(api)


@pytest.fixture(scope="module")
def knowing(deployment: HttpDeployment) -> Iterator[Api]:
    """A server with the workers' app: it refuses other names, and input that does not
    fit the job's function (422), and its document says so."""
    api = deployment.start_api(app="http_app")
    yield api
    deployment.stop(api)


OPERATIONS = [
    "POST /tasks",
    "POST /tasks:batch",
    "GET /tasks",
    "GET /tasks:running",
    "GET /tasks/{task_id}",
    "POST /tasks/{task_id}/cancel",
    "POST /tasks/{task_id}/resume",
    "GET /tasks/{task_id}/steps",
    "GET /tasks/{task_id}/timeline",
    "POST /tasks/{task_id}/resubmit",
    "GET /tasks/{task_id}/deliveries",
    "POST /tasks/{task_id}/deliveries/{delivery_id}/redeliver",
    "DELETE /tasks/{task_id}",
    "GET /whoami",
    "GET /operator/overview",
    "GET /operator/workers",
    "GET /operator/flow",
    "PUT /operator/pauses/{kind}/{value}",
    "DELETE /operator/pauses/{kind}/{value}",
    "POST /operator/workers/{node}/drain",
    "GET /livez",
    "GET /readyz",
    "POST /schedules",
    "GET /schedules",
    "GET /schedules/{schedule_id}",
    "PATCH /schedules/{schedule_id}",
    "POST /schedules/{schedule_id}/pause",
    "POST /schedules/{schedule_id}/resume",
    "POST /schedules/{schedule_id}/trigger",
    "DELETE /schedules/{schedule_id}",
]


CREATES = ["POST /tasks", "POST /tasks:batch"]


@pytest.fixture(scope="module")
def api_schema(fuzzed: Api) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")


@pytest.fixture(scope="module")
def knowing_schema(knowing: Api) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{knowing.url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema: schemathesis.BaseSchema) -> None:
    labels = {result.ok().label for result in api_schema.get_all_operations()}
    assert labels - set(OPERATIONS) == {"GET /events", "GET /tasks/{task_id}/events"}


def test_the_knowing_servers_document_names_its_jobs(
    knowing_schema: schemathesis.BaseSchema,
) -> None:
    create = knowing_schema.raw_schema["components"]["schemas"]["CreateTask"]
    assert "http.add" in create["properties"]["name"]["enum"]


@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_matches_its_schema(api_schema: schemathesis.BaseSchema, label: str) -> None:
    fuzz(api_schema, label)


@pytest.mark.parametrize("label", CREATES)
def test_a_create_matches_the_schema_of_a_server_that_knows_the_jobs(
    knowing_schema: schemathesis.BaseSchema, label: str
) -> None:
    fuzz(knowing_schema, label)


def timely(body: object) -> None:
    """A schedule's timing made one a server takes: whether a text is a cron expression or
    a timezone, and that exactly one of cron and every is given, a schema cannot say
    (test_http_schedules covers the refusals); and its owner the caller's own."""
    if not isinstance(body, dict):
        return
    if isinstance(body.get("cron"), str):
        body["cron"] = "*/5 * * * *"
    if isinstance(body.get("timezone"), str):
        body["timezone"] = "Europe/Paris"
    if "name" in body:  # a create: one of the two
        if body.get("cron") is None and body.get("every") is None:
            body["every"] = 60
        if body.get("cron") is not None:
            body.pop("every", None)
        body.pop("owner", None)
    elif body.get("cron") is not None and body.get("every") is not None:
        body.pop("every")


def fuzz(api_schema: schemathesis.BaseSchema, label: str) -> None:
    """Run the operation's derandomized examples; each must pass every check."""
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        if case.query:
            # A cursor is an opaque token only the server makes: a made-up one is a 400.
            case.query.pop("cursor", None)
        for header in [h for h in case.headers or {} if h.lower() == "idempotency-key"]:
            # A key reused with another body is a 422 by design (test_http_api): one per case.
            case.headers[header] = unique(case.headers[header])
        items = case.body.get("tasks") if isinstance(case.body, dict) else None
        for body in [case.body, *(items if isinstance(items, list) else [])]:
            callback = body.get("callback") if isinstance(body, dict) else None
            if isinstance(callback, dict):
                # Whether a URL is called depends on where its host resolves, which a schema
                # cannot say (test_http_callbacks covers the refusals): one the server calls.
                callback["url"] = CALLBACK_URL
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("idempotency_key"), str):
                # The same within a batch too (test_http_batch): one per item.
                item["idempotency_key"] = unique(item["idempotency_key"])
        if label.startswith(("POST /schedules", "PATCH /schedules")):
            timely(case.body)
        case.call_and_validate(headers={"Authorization": "Bearer token-alice"}, checks=CHECKS)

    check()
