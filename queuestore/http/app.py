"""The ASGI application: task verbs, event streams, the dashboard, health probes.

``create_app(settings)`` builds it; ``serve(settings, host, port)`` runs it on
uvicorn. The store and the Celery app are built when the application starts
(from the settings, unless a queue is given) and closed when it stops.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from types import FrameType
from typing import Any, Final

from celery import Celery
from celery.utils.imports import import_from_cwd
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from queuestore import TaskQueue
from queuestore.aio import AsyncTaskQueue
from queuestore.config import Settings
from queuestore.http import batch, flow, operator, problems, schedules, sse, tasks
from queuestore.http.auth import Authenticator, StaticTokens, TokenVerifier, load_verifier
from queuestore.http.body_limit import BodyLimit
from queuestore.http.origin import SameOriginWrites
from queuestore.http.problems import ProblemError
from queuestore.http.schemas import JSON_DOCUMENT_SCHEMA, Health, Whoami, state_jobs
from queuestore.http.service import Principal, Service, ServiceDep

log = logging.getLogger(__name__)

READY_TIMEOUT: Final = 5.0
"""Seconds the readiness probe waits for the store before calling it down."""


def create_app(
    settings: Settings | None = None,
    *,
    queue: TaskQueue | AsyncTaskQueue | None = None,
    verifier: TokenVerifier | None = None,
) -> FastAPI:
    """The HTTP API of a queuestore deployment.

    Args:
        settings: the deployment's settings; by default read from ``QUEUESTORE_*``.
        queue: the queue to serve (the caller keeps closing it); by default one
            is built from ``settings`` when the app starts, on a Celery app of its
            own, and closed when it stops.
        verifier: maps bearer tokens to principals; by default
            ``settings.http_token_verifier``, else the static ``settings.http_tokens``.
    """
    settings = settings if settings is not None else Settings()
    if verifier is None:
        if settings.http_token_verifier is not None:
            verifier = load_verifier(settings.http_token_verifier)
        elif settings.http_tokens:
            verifier = StaticTokens(settings.http_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        given = queue.sync if isinstance(queue, AsyncTaskQueue) else queue
        served = given if given is not None else _queue_from(settings)
        auth = Authenticator(
            verifier,
            trusted_header=settings.http_trusted_header,
            require_principal=served.store.require_owner,
        )
        service = Service(AsyncTaskQueue(served), auth, settings)
        if settings.http_idempotency_secret is None and settings.cursor_secret is None:
            log.warning(
                "neither QUEUESTORE_HTTP_IDEMPOTENCY_SECRET nor QUEUESTORE_CURSOR_SECRET is set: "
                "an anonymous caller's Idempotency-Key holds within this process only"
            )
        service.loop = asyncio.get_running_loop()
        app.state.queuestore = service
        app.state.metrics = _metrics_of(served)
        try:
            async with served.store.open_async():
                yield
        finally:
            service.close_streams()
            if given is None:
                served.store.close()
                served.app.close()

    app = FastAPI(
        title="queuestore",
        summary="Durable tasks run as Celery jobs: create, inspect, cancel, resume, watch.",
        version=_version(),
        lifespan=lifespan,
    )
    _document_json(app)
    problems.install(app, retry_after=settings.http_retry_after)
    app.add_middleware(BodyLimit, max_bytes=settings.http_max_body_bytes)
    app.add_middleware(SameOriginWrites)
    app.include_router(tasks.router)
    app.include_router(batch.router)
    app.include_router(sse.router)
    app.include_router(operator.router)
    app.include_router(schedules.router)
    app.include_router(flow.router)
    _health(app)
    _whoami(app)
    _dashboard(app)
    _metrics(app)
    return app


def _document_json(app: FastAPI) -> None:
    """Add the ``JsonDocument`` component the request bodies refer to and, once the
    app runs, the jobs of its queue's Celery app (:func:`~queuestore.http.schemas.state_jobs`).
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        document = build()
        components = document.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("JsonDocument", JSON_DOCUMENT_SCHEMA)
        service: Service | None = getattr(app.state, "queuestore", None)
        if service is not None:
            state_jobs(components, tasks.jobs_of(service))
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _queue_from(settings: Settings) -> TaskQueue:
    app = settings.configure(Celery("queuestore.http", set_as_current=False))
    return settings.make_queue(app, beat=False)


def load_queue(path: str, settings: Settings) -> TaskQueue:
    """The :class:`TaskQueue` at ``module[:name]``, or one on the Celery app there.

    The module is looked up in the current folder too, as ``celery -A`` does.

    Raises:
        ImportError: the module cannot be imported.
        ValueError: nothing there is a TaskQueue or a Celery app.
    """
    module_name, _, name = path.partition(":")
    module = import_from_cwd(module_name)
    names = [name] if name else ["queue", "app"]
    for candidate in names:
        found = getattr(module, candidate, None)
        if isinstance(found, TaskQueue):
            return found
        if isinstance(found, Celery):
            return settings.make_queue(found, beat=False)
    raise ValueError(f"--app {path}: no TaskQueue or Celery app named {' or '.join(names)}")


def _health(app: FastAPI) -> None:
    @app.get("/livez", tags=["health"])
    async def livez() -> Health:
        """The process answers; the store is not consulted (a liveness probe)."""
        return Health(status="ok")

    @app.get("/readyz", tags=["health"], responses=problems.responses(503))
    async def readyz(service: ServiceDep) -> Health:
        """The store answers a query (a readiness probe); 503 when it does not."""
        try:
            await asyncio.wait_for(service.store.list(limit=1), READY_TIMEOUT)
        except Exception as exc:
            log.warning("readiness: the store does not answer: %r", exc)
            raise ProblemError(
                503,
                "store-unavailable",
                "the task store does not answer",
                headers={"Retry-After": str(service.settings.http_retry_after)},
            ) from None
        return Health(status="ok")


def _whoami(app: FastAPI) -> None:
    @app.get("/whoami", tags=["auth"], responses=problems.responses(401))
    async def whoami(principal: Principal, service: ServiceDep) -> Whoami:
        """Who the server takes the caller for: its principal, null when anonymous, and
        whether it operates the server; 401 for a token that is not valid."""
        return Whoami(principal=principal, admin=service.is_admin(principal))


def _metrics(app: FastAPI) -> None:
    """``/metrics``: the store's and this process's Prometheus metrics (extra ``metrics``)."""
    if importlib.util.find_spec("prometheus_client") is not None:
        app.router.routes.append(Route("/metrics", _MetricsEndpoint(app), methods=["GET"]))


def _metrics_of(queue: TaskQueue) -> ASGIApp | None:
    """The metrics app of the served store, counting its writes from the start (or None)."""
    if importlib.util.find_spec("prometheus_client") is None:
        return None
    from queuestore.metrics.prometheus import metrics_app

    return metrics_app(queue.store, backlog_after=queue.options.publish_grace)


class _MetricsEndpoint:
    """An ASGI app that hands ``/metrics`` to the started app's metrics app."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        served: ASGIApp = self.app.state.metrics
        await served(scope, receive, send)


def _dashboard(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/dashboard")

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse(DASHBOARD_PAGE, headers=_PAGE_HEADERS)


DASHBOARD_PAGE: Final = (
    resources.files("queuestore.http").joinpath("dashboard.html").read_text("utf-8")
)


def inline_hashes(page: str, tag: str) -> str:
    """The CSP sources (``'sha256-...'``) allowing each inline ``<tag>`` element of ``page``.

    The page's one script and one style are allowed by their digest, so no other inline
    script or style runs, even if a rendering bug let markup into the page.
    """
    bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    if not bodies:
        raise ValueError(f"the page has no inline <{tag}>")
    digests = (hashlib.sha256(body.encode()).digest() for body in bodies)
    return " ".join(f"'sha256-{base64.b64encode(digest).decode()}'" for digest in digests)


_PAGE_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        f"default-src 'self'; script-src {inline_hashes(DASHBOARD_PAGE, 'script')}; "
        f"style-src {inline_hashes(DASHBOARD_PAGE, 'style')}; "
        "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("queuestore")
    except PackageNotFoundError:
        return "0"


def serve(
    settings: Settings | None = None,
    host: str | None = None,
    port: int | None = None,
    *,
    queue: TaskQueue | str | None = None,
) -> None:
    """Run the API on uvicorn until SIGINT or SIGTERM.

    Args:
        host: the address to listen on; default ``settings.http_host``.
        port: the port; default ``settings.http_port`` (0 picks a free one).
        queue: the queue to serve, or ``module[:name]`` of a :class:`TaskQueue` or a
            Celery app (default name ``queue``, then ``app``) -- the workers' own, so
            that creates check input against the registered jobs and are published
            with the workers' routing; by default one built from ``settings``.

    Raises:
        ImportError: ``queue`` names a module that cannot be imported.
        ValueError: ``queue`` names neither a TaskQueue nor a Celery app.
    """
    import uvicorn

    settings = settings if settings is not None else Settings()
    served = load_queue(queue, settings) if isinstance(queue, str) else queue
    app = create_app(settings, queue=served)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Event streams never end by themselves: end them, so that the
            # graceful shutdown waits only for ordinary requests.
            service: Service | None = getattr(app.state, "queuestore", None)
            if service is not None:
                service.close_streams()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        host=host if host is not None else settings.http_host,
        port=port if port is not None else settings.http_port,
        timeout_graceful_shutdown=10,
    )
    Server(config).run()
