"""What every route of the API shares: the queue, the authenticator, the settings.

It also says who operates the API: the principals ``Settings.http_admins``
names see and act on every owner's tasks (:meth:`Service.owner_for`) and read
the operator's views (:data:`Admin`); each of their actions is logged on the
``queuestore.http.admin`` logger with who took it (:meth:`Service.audit`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from queuestore import ANY
from queuestore.aio import AsyncTaskQueue, AsyncTaskStore
from queuestore.config import Settings
from queuestore.core.owner import Owner
from queuestore.http.auth import Authenticator, forbidden, named

audit_log = logging.getLogger("queuestore.http.admin")
"""Where every admin action is logged, with who took it."""


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

    def is_admin(self, principal: str | None) -> bool:
        """Whether ``principal`` operates the API (``Settings.http_admins``)."""
        return principal is not None and principal in self.settings.http_admins

    def owner_for(self, principal: str | None) -> Owner:
        """The owner filter of ``principal``'s reads and writes: every owner's for an admin."""
        return ANY if self.is_admin(principal) else principal

    def audit(self, principal: str | None, action: str, **details: object) -> None:
        """Log an admin's action with who took it (nothing for other principals)."""
        if not self.is_admin(principal):
            return
        said = " ".join(f"{key}={value}" for key, value in details.items())
        audit_log.info(
            "admin %s: %s %s",
            principal,
            action,
            said,
            extra={"principal": principal, "action": action, **details},
        )


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


async def require_admin(principal: Principal, service: ServiceDep) -> str:
    """The caller's principal if it operates the API.

    Raises:
        ProblemError: 401 for an anonymous caller, 403 ``forbidden`` for a
            principal ``Settings.http_admins`` does not name.
    """
    who = named(principal, "the operator's views")
    if not service.is_admin(who):
        raise forbidden(f"{who!r} is not an operator of this server (QUEUESTORE_HTTP_ADMINS)")
    return who


Admin = Annotated[str, Depends(require_admin)]
"""The caller's principal, an operator's (401 anonymous, 403 ``forbidden`` any other)."""
