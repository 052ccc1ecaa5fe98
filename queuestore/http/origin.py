"""Refuse state-changing requests that a browser sends on behalf of another site.

Bearer tokens are never sent by a browser on its own, but the credentials an
authenticating proxy turns into the trusted header (cookies, mostly) are: a
page elsewhere could make the signed-in user's browser cancel or create
tasks. Browsers mark such requests with ``Sec-Fetch-Site: cross-site`` (or
``same-site``, another host of the same site); they are answered 403.
Where a browser sends no fetch metadata (older browsers, some proxies strip
it), the ``Origin`` header decides, or the ``Referer`` when there is no
``Origin`` (OWASP's CSRF cheat sheet: fetch metadata with an origin
fallback): a write whose origin is not this server's host is answered 403 too,
and so is ``Origin: null`` (a sandboxed page, a redirect across sites).
Programs other than browsers send none of these headers and are not affected.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from queuestore.http.problems import problem

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
FOREIGN: Final = frozenset({"cross-site", "same-site"})
WEB_SCHEMES: Final = frozenset({"http", "https"})
DEFAULT_PORTS: Final = (80, 443)


def foreign(headers: Headers) -> bool:
    """Whether a browser sent this request on behalf of a page of another origin."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site in FOREIGN
    source = headers.get("origin") or headers.get("referer")
    if source is None:
        return False  # not a browser, or one that says nothing: nothing to compare
    host = headers.get("host")
    return host is None or _host_of(source) != _normal_host(host)


def _host_of(url: str) -> str | None:
    """``host[:port]`` of an origin or a URL (ports 80 and 443 left out); None if not web."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in WEB_SCHEMES or not parts.hostname:
        return None  # "null", or not a web origin
    host = parts.hostname if port in (None, *DEFAULT_PORTS) else f"{parts.hostname}:{port}"
    return host.lower()


def _normal_host(host: str) -> str:
    """The ``Host`` header as :func:`_host_of` shows a host (ports 80 and 443 left out)."""
    value = host.strip().lower()
    name, separator, port = value.rpartition(":")
    if separator and port.isdigit() and int(port) in DEFAULT_PORTS and not name.endswith(":"):
        return name
    return value


class SameOriginWrites:
    """ASGI middleware: a 403 problem for a browser's cross-site request that writes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] not in SAFE_METHODS
            and foreign(Headers(scope=scope))
        ):
            response = problem(
                403, "cross-site-request", "a browser sent this request on behalf of another site"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
