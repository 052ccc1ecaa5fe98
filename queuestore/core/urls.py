"""Which callback URLs queuestore calls: refused at registration, checked again at connect time.

A URL is checked when a callback is registered (:class:`UrlPolicy`, which the
store applies before writing anything), and its host's addresses again each
time a delivery connects (:func:`lookup` and :func:`first_refusal`, which the
sender in :mod:`queuestore.push.sender` uses), so a name re-pointed at a
private address after registration is refused then too.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import NamedTuple

from queuestore.core.errors import CallbackRefused

MAX_URL_LENGTH = 2048
"""The longest callback URL accepted, in characters."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHARED_ADDRESS_SPACE = IPv4Network("100.64.0.0/10")
_THIS_NETWORK = IPv4Network("0.0.0.0/8")
_NAT64 = IPv6Network("64:ff9b::/96")

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
        target = split_url(url, self.schemes)
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
            addresses = lookup(host, port)
        except Unresolved as exc:
            raise CallbackRefused(url or host, exc.reason) from None
        reason = first_refusal(self, addresses)
        if reason is not None:
            raise CallbackRefused(url or host, reason)
        return addresses

    def _allowed(self, address: _Address) -> bool:
        return any(
            address in network for network in self.allow if network.version == address.version
        )


class Target(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str


class Unresolved(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def split_url(url: str, schemes: tuple[str, ...]) -> Target:
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
    return Target(parts.scheme, parts.hostname, port, path)


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


def lookup(host: str, port: int) -> list[tuple[socket.AddressFamily, str]]:
    """Every distinct address ``host`` resolves to, or raise :class:`Unresolved`."""
    literal = _ip_literal(host)
    if literal is not None:
        family = socket.AF_INET if literal.version == 4 else socket.AF_INET6
        return [(family, host)]
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except socket.gaierror:
        raise Unresolved("does not resolve") from None
    except UnicodeError:
        raise Unresolved("is not a valid host name") from None
    found: dict[tuple[socket.AddressFamily, str], None] = {}
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            found[(family, str(sockaddr[0]))] = None
    if not found:
        raise Unresolved("resolves to no address")
    return list(found)


def first_refusal(
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
