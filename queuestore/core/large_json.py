"""The second way :func:`queuestore.core.validation.json_value` decides a JSON value.

A value is JSON when its round trip (pydantic-core encodes it, parses it back,
and it comes back equal) gives it back. For a large document of few lists and
objects (mostly text, or a few long flat lists) pydantic's ``JsonValue``
validator is asked instead: it gives the same answer and returns the same
value (``tests/store/test_json_decided_alike.py`` holds the two paths to the
same acceptances, refusals and results) without decoding every text again,
which the parser must do. The cost model in the docs has the figures.
"""

from __future__ import annotations

from typing import Final

from pydantic import ConfigDict, JsonValue, TypeAdapter

TEXT_DOCUMENT_BYTES: Final = 64 * 1024
"""From this size up, a document of few lists and objects is decided by the validator."""

VALIDATOR: Final = TypeAdapter[JsonValue](JsonValue, config=ConfigDict(allow_inf_nan=False))
"""pydantic's validator of JSON values (NaN and infinity refused); it says where a value
is not JSON. It calls a Python function for every value it meets."""


def applies(encoded: bytes, max_containers: int) -> bool:
    """Whether a document is large and holds at most ``max_containers`` lists and objects.

    A bracket inside a text counts too: the count bounds the nesting from above,
    so a document this path takes cannot nest deeper than a read can parse.
    """
    if len(encoded) < TEXT_DOCUMENT_BYTES:
        return False
    found, start = 0, 0
    for bracket in (b"{", b"["):  # found one by one, no further than needed: not counted
        while (start := encoded.find(bracket, start) + 1) and found <= max_containers:
            found += 1
        start = 0
    return found <= max_containers


def validate(value: object) -> JsonValue:
    """``value`` as the validator gives it back (JSON's own types, a fresh copy).

    Raises:
        pydantic.ValidationError: ``value`` is not JSON; the first error says where.
    """
    return VALIDATOR.validate_python(value, strict=True)
