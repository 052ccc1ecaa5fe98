"""Errors as RFC 9457 problem details (``application/problem+json``), never a stack trace.

Each queuestore error maps to one status code here, in one table; FastAPI's
validation errors and Starlette's HTTP errors are rewritten in the same shape,
and anything unexpected becomes a bare 500 whose details stay in the server's log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from queuestore.core.errors import (
    BrokerUnavailable,
    CallbackRefused,
    InvalidCursor,
    InvalidTaskData,
    InvalidTransition,
    QueueStoreError,
    ScheduleNotFound,
    StoreUnavailable,
    TaskConflict,
    TaskNotFound,
)

log = logging.getLogger(__name__)

MEDIA_TYPE: Final = "application/problem+json"
TYPE_PREFIX: Final = "urn:queuestore:problem:"

_TITLES: Final = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class FieldError(BaseModel):
    """One invalid part of a request."""

    loc: list[str | int] = Field(description="Where: body, query, path or header, then names.")
    msg: str
    type: str


class Problem(BaseModel):
    """An RFC 9457 problem details object."""

    type: str = Field(description="A URI naming the kind of problem.")
    title: str
    status: int
    detail: str | None = None
    task_id: str | None = Field(None, description="The task the problem is about, if any.")
    errors: list[FieldError] | None = Field(None, description="Each invalid part of the request.")


class ProblemError(Exception):
    """Raise to answer with a problem; ``kind`` becomes the type URI's last segment."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        task_id: str | None = None,
        errors: Sequence[FieldError] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers = dict(headers or {})
        self.task_id = task_id
        self.errors = None if errors is None else list(errors)


def problem(
    status: int,
    kind: str,
    detail: str | None,
    *,
    headers: Mapping[str, str] | None = None,
    task_id: str | None = None,
    errors: Sequence[FieldError] | None = None,
) -> JSONResponse:
    """A problem details response."""
    body = Problem(
        type=TYPE_PREFIX + kind,
        title=_TITLES.get(status, "Error"),
        status=status,
        detail=detail,
        task_id=task_id,
        errors=list(errors) if errors is not None else None,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        headers=dict(headers or {}),
        media_type=MEDIA_TYPE,
    )


_STORE_ERRORS: Final[tuple[tuple[type[QueueStoreError], int, str], ...]] = (
    (TaskNotFound, 404, "task-not-found"),
    (ScheduleNotFound, 404, "schedule-not-found"),
    (InvalidTransition, 409, "invalid-transition"),
    (TaskConflict, 409, "task-conflict"),
    (InvalidCursor, 400, "invalid-cursor"),
    (CallbackRefused, 422, "callback-refused"),
    (InvalidTaskData, 422, "invalid-task-data"),
)
"""The one mapping from queuestore errors to status codes; first match wins."""


def install(app: FastAPI, *, retry_after: int) -> None:
    """Answer every error raised by ``app``'s routes with a problem."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(QueueStoreError, _store_error_handler(retry_after))
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem(
        exc.status,
        exc.kind,
        exc.detail,
        headers=exc.headers,
        task_id=exc.task_id,
        errors=exc.errors,
    )


def _store_error_handler(
    retry_after: int,
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    unavailable = {"Retry-After": str(retry_after)}

    async def on_store_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, QueueStoreError)
        if isinstance(exc, StoreUnavailable | BrokerUnavailable):
            # The cause names hosts and drivers: it goes to the log, not to the client.
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            store = isinstance(exc, StoreUnavailable)
            kind = "store-unavailable" if store else "broker-unavailable"
            what = "task store" if store else "message broker"
            detail = f"the {what} is unavailable; retry later"
            return problem(503, kind, detail, headers=unavailable)
        for error_type, status, kind in _STORE_ERRORS:
            if isinstance(exc, error_type):
                errors = _refused_callback(exc, kind) if isinstance(exc, CallbackRefused) else None
                return problem(status, kind, str(exc), task_id=exc.task_id, errors=errors)
        return await _on_unexpected(request, exc)

    return on_store_error


def _refused_callback(exc: CallbackRefused, kind: str) -> list[FieldError]:
    """The field of a refused callback URL, located in the body as FastAPI would."""
    loc: list[str | int] = ["body", *(exc.field or "callback.url").split(".")]
    return [FieldError(loc=loc, msg=f"{exc.url!r} refused: {exc.reason}", type=kind)]


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        FieldError(
            loc=[part for part in error.get("loc", ()) if isinstance(part, str | int)],
            msg=str(error.get("msg", "")),
            type=str(error.get("type", "")),
        )
        for error in exc.errors()
    ]
    refused = _body_problem(request, exc, errors) or _limit_problem(errors)
    if refused is not None:
        return refused
    detail = "invalid request"
    if errors:
        detail = f"{'.'.join(str(part) for part in errors[0].loc)}: {errors[0].msg}"
    return problem(422, "invalid-request", detail, errors=errors)


def _body_problem(
    request: Request, exc: RequestValidationError, errors: list[FieldError]
) -> JSONResponse | None:
    """A body that is not JSON: 415 when it is not declared so, 400 when it does not parse."""
    if any(error.loc[:1] == ["body"] for error in errors) and not _is_json(request):
        media = request.headers.get("content-type", "none")
        detail = f"the request body must be application/json, not {media}"
        return problem(415, "unsupported-media-type", detail)
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error")
            detail = "the request body is not valid JSON" + (f": {reason}" if reason else "")
            return problem(400, "malformed-json", detail, errors=errors)
    return None


def _limit_problem(errors: list[FieldError]) -> JSONResponse | None:
    """The limits stated in the schema keep the answers documented before them."""
    if any(error.loc == ["header", "idempotency-key"] for error in errors):
        detail = "Idempotency-Key must be 1 to 255 printable characters"
        return problem(400, "invalid-idempotency-key", detail)
    if any(error.loc == ["path", "task_id"] for error in errors):
        detail = "task_id: must be 1 to 64 characters of [A-Za-z0-9_-]"
        return problem(422, "invalid-task-data", detail)
    return None


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = _TITLES.get(exc.status_code, "error").lower().replace(" ", "-")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names the methods of the first route on the path only.
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem(exc.status_code, kind, str(exc.detail), headers=headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem(500, "internal-error", "the server failed to answer; see its log")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves on the request's path (RFC 9110 15.5.6)."""
    return sorted(_methods_on(request.app.router.routes, {**request.scope, "method": "GET"}))


def _methods_on(routes: Iterable[Any], scope: dict[str, Any]) -> set[str]:
    methods: set[str] = set()
    for route in routes:
        match, child_scope = route.matches(scope)
        if match is Match.NONE:
            continue
        # A mount, or a router FastAPI included (its routes carry their full paths).
        nested = getattr(route, "routes", None)
        if nested is None:
            nested = getattr(getattr(route, "original_router", None), "routes", None)
        if nested is not None:
            methods |= _methods_on(nested, {**scope, **child_scope})
        elif served := getattr(route, "methods", None):
            methods |= set(served)
    return methods


def _is_json(request: Request) -> bool:
    """Whether the request's body is declared as JSON."""
    media = request.headers.get("content-type")
    if media is None:  # JSON only if there is no body at all: then fields are missing
        return request.headers.get("content-length", "0") == "0" and (
            "transfer-encoding" not in request.headers
        )
    essence = media.split(";", 1)[0].strip().lower()
    return essence == "application/json" or essence.endswith("+json")


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the problems a route may answer with."""
    return {
        status: {
            "model": Problem,
            "description": _TITLES.get(status, "Error"),
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }
