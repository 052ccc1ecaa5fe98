"""Webhook primitives: the URL policy, Standard Webhooks signing, and one POST to a local server."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Network, ip_address
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from queuestore.core.errors import CallbackRefused, InvalidTaskData
from queuestore.core.urls import UrlPolicy
from queuestore.push.sender import CallFailed, Response, post
from queuestore.push.signing import SigningSecret, signature_headers

LOCAL = UrlPolicy.allowing("127.0.0.1")

# --- The URL policy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://93.184.216.34/hook", "scheme 'ftp'"),
        ("/hooks/1", "not an absolute URL"),
        ("93.184.216.34/hook", "not an absolute URL"),
        ("https://user:pass@93.184.216.34/hook", "credentials"),
        ("https://user@93.184.216.34/hook", "credentials"),
        ("http://127.0.0.1/", "loopback address 127.0.0.1"),
        ("http://10.1.2.3", "private address 10.1.2.3"),
        ("http://169.254.169.254/latest", "link-local address 169.254.169.254"),
        ("http://[::1]/", "loopback address ::1"),
        ("http://[::ffff:127.0.0.1]/", "loopback address 127.0.0.1"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "private"),
        ("http://[fec0::1]/", "site-local"),
        ("http://[64:ff9b::a00:5]/", "private address 10.0.0.5"),
        ("http://[2002:7f00:1::]/", "loopback address 127.0.0.1"),
        ("http://100.64.0.1", "shared (carrier-grade NAT) address 100.64.0.1"),
        ("http://0.0.0.0", "unspecified address 0.0.0.0"),
        ("http://0.1.2.3", "0.0.0.0/8"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://localhost/", "resolves to a loopback address"),
        ("http://127.1/", "resolves to a loopback address 127.0.0.1"),
        ("http://nonexistent.invalid/", "does not resolve"),
        ("https://93.184.216.34:0/", "invalid port"),
        ("https://93.184.216.34:65536/", "invalid port"),
        ("https://93.184.216.34:http/", "invalid port"),
        ("https:///hook", "not an absolute URL"),
        ("https://93.184.216.34/a b", "whitespace"),
        ("https://93.184.216.34/\r\nX-Injected: 1", "control characters"),
        ("https://93.184.216.34/caf\u00e9", "non-ASCII"),
        ("https://93.184.216.34/" + "a" * 2048, "longer than 2048"),
    ],
)
def test_check_url_refuses(url: str, reason: str) -> None:
    with pytest.raises(CallbackRefused) as caught:
        UrlPolicy().check_url(url)
    refused = caught.value
    assert isinstance(refused, InvalidTaskData)
    assert isinstance(refused, ValueError)
    assert refused.field == "callback.url"
    assert refused.url == url
    assert reason in refused.reason
    assert str(refused).startswith(f"callback.url: callback URL {url!r} refused: ")


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.216.34/hook",
        "http://93.184.216.34:8080/hook?x=1#frag",
        "HTTPS://93.184.216.34/",
        "https://[2606:2800:220:1:248:1893:25c8:1946]/hook",
        "https://[::ffff:93.184.216.34]/hook",
        "https://93.184.216.34:65535",
    ],
)
def test_check_url_accepts_public_literals(url: str) -> None:
    UrlPolicy().check_url(url)


def test_a_policy_may_limit_the_schemes() -> None:
    https_only = UrlPolicy(schemes=("https",))
    https_only.check_url("https://93.184.216.34/")
    with pytest.raises(CallbackRefused, match="scheme 'http'"):
        https_only.check_url("http://93.184.216.34/")
    with pytest.raises(ValueError, match="schemes"):
        UrlPolicy(schemes=("ftp",))


def test_an_allowed_address_passes_and_its_neighbour_does_not() -> None:
    LOCAL.check_url("http://127.0.0.1:8080/x")
    LOCAL.check_url("http://[::ffff:127.0.0.1]:8080/x")
    with pytest.raises(CallbackRefused, match=r"loopback address 127\.0\.0\.2"):
        LOCAL.check_url("http://127.0.0.2/")
    with pytest.raises(CallbackRefused, match="loopback address ::1"):
        LOCAL.check_url("http://[::1]/")


def test_allowing_networks_of_both_families() -> None:
    policy = UrlPolicy.allowing("127.0.0.0/8", "::1")
    policy.check_url("http://127.0.0.1/")
    policy.check_url("http://127.200.0.9:9000/")
    policy.check_url("http://[::1]:8000/")
    with pytest.raises(CallbackRefused):
        policy.check_url("http://10.0.0.1/")
    assert UrlPolicy.allowing("10.1.2.3/8").allow == (IPv4Network("10.0.0.0/8"),)


@pytest.mark.parametrize("text", ["", "localhost", "10.0.0.0/33", "300.1.1.1", "::1/200"])
def test_allowing_bad_text_says_which(text: str) -> None:
    with pytest.raises(ValueError, match="not an IP address or network") as caught:
        UrlPolicy.allowing("127.0.0.1", text)
    assert repr(text) in str(caught.value)


def test_check_address_returns_none_or_the_reason() -> None:
    policy = UrlPolicy()
    assert policy.check_address(ip_address("93.184.216.34")) is None
    assert policy.check_address(ip_address("10.0.0.5")) == "a private address 10.0.0.5"
    assert policy.check_address(ip_address("100.127.255.255")) is not None
    assert policy.check_address(ip_address("100.128.0.0")) is None
    assert UrlPolicy.allowing("10.0.0.0/8").check_address(ip_address("10.0.0.5")) is None


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Names resolved to the listed addresses; every other name goes to the real resolver."""
    names: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in names:
            return real(host, port, *args, **kwargs)
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port, 0, 0) if ":" in address else (address, port),
            )
            for address in names[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


def test_every_resolved_address_must_pass(fake_dns: dict[str, list[str]]) -> None:
    fake_dns["public.example"] = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]
    fake_dns["mixed.example"] = ["93.184.216.34", "10.0.0.5"]
    fake_dns["empty.example"] = []
    policy = UrlPolicy()
    policy.check_url("https://public.example/hook")
    assert policy.resolve("public.example", 443) == [
        (socket.AF_INET, "93.184.216.34"),
        (socket.AF_INET6, "2606:2800:220:1:248:1893:25c8:1946"),
    ]
    with pytest.raises(CallbackRefused) as caught:
        policy.check_url("https://mixed.example/hook")
    assert caught.value.reason == "resolves to a private address 10.0.0.5"
    with pytest.raises(CallbackRefused, match="no address"):
        policy.check_url("https://empty.example/hook")
    with pytest.raises(CallbackRefused, match="does not resolve"):
        policy.resolve("nonexistent.invalid", 80)


# --- Signing -----------------------------------------------------------------------------

BODY = b'{"task_id": "t-1", "status": "succeeded", "text": "caf\xc3\xa9"}'


def test_signature_matches_the_published_vector() -> None:
    # The example of the Standard Webhooks specification.
    secret = SigningSecret.parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    signature = secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_is_hmac_sha256_of_id_timestamp_and_body() -> None:
    key = bytes(range(24))
    expected = base64.b64encode(
        hmac.new(key, b"msg_1.1700000000." + BODY, hashlib.sha256).digest()
    ).decode()
    headers = signature_headers([SigningSecret(key)], "msg_1", BODY, timestamp=1700000000)
    assert headers == {
        "webhook-id": "msg_1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": f"v1,{expected}",
    }


def test_the_reference_implementation_verifies_our_headers() -> None:
    secret = SigningSecret.generate()
    headers = signature_headers([secret], "msg_2", BODY)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert Webhook(str(secret)).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(str(secret)).verify(BODY.replace(b"succeeded", b"failed"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(str(SigningSecret.generate())).verify(BODY, headers)


def test_with_two_secrets_each_one_verifies() -> None:
    old, new = SigningSecret.generate(), SigningSecret.generate()
    headers = signature_headers([old, new], "msg_3", BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(str(secret)).verify(BODY, headers)


def test_without_secrets_the_message_goes_unsigned() -> None:
    headers = signature_headers([], "msg_4", BODY, timestamp=5)
    assert headers == {"webhook-id": "msg_4", "webhook-timestamp": "5"}


def test_a_secret_round_trips_and_its_repr_hides_the_key() -> None:
    secret = SigningSecret.generate()
    assert len(secret.key) == 24
    assert SigningSecret.generate() != secret
    text = str(secret)
    assert text.startswith("whsec_")
    assert SigningSecret.parse(text) == secret
    assert SigningSecret.parse(text.removeprefix("whsec_")) == secret
    assert SigningSecret.parse(text.rstrip("=")) == secret
    encoded = text.removeprefix("whsec_")
    assert repr(secret) == "SigningSecret('whsec_…')"
    assert encoded not in repr(secret)
    assert encoded not in repr([secret])
    assert encoded not in repr(UrlPolicy())  # nothing else prints it either


@pytest.mark.parametrize(
    "text", ["", "whsec_", "whsec_not base64!", "whsec_@@@@", "whsec_-_-_", "whsec_QZ7kX"]
)
def test_parsing_garbage_fails_without_echoing_it(text: str) -> None:
    with pytest.raises(ValueError, match="not a signing secret") as caught:
        SigningSecret.parse(text)
    payload = text.removeprefix("whsec_")
    if payload:
        assert payload not in str(caught.value)


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        SigningSecret(b"")


# --- Sending -----------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A local HTTP server that records what it receives and answers by path."""

    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    connections: int = 0
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


BIG = 10 * 1024 * 1024


class Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server_receiver().requests.append(Received(self.path, dict(self.headers), body))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.answer()

    def server_receiver(self) -> Receiver:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        return receiver

    def answer(self) -> None:
        if self.path == "/slow":
            self.server_receiver().release.wait(10)
            self.reply(200, b"late")
        elif self.path == "/big":
            self.send_response(200)
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            chunk = b"x" * 65536
            for _ in range(BIG // len(chunk)):
                self.wfile.write(chunk)
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/target")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path.startswith("/status/"):
            self.reply(int(self.path.removeprefix("/status/")), b"no")
        else:
            self.reply(200, b"thanks")

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class CountingServer(ThreadingHTTPServer):
    receiver: Receiver

    def process_request(self, request: Any, client_address: Any) -> None:
        self.receiver.connections += 1
        super().process_request(request, client_address)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = CountingServer(("127.0.0.1", 0), Handler)
    got = Receiver(server)
    server.receiver = got
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield got
    finally:
        got.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_2xx_returns_the_response(receiver: Receiver) -> None:
    response = post(receiver.url("/hook"), BODY, {}, policy=LOCAL)
    assert isinstance(response, Response)
    assert response.status == 200
    assert response.body == b"thanks"
    assert 0 <= response.elapsed < 10


def test_headers_and_body_arrive_exactly(receiver: Receiver) -> None:
    secret = SigningSecret.generate()
    headers = {**signature_headers([secret], "msg_9", BODY), "X-Extra": "yes"}
    post(receiver.url("/hook?a=1&b=2"), BODY, headers, policy=LOCAL, user_agent="test-agent/1")
    (got,) = receiver.requests
    assert got.path == "/hook?a=1&b=2"
    assert got.body == BODY
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["User-Agent"] == "test-agent/1"
    assert got.headers["Content-Length"] == str(len(BODY))
    assert got.headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert got.headers["X-Extra"] == "yes"
    for name, value in headers.items():
        assert got.headers[name] == value
    Webhook(str(secret)).verify(got.body, got.headers)


def test_the_callers_content_type_wins(receiver: Receiver) -> None:
    post(receiver.url("/hook"), b"x", {"content-type": "text/plain"}, policy=LOCAL)
    (got,) = receiver.requests
    assert got.headers["content-type"] == "text/plain"
    assert list(got.headers).count("content-type") + list(got.headers).count("Content-Type") == 1


def test_headers_post_sets_itself_are_refused(receiver: Receiver) -> None:
    with pytest.raises(ValueError, match="Content-Length"):
        post(receiver.url("/hook"), b"x", {"Content-Length": "5"}, policy=LOCAL)
    assert receiver.connections == 0


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    with pytest.raises(CallFailed) as caught:
        post(receiver.url("/redirect"), BODY, {}, policy=LOCAL)
    assert caught.value.status == 302
    assert caught.value.retryable is False
    assert "redirect 302 not followed" in str(caught.value)
    assert [r.path for r in receiver.requests] == ["/redirect"]


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (503, True), (404, False), (400, False), (410, False), (429, True), (408, True)],
)
def test_a_failed_status_says_whether_to_retry(
    receiver: Receiver, status: int, retryable: bool
) -> None:
    with pytest.raises(CallFailed) as caught:
        post(receiver.url(f"/status/{status}"), BODY, {}, policy=LOCAL)
    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert caught.value.reason == f"HTTP {status}"


def test_a_slow_receiver_times_out(receiver: Receiver) -> None:
    started = time.monotonic()
    with pytest.raises(CallFailed) as caught:
        post(receiver.url("/slow"), BODY, {}, policy=LOCAL, timeout=0.5)
    assert time.monotonic() - started < 2.5
    assert caught.value.reason == "timed out"
    assert caught.value.retryable is True
    assert caught.value.status is None


def test_a_dribbling_receiver_is_cut_at_the_overall_deadline() -> None:
    """Each byte of the status line comes within the per-read timeout; the call still ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def dribble() -> None:
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                if stop.wait(0.1):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=dribble)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(CallFailed, match="timed out"):
            post(
                f"http://127.0.0.1:{listener.getsockname()[1]}/",
                b"{}",
                {},
                policy=LOCAL,
                timeout=0.6,
            )
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_large_reply_is_cut_to_the_limit(receiver: Receiver) -> None:
    response = post(receiver.url("/big"), BODY, {}, policy=LOCAL, max_response_bytes=1000)
    assert response.status == 200
    assert response.body == b"x" * 1000
    whole = post(receiver.url("/big"), BODY, {}, policy=LOCAL)
    assert whole.body == b"x" * (64 * 1024)


def test_a_refused_address_is_not_connected_to(receiver: Receiver) -> None:
    with pytest.raises(CallFailed) as caught:
        post(receiver.url("/hook"), BODY, {}, policy=UrlPolicy())
    assert caught.value.retryable is False
    assert "loopback address 127.0.0.1" in caught.value.reason
    assert receiver.connections == 0
    assert receiver.requests == []


def test_a_name_rebound_to_a_refused_address_is_refused_at_connect(
    receiver: Receiver, fake_dns: dict[str, list[str]]
) -> None:
    fake_dns["hooks.example"] = ["127.0.0.1"]
    with pytest.raises(CallFailed) as caught:
        post(receiver.url("/hook", host="hooks.example"), BODY, {}, policy=UrlPolicy())
    assert caught.value.retryable is False
    assert "resolves to a loopback address 127.0.0.1" in caught.value.reason
    assert receiver.connections == 0


def test_the_connection_goes_to_the_checked_address_with_the_urls_host(
    receiver: Receiver, fake_dns: dict[str, list[str]]
) -> None:
    fake_dns["hooks.example"] = ["127.0.0.1"]
    post(receiver.url("/hook", host="hooks.example"), BODY, {}, policy=LOCAL)
    (got,) = receiver.requests
    assert got.headers["Host"] == f"hooks.example:{receiver.port}"


def test_a_name_that_stops_resolving_may_be_retried(fake_dns: dict[str, list[str]]) -> None:
    with pytest.raises(CallFailed, match="does not resolve") as caught:
        post("https://nonexistent.invalid/hook", BODY, {}, policy=UrlPolicy())
    assert caught.value.retryable is True


def test_a_closed_port_may_be_retried() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    with pytest.raises(CallFailed) as caught:
        post(f"http://127.0.0.1:{port}/hook", BODY, {}, policy=LOCAL, timeout=2)
    assert caught.value.reason == "connection refused"
    assert caught.value.retryable is True


def test_https_sends_the_urls_host_as_sni_to_the_checked_address(
    fake_dns: dict[str, list[str]],
) -> None:
    fake_dns["secure.example"] = ["127.0.0.1"]
    listener = socket.create_server(("127.0.0.1", 0))
    hello: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            hello.append(conn.recv(65536))

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        with pytest.raises(CallFailed) as caught:
            post(
                f"https://secure.example:{listener.getsockname()[1]}/",
                b"{}",
                {},
                policy=LOCAL,
                timeout=2,
            )
    finally:
        thread.join(5)
        listener.close()
    assert caught.value.retryable is True
    (client_hello,) = hello
    assert client_hello[:1] == b"\x16"  # a TLS handshake record
    assert b"secure.example" in client_hello


def test_https_to_a_plain_http_server_fails_retryably(receiver: Receiver) -> None:
    with pytest.raises(CallFailed) as caught:
        post(f"https://127.0.0.1:{receiver.port}/", BODY, {}, policy=LOCAL, timeout=2)
    assert caught.value.retryable is True
    assert caught.value.status is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [("ftp://127.0.0.1/", "scheme"), ("http://u:p@127.0.0.1/", "credentials")],
)
def test_a_malformed_url_fails_for_good(url: str, reason: str) -> None:
    with pytest.raises(CallFailed, match=reason) as caught:
        post(url, BODY, {}, policy=LOCAL)
    assert caught.value.retryable is False
