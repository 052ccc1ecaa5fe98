"""What every route of the API shares: the queue, the authenticator, the settings."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from queuestore.aio import AsyncTaskQueue, AsyncTaskStore
from queuestore.config import Settings
from queuestore.http.auth import Authenticator


@dataclass
class Service:
    """The state of one API process.

    Attributes:
        queue: where tasks are created, cancelled and resumed.
        auth: resolves each request's principal.
        settings: the deployment's settings.
        keepalive: seconds between two keep-alive comments on an idle event stream.
        closing: set when the server shuts down: event streams end at once.
    """

    queue: AsyncTaskQueue
    auth: Authenticator
    settings: Settings
    keepalive: float = 15.0
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    loop: asyncio.AbstractEventLoop | None = None

    def close_streams(self) -> None:
        """End every event stream; callable from any thread (e.g. a signal handler)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.closing.set)

    @cached_property
    def idempotency_secret(self) -> bytes:
        """The key of anonymous callers' idempotent ids (see :mod:`queuestore.http.idempotency`)."""
        configured = self.settings.http_idempotency_secret or self.settings.cursor_secret
        if configured is None:
            return secrets.token_bytes(32)
        return configured.get_secret_value().encode()

    @property
    def store(self) -> AsyncTaskStore:
        return self.queue.store


def _service(request: Request) -> Service:
    service: Service = request.app.state.queuestore
    return service


# Declares the bearer scheme in the OpenAPI document; Authenticator does the checking.
_bearer = HTTPBearer(auto_error=False, description="A token the server maps to a principal.")


async def _principal(
    request: Request,
    service: Annotated[Service, Depends(_service)],
    _: Annotated[object, Depends(_bearer)],
) -> str | None:
    return await service.auth.principal(request)


ServiceDep = Annotated[Service, Depends(_service)]
Principal = Annotated[str | None, Depends(_principal)]
"""The caller's principal (the owner of its tasks); None for an anonymous caller."""
