"""Webhook delivery primitives: which URLs may be called, how bodies are signed, one POST.

Signatures follow Standard Webhooks (https://www.standardwebhooks.com/). A call connects
only to addresses that :class:`UrlPolicy` accepted at connect time, so a name that is
re-pointed at a private address after registration is refused then too.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import http.client
import io
import ipaddress
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from secrets import token_bytes
from typing import TYPE_CHECKING, NamedTuple

from queuestore.core.errors import CallbackRefused

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_URL_LENGTH = 2048
"""The longest callback URL accepted, in characters."""

_SECRET_PREFIX = "whsec_"
_SECRET_BYTES = 24
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHARED_ADDRESS_SPACE = IPv4Network("100.64.0.0/10")
_THIS_NETWORK = IPv4Network("0.0.0.0/8")
_NAT64 = IPv6Network("64:ff9b::/96")
_RETRYABLE_CLIENT_ERRORS = frozenset({408, 409, 425, 429})
_READ_CHUNK = 16 * 1024
# Headers post() writes itself; a caller's value for one of them would contradict the request.
_MANAGED_HEADERS = frozenset({"content-length", "host", "connection", "transfer-encoding"})

_Address = IPv4Address | IPv6Address
_Network = IPv4Network | IPv6Network


# --- Which URLs may be called ------------------------------------------------------------


@dataclass(frozen=True)
class UrlPolicy:
    """Which callback URLs queuestore calls, checked at registration and again at connect time.

    By default only public addresses are called: private, loopback, link-local, site-local,
    multicast, reserved, unspecified, shared (100.64.0.0/10) and 0.0.0.0/8 addresses are
    refused, as are IPv6 forms that embed one of those IPv4 addresses (IPv4-mapped, NAT64
    ``64:ff9b::/96``, 6to4 ``2002::/16``).

    Attributes:
        allow: networks called even though they would be refused, e.g. a receiver on the
            same private network. Build them from text with :meth:`allowing`.
        schemes: the URL schemes accepted, among ``http`` and ``https``.
    """

    allow: tuple[IPv4Network | IPv6Network, ...] = ()
    schemes: tuple[str, ...] = ("https", "http")

    def __post_init__(self) -> None:
        for network in self.allow:
            if not isinstance(network, IPv4Network | IPv6Network):
                raise TypeError(f"allow holds IP networks, not {type(network).__name__}")
        unknown = set(self.schemes) - set(_DEFAULT_PORTS)
        if unknown or not self.schemes:
            raise ValueError(f"schemes must be among http, https; got {sorted(self.schemes)}")

    @classmethod
    def allowing(cls, *networks: str) -> UrlPolicy:
        """A policy that also calls the given addresses or networks.

        Args:
            *networks: addresses or networks as text: ``"127.0.0.1"``, ``"10.0.0.0/8"``,
                ``"::1"``. Host bits are ignored (``"10.1.2.3/8"`` is ``10.0.0.0/8``).

        Raises:
            ValueError: a text that is not an IP address or network.
        """
        parsed: list[_Network] = []
        for text in networks:
            try:
                parsed.append(ipaddress.ip_network(text.strip(), strict=False))
            except ValueError:
                raise ValueError(f"not an IP address or network: {text!r}") from None
        return cls(allow=tuple(parsed))

    def check_url(self, url: str) -> None:
        """Refuse ``url`` unless it may be registered as a callback.

        The URL must be absolute, ASCII, at most 2048 characters, of an accepted scheme,
        without credentials, with a host and a port in 1..65535. A host that is an IP
        literal is judged as is; a name must resolve, and every address it resolves to
        must be accepted.

        Args:
            url: the callback URL.

        Raises:
            CallbackRefused: the URL is refused; ``reason`` says why.
        """
        target = _split(url, self.schemes)
        literal = _ip_literal(target.host)
        if literal is not None:
            reason = self.check_address(literal)
            if reason is not None:
                raise CallbackRefused(url, f"host is {reason}")
            return
        self.resolve(target.host, target.port, url=url)

    def check_address(self, address: IPv4Address | IPv6Address) -> str | None:
        """Judge one address.

        Args:
            address: the address to judge.

        Returns:
            ``None`` if the address may be called, else why not, e.g.
            ``"a private address 10.0.0.5"``.
        """
        if self._allowed(address):
            return None
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            if self._allowed(embedded):
                return None
            kind = _refused_kind(embedded)
            return None if kind is None else f"{kind} address {embedded} (as {address})"
        kind = _refused_kind(address)
        return None if kind is None else f"{kind} address {address}"

    def resolve(
        self, host: str, port: int, *, url: str | None = None
    ) -> list[tuple[socket.AddressFamily, str]]:
        """Resolve ``host`` and check every address it resolves to.

        Args:
            host: a host name or IP literal (IPv6 without brackets).
            port: the port to resolve for.
            url: the URL to name in the error; ``host`` if not given.

        Returns:
            The distinct addresses, in resolver order, as ``(family, address text)``.

        Raises:
            CallbackRefused: the host does not resolve, or one of its addresses is refused.
        """
        try:
            addresses = _lookup(host, port)
        except _Unresolved as exc:
            raise CallbackRefused(url or host, exc.reason) from None
        reason = _first_refusal(self, addresses)
        if reason is not None:
            raise CallbackRefused(url or host, reason)
        return addresses

    def _allowed(self, address: _Address) -> bool:
        return any(
            address in network for network in self.allow if network.version == address.version
        )


class _Target(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str


class _Unresolved(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _split(url: str, schemes: tuple[str, ...]) -> _Target:
    """Parse ``url`` into what a call needs, or raise :class:`CallbackRefused`."""
    _check_characters(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise CallbackRefused(url, "is not a valid URL or has an invalid port") from None
    if not parts.scheme or not parts.netloc:
        raise CallbackRefused(url, "is not an absolute URL")
    if parts.scheme not in schemes:
        allowed = ", ".join(sorted(schemes))
        raise CallbackRefused(url, f"scheme {parts.scheme!r} is not allowed ({allowed} are)")
    if "@" in parts.netloc:
        raise CallbackRefused(url, "contains credentials (user:password@)")
    if not parts.hostname:
        raise CallbackRefused(url, "has no host")
    if port is None:
        port = _DEFAULT_PORTS[parts.scheme]
    elif not 1 <= port <= 65535:
        raise CallbackRefused(url, f"has an invalid port {port}")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return _Target(parts.scheme, parts.hostname, port, path)


def _check_characters(url: str) -> None:
    # urlsplit() silently drops tabs and newlines, so what was checked would not be what is
    # called; and http.client sends only ASCII.
    if len(url) > MAX_URL_LENGTH:
        raise CallbackRefused(url, f"longer than {MAX_URL_LENGTH} characters")
    if any(char <= " " or char == "\x7f" for char in url):
        raise CallbackRefused(url, "contains whitespace or control characters")
    if not url.isascii():
        raise CallbackRefused(url, "contains non-ASCII characters (use punycode and %-escapes)")


def _ip_literal(host: str) -> _Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _lookup(host: str, port: int) -> list[tuple[socket.AddressFamily, str]]:
    """Every distinct address ``host`` resolves to, or raise :class:`_Unresolved`."""
    literal = _ip_literal(host)
    if literal is not None:
        family = socket.AF_INET if literal.version == 4 else socket.AF_INET6
        return [(family, host)]
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror:
        raise _Unresolved("does not resolve") from None
    except UnicodeError:
        raise _Unresolved("is not a valid host name") from None
    found: dict[tuple[socket.AddressFamily, str], None] = {}
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            found[(family, str(sockaddr[0]))] = None
    if not found:
        raise _Unresolved("resolves to no address")
    return list(found)


def _first_refusal(
    policy: UrlPolicy, addresses: list[tuple[socket.AddressFamily, str]]
) -> str | None:
    for _family, text in addresses:
        literal = _ip_literal(text)
        reason = (
            f"an unparsable address {text!r}" if literal is None else policy.check_address(literal)
        )
        if reason is not None:
            return f"resolves to {reason}"
    return None


def _embedded_ipv4(address: _Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, when it is one of the usual embeddings."""
    if isinstance(address, IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _refused_kind(address: _Address) -> str | None:
    for kind, applies in _REFUSED_KINDS:
        if applies(address):
            return kind
    return None


# The most specific kind first: 0.0.0.0, 169.254.0.0/16 and 240.0.0.0/4 are "private" too.
_REFUSED_KINDS: tuple[tuple[str, Callable[[_Address], bool]], ...] = (
    ("an unspecified", lambda a: a.is_unspecified),
    ("a loopback", lambda a: a.is_loopback),
    ("a link-local", lambda a: a.is_link_local),
    ("a multicast", lambda a: a.is_multicast),
    ("a shared (carrier-grade NAT)", lambda a: a in _SHARED_ADDRESS_SPACE),
    ("a this-network (0.0.0.0/8)", lambda a: a in _THIS_NETWORK),
    ("a site-local", lambda a: isinstance(a, IPv6Address) and a.is_site_local),
    ("a reserved", lambda a: a.is_reserved),
    ("a private", lambda a: a.is_private),
)


# --- Signing -----------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class SigningSecret:
    """A Standard Webhooks signing key; written ``whsec_`` followed by the key in base64.

    Its ``repr`` never shows the key; ``str`` gives the full ``whsec_…`` form.

    Attributes:
        key: the HMAC-SHA256 key bytes.
    """

    key: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes):
            raise TypeError(f"key must be bytes, not {type(self.key).__name__}")
        if not self.key:
            raise ValueError("a signing secret may not be empty")

    @classmethod
    def parse(cls, text: str) -> SigningSecret:
        """Read a secret written ``whsec_<base64>`` (or the bare base64).

        Args:
            text: the written secret; missing base64 padding is tolerated.

        Raises:
            ValueError: ``text`` is not base64, or decodes to nothing. The message does not
                repeat ``text``.
        """
        encoded = text.strip()
        encoded = encoded.removeprefix(_SECRET_PREFIX)
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            raise ValueError(
                f"not a signing secret: expected {_SECRET_PREFIX!r} followed by base64"
            ) from None
        if not key:
            raise ValueError("not a signing secret: the key is empty")
        return cls(key)

    @classmethod
    def generate(cls) -> SigningSecret:
        """A new random secret of 24 bytes."""
        return cls(token_bytes(_SECRET_BYTES))

    def __str__(self) -> str:
        """The secret as written: ``whsec_`` and the key in base64."""
        return _SECRET_PREFIX + base64.b64encode(self.key).decode("ascii")

    def __repr__(self) -> str:
        """A placeholder that does not reveal the key."""
        return f"{type(self).__name__}('{_SECRET_PREFIX}…')"

    def sign(self, msg_id: str, timestamp: int, body: bytes) -> str:
        """The ``v1`` signature of one message.

        Args:
            msg_id: the message id, sent as ``webhook-id``.
            timestamp: seconds since the epoch, sent as ``webhook-timestamp``.
            body: the request body exactly as sent.

        Returns:
            ``"v1,"`` followed by the base64 HMAC-SHA256 of ``"{msg_id}.{timestamp}.{body}"``.
        """
        content = f"{msg_id}.{int(timestamp)}.".encode() + body
        digest = hmac.new(self.key, content, hashlib.sha256).digest()
        return "v1," + base64.b64encode(digest).decode("ascii")


def signature_headers(
    secrets: Sequence[SigningSecret],
    msg_id: str,
    body: bytes,
    *,
    timestamp: int | None = None,
) -> dict[str, str]:
    """The Standard Webhooks headers for one message.

    Args:
        secrets: the secrets to sign with; one signature each, so a receiver can rotate
            keys. Empty: the message goes unsigned.
        msg_id: the message id, the same on every retry of the message.
        body: the request body exactly as sent.
        timestamp: seconds since the epoch; now by default.

    Returns:
        ``webhook-id``, ``webhook-timestamp`` and, when there are secrets,
        ``webhook-signature`` (the signatures separated by spaces).
    """
    ts = int(time.time()) if timestamp is None else int(timestamp)
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(ts)}
    if secrets:
        headers["webhook-signature"] = " ".join(s.sign(msg_id, ts, body) for s in secrets)
    return headers


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
        target = _split(url, policy.schemes)
    except CallbackRefused as exc:
        raise CallFailed(exc.reason, retryable=False) from None
    try:
        addresses = _lookup(target.host, target.port)
    except _Unresolved as exc:
        raise CallFailed(f"{target.host} {exc.reason}") from None
    refusal = _first_refusal(policy, addresses)
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
    target: _Target, addresses: list[tuple[socket.AddressFamily, str]], deadline: _Deadline
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


__all__ = [
    "MAX_URL_LENGTH",
    "CallFailed",
    "Response",
    "SigningSecret",
    "UrlPolicy",
    "post",
    "signature_headers",
]
