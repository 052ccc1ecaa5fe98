"""The cursor codec: a cursor decodes to its key, and any alteration is detected."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuestore.core.cursor import CursorCodec, CursorKey
from queuestore.core.errors import InvalidCursor

SECRET = b"a test secret of enough length.."
CODEC = CursorCodec(SECRET)

aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(9999, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
)
task_ids = st.text(alphabet="ABCXYZabcxyz0189-_", min_size=1, max_size=64)
keys = st.builds(CursorKey, aware_datetimes, task_ids)
filters = st.text(max_size=100)


def to_bytes(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def to_cursor(token: bytes) -> str:
    return base64.urlsafe_b64encode(token).rstrip(b"=").decode("ascii")


@given(keys, filters)
def test_a_cursor_decodes_to_its_key(key: CursorKey, listing: str) -> None:
    cursor = CODEC.encode(key, listing)

    decoded = CODEC.decode(cursor, listing)

    assert decoded == key
    assert decoded.created_at.utcoffset() == key.created_at.utcoffset()


@given(keys, filters)
def test_a_cursor_is_url_safe_text_without_padding(key: CursorKey, listing: str) -> None:
    cursor = CODEC.encode(key, listing)

    assert cursor.isascii()
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@given(keys, filters, st.data())
def test_flipping_any_bit_is_detected(key: CursorKey, listing: str, data: st.DataObject) -> None:
    token = bytearray(to_bytes(CODEC.encode(key, listing)))
    index = data.draw(st.integers(0, len(token) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    token[index] ^= 1 << bit

    with pytest.raises(InvalidCursor):
        CODEC.decode(to_cursor(bytes(token)), listing)


@given(keys, filters, st.data())
def test_cutting_or_extending_is_detected(
    key: CursorKey, listing: str, data: st.DataObject
) -> None:
    token = to_bytes(CODEC.encode(key, listing))
    cut = data.draw(st.integers(0, len(token) - 1), label="cut")
    extra = data.draw(st.binary(min_size=1, max_size=8), label="extra")

    for altered in (token[:cut], token + extra, extra + token):
        with pytest.raises(InvalidCursor):
            CODEC.decode(to_cursor(altered), listing)


@given(keys, filters, st.data())
def test_a_cursor_is_refused_under_other_filters(
    key: CursorKey, made: str, data: st.DataObject
) -> None:
    cursor = CODEC.encode(key, made)
    other = data.draw(filters.filter(lambda used: used != made), label="other")

    # Any other listing, and the near misses: one character more, one less.
    for used in {other, made + "x", made[:-1]} - {made}:
        with pytest.raises(InvalidCursor):
            CODEC.decode(cursor, used)


@given(keys, filters)
def test_a_cursor_is_refused_by_a_codec_with_another_secret(key: CursorKey, listing: str) -> None:
    cursor = CODEC.encode(key, listing)

    with pytest.raises(InvalidCursor):
        CursorCodec(b"another secret").decode(cursor, listing)
    assert CursorCodec(SECRET.decode()).decode(cursor, listing) == key


def test_codecs_without_a_secret_do_not_accept_each_others_cursors() -> None:
    key = CursorKey(datetime(2026, 1, 1, tzinfo=UTC), "abc")
    cursor = CursorCodec().encode(key, "")

    with pytest.raises(InvalidCursor):
        CursorCodec().decode(cursor, "")


@given(st.one_of(st.text(max_size=600), st.binary(max_size=50), st.none(), st.integers()))
def test_arbitrary_input_raises_invalid_cursor_and_nothing_else(garbage: object) -> None:
    with pytest.raises(InvalidCursor):
        CODEC.decode(garbage, "")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"{}",
        b'{"a": 1, "b": 2}',
        b"[]",
        b'["2026-01-01T00:00:00+00:00"]',
        b'["2026-01-01T00:00:00+00:00", "id", "extra"]',
        b'["2026-01-01T00:00:00", "id"]',
        b'["not a date", "id"]',
        b'[20260101, "id"]',
        b'["2026-01-01T00:00:00+00:00", 5]',
        b'["2026-01-01T00:00:00+00:00", null]',
        b'"ab"',
        b"null",
    ],
)
def test_a_signed_but_malformed_payload_raises_invalid_cursor(payload: bytes) -> None:
    # Only a holder of the secret can sign a payload; the codec still checks its shape.
    cursor = to_cursor(CODEC._mac(payload, "") + payload)

    with pytest.raises(InvalidCursor):
        CODEC.decode(cursor, "")


def test_the_payload_is_the_key_as_json() -> None:
    key = CursorKey(datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "id")

    payload = to_bytes(CODEC.encode(key, ""))[12:]

    assert json.loads(payload) == ["2026-01-02T03:04:05.000006+00:00", "id"]


def _signed(payload: bytes, listing: str = "") -> str:
    """A cursor whose MAC is right but whose payload is whatever the test says."""
    return to_cursor(CODEC._mac(payload, listing) + payload)


@pytest.mark.parametrize(
    ("cursor", "reason"),
    [
        ("", "must be a non-empty string"),
        ("A" * 513, "must be a non-empty string"),
        ("x", "is not valid base64"),
        ("A" * 512, "was altered, expired, or made for other filters"),
        (_signed(b"not json"), "payload is malformed"),
        (_signed(b'["2026-01-01T00:00:00", "naive"]'), "payload is malformed"),
        (_signed(b'["2026-01-01T00:00:00+00:00", 5]'), "payload is malformed"),
    ],
    ids=["empty", "too-long", "not-base64", "longest-allowed", "not-json", "naive", "int-id"],
)
def test_a_refused_cursor_says_why(cursor: str, reason: str) -> None:
    with pytest.raises(InvalidCursor, match=f"^cursor {reason}"):
        CODEC.decode(cursor, "")
