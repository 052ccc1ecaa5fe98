"""One callback POST: pinned to the addresses the URL policy accepted, bounded in time and size.

The host is resolved and checked at each call (:mod:`queuestore.core.urls`),
and the connection goes to a checked address: TLS still verifies the
certificate for, and sends SNI of, the URL's host, so DNS rebinding gets
nothing. Redirects are never followed.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuestore.core.errors import CallbackRefused
from queuestore.core.urls import Target, Unresolved, UrlPolicy, first_refusal, lookup, split_url

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_RETRYABLE_CLIENT_ERRORS = frozenset({408, 409, 425, 429})
_READ_CHUNK = 16 * 1024
# Headers post() writes itself; a caller's value for one of them would contradict the request.
_MANAGED_HEADERS = frozenset({"content-length", "host", "connection", "transfer-encoding"})


# --- Sending -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    """The reply to a call that succeeded (status 2xx).

    Attributes:
        status: the HTTP status.
        body: the start of the reply's body, at most ``max_response_bytes`` of it.
        elapsed: seconds from the start of the call to the end of reading.
    """

    status: int
    body: bytes
    elapsed: float


class CallFailed(Exception):
    """One call that did not succeed.

    A connect error, a timeout, a refused address at connect time, or a non-2xx status (3xx
    included: redirects are never followed).

    Attributes:
        reason: a short phrase, also the exception's message.
        status: the HTTP status, when a status line was received.
        retryable: whether calling again later may succeed. False for a refused address or
            URL, a redirect, and 4xx other than 408, 409, 425 and 429.
    """

    def __init__(self, reason: str, *, status: int | None = None, retryable: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retryable = retryable


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    policy: UrlPolicy,
    timeout: float = 10.0,
    max_response_bytes: int = 64 * 1024,
    user_agent: str = "queuestore-webhooks",
) -> Response:
    """POST ``body`` to ``url`` once, connecting only to addresses ``policy`` accepts.

    The host is resolved and checked now, and the connection goes to a checked address
    (TLS still verifies the certificate for, and sends SNI of, the URL's host). Redirects
    are not followed. Once a 2xx status line has arrived the call counts as a success: an
    error while reading the body only cuts the body short.

    Args:
        url: the callback URL.
        body: the request body.
        headers: extra request headers, e.g. from :func:`signature_headers`. They may
            replace ``Content-Type`` (``application/json`` by default) and ``User-Agent``.
        policy: which addresses may be called.
        timeout: seconds; bounds the connect, each read, and the whole call. DNS
            resolution is not interruptible and is only counted against it.
        max_response_bytes: how much of the reply's body to keep; the rest is not read.
        user_agent: the ``User-Agent`` header.

    Returns:
        The status, the start of the body, and the time taken.

    Raises:
        CallFailed: the call did not succeed; see its ``retryable``.
        ValueError: ``headers`` sets Content-Length, Host, Connection or
            Transfer-Encoding, or a name or value HTTP cannot carry; or a bad ``timeout``
            or ``max_response_bytes``.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")
    if max_response_bytes < 0:
        raise ValueError(f"max_response_bytes may not be negative, not {max_response_bytes!r}")
    deadline = _Deadline(timeout)
    request_headers = _request_headers(headers, body, user_agent)
    try:
        target = split_url(url, policy.schemes)
    except CallbackRefused as exc:
        raise CallFailed(exc.reason, retryable=False) from None
    try:
        addresses = lookup(target.host, target.port)
    except Unresolved as exc:
        raise CallFailed(f"{target.host} {exc.reason}") from None
    refusal = first_refusal(policy, addresses)
    if refusal is not None:
        raise CallFailed(f"{target.host} {refusal}", retryable=False)
    connection = _connection(target, addresses, deadline)
    response: http.client.HTTPResponse | None = None
    try:
        connection.request("POST", target.path, body=body, headers=request_headers)
        response = _bounded_response(connection, deadline)
        response.begin()
        status = response.status
        if 200 <= status < 300:
            data = _read_capped(response, max_response_bytes)
            return Response(status=status, body=data, elapsed=deadline.elapsed())
    except (OSError, http.client.HTTPException) as exc:
        raise CallFailed(_describe(exc)) from exc
    finally:
        if response is not None:
            response.close()
        connection.close()
    if 300 <= status < 400:
        raise CallFailed(f"redirect {status} not followed", status=status, retryable=False)
    retryable = not 400 <= status < 500 or status in _RETRYABLE_CLIENT_ERRORS
    raise CallFailed(f"HTTP {status}", status=status, retryable=retryable)


class _Deadline:
    """The time left for one call."""

    def __init__(self, timeout: float) -> None:
        self.started = time.monotonic()
        self.timeout = timeout

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        """Seconds left, for a socket timeout; :class:`TimeoutError` if there are none."""
        left = self.timeout - self.elapsed()
        if left <= 0:
            raise TimeoutError("timed out")
        return left


def _request_headers(headers: Mapping[str, str], body: bytes, user_agent: str) -> dict[str, str]:
    merged = {"Content-Type": "application/json", "User-Agent": user_agent}
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in _MANAGED_HEADERS:
            raise ValueError(f"header {name!r} is set by post() itself")
        for default in ("Content-Type", "User-Agent"):
            if lowered == default.lower():
                del merged[default]
        merged[name] = value
    merged["Content-Length"] = str(len(body))
    merged["Connection"] = "close"
    return merged


def _open_socket(
    addresses: list[tuple[socket.AddressFamily, str]], port: int, deadline: _Deadline
) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that accepts one."""
    error: OSError = OSError("no address to connect to")
    for _family, address in addresses:
        remaining = deadline.remaining()
        try:
            sock = socket.create_connection((address, port), timeout=remaining)
        except OSError as exc:
            error = exc
            continue
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise error


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to already checked addresses; ``Host`` stays the URL's."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: list[tuple[socket.AddressFamily, str]],
        deadline: _Deadline,
    ) -> None:
        super().__init__(host, port, timeout=deadline.timeout)
        self.addresses = addresses
        self.deadline = deadline

    def connect(self) -> None:
        """Connect to the first checked address that answers."""
        self.sock = _open_socket(self.addresses, self.port, self.deadline)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """An HTTPS connection to already checked addresses, verifying the URL's host name."""

    default_port = http.client.HTTPS_PORT  # the Host header leaves 443 out

    def __init__(
        self,
        host: str,
        port: int,
        addresses: list[tuple[socket.AddressFamily, str]],
        deadline: _Deadline,
    ) -> None:
        super().__init__(host, port, addresses, deadline)
        self.tls = ssl.create_default_context()

    def connect(self) -> None:
        """Connect to the first checked address that answers, then shake hands as the host."""
        super().connect()
        sock = self.sock
        try:
            sock.settimeout(self.deadline.remaining())
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def _connection(
    target: Target, addresses: list[tuple[socket.AddressFamily, str]], deadline: _Deadline
) -> http.client.HTTPConnection:
    if target.scheme == "https":
        return _PinnedHTTPSConnection(target.host, target.port, addresses, deadline)
    return _PinnedHTTPConnection(target.host, target.port, addresses, deadline)


class _DeadlineReader(io.RawIOBase):
    """A socket's reader whose every read waits at most the call's remaining time."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._raw = raw
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int | None:
        self._sock.settimeout(self._deadline.remaining())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _bounded_response(
    connection: http.client.HTTPConnection, deadline: _Deadline
) -> http.client.HTTPResponse:
    """The response reader for a sent request, its reads bounded by ``deadline``.

    ``getresponse()`` would read the status and headers with only the per-read timeout, so
    a receiver sending a byte at a time could hold the call for long; this reader cannot.
    """
    sock = connection.sock
    response = http.client.HTTPResponse(sock, method="POST")
    response.fp = io.BufferedReader(_DeadlineReader(response.fp.detach(), sock, deadline))
    return response


def _read_capped(response: http.client.HTTPResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        while size < limit:
            chunk = response.read(min(_READ_CHUNK, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (OSError, http.client.HTTPException):
        pass  # The status already arrived; the body is only kept for diagnostics.
    return b"".join(chunks)[:limit]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not accepted: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed without a reply"
    if isinstance(exc, http.client.HTTPException):
        return f"bad HTTP reply: {type(exc).__name__}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"connection failed: {exc.strerror}"
    return f"connection failed: {exc}"
