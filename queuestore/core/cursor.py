"""The pagination cursor codec: opaque, tamper-evident, bound to its filters."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime

from queuestore.core.errors import InvalidCursor

_MAC_BYTES = 12


@dataclass(frozen=True, slots=True, order=True)
class CursorKey:
    """The position after which the next page starts: the last task's ``(created_at, id)``."""

    created_at: datetime
    task_id: str


class CursorCodec:
    """Encodes a :class:`CursorKey` with an HMAC over the key and the listing's filters.

    Args:
        secret: the HMAC key. Stores that serve the same clients from several
            processes must share it (``QUEUESTORE_CURSOR_SECRET``); by default a
            random key per process, so cursors die with the process.
    """

    def __init__(self, secret: bytes | str | None = None) -> None:
        if isinstance(secret, str):
            secret = secret.encode()
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, payload: bytes, filters: str) -> bytes:
        digest = hmac.new(self._secret, payload + b"\x00" + filters.encode(), hashlib.sha256)
        return digest.digest()[:_MAC_BYTES]

    def encode(self, key: CursorKey, filters: str) -> str:
        """An opaque cursor for ``key``, valid only with the same ``filters``."""
        payload = json.dumps(
            [key.created_at.isoformat(), key.task_id], separators=(",", ":")
        ).encode()
        token = self._mac(payload, filters) + payload
        return base64.urlsafe_b64encode(token).rstrip(b"=").decode("ascii")

    def decode(self, cursor: str, filters: str) -> CursorKey:
        """The key inside ``cursor``.

        Raises:
            InvalidCursor: malformed, tampered with, or made for other filters.
        """
        if not isinstance(cursor, str) or not 0 < len(cursor) <= 512:
            raise InvalidCursor("cursor must be a non-empty string from a previous page")
        try:
            token = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (ValueError, TypeError) as exc:
            raise InvalidCursor("cursor is not valid base64") from exc
        mac, payload = token[:_MAC_BYTES], token[_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(payload, filters)):
            raise InvalidCursor("cursor was altered, expired, or made for other filters")
        try:
            created_at, task_id = json.loads(payload)
            key = CursorKey(datetime.fromisoformat(created_at), task_id)
        except (ValueError, TypeError) as exc:
            raise InvalidCursor("cursor payload is malformed") from exc
        if key.created_at.tzinfo is None or not isinstance(key.task_id, str):
            raise InvalidCursor("cursor payload is malformed")
        return key
