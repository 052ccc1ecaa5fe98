"""Signing callback bodies: Standard Webhooks secrets and headers.

Each delivery carries ``webhook-id``, ``webhook-timestamp`` and one
``webhook-signature`` per key (https://www.standardwebhooks.com/), so a key
is rotated by adding the new one first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass
from secrets import token_bytes

_SECRET_PREFIX = "whsec_"
_SECRET_BYTES = 24


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
