"""Refuse state-changing requests that a browser sends on behalf of another site.

Bearer tokens are never sent by a browser on its own, but the credentials an
authenticating proxy turns into the trusted header (cookies, mostly) are: a
page elsewhere could make the signed-in user's browser cancel or create
tasks. Browsers mark such requests with ``Sec-Fetch-Site: cross-site`` (or
``same-site``, another host of the same site); they are answered 403.
Programs other than browsers send no such header and are not affected.
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from queuestore.http.problems import problem

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
FOREIGN: Final = frozenset({"cross-site", "same-site"})


class SameOriginWrites:
    """ASGI middleware: a 403 problem for a browser's cross-site request that writes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] not in SAFE_METHODS
            and Headers(scope=scope).get("sec-fetch-site") in FOREIGN
        ):
            response = problem(
                403, "cross-site-request", "a browser sent this request on behalf of another site"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
