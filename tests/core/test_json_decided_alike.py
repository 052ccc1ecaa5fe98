"""Both ways of deciding a JSON value (the round trip; pydantic's validator, for large
documents of few containers) accept, refuse and return exactly the same."""

from __future__ import annotations

import math
from collections import OrderedDict
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import to_json

from queuestore import InvalidTaskData
from queuestore.core import large_json
from queuestore.core.validation import MAX_NESTING, VALIDATOR_MAX_CONTAINERS, _parsed, _validated


class Colour(StrEnum):
    RED = "red"


json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
"""JSON's scalars, NaN and infinity among the floats (which JSON refuses)."""

foreign_leaves = st.sampled_from(
    [b"bytes", {1, 2}, (1, 2), object(), Colour.RED, 1j, "\ud800", math.nan, -math.inf]
)
"""Values that are not JSON, or are JSON only once converted."""

keys = st.text() | st.integers() | st.sampled_from([Colour.RED, None, 1.5])

values = st.recursive(
    json_leaves | foreign_leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=4)
        | st.dictionaries(st.text(), inner, max_size=4).map(OrderedDict)
    ),
    max_leaves=30,
)


def decided(decide: Any, value: object) -> tuple[str, Any]:
    try:
        kept = decide(value)
    except InvalidTaskData as exc:
        return "refused", str(exc)
    return "kept", kept


def by_round_trip(value: object) -> Any:
    try:
        encoded = to_json(value)
    except ValueError as exc:  # json_value refuses these before either path runs
        raise InvalidTaskData(f"does not encode: {exc}", field="input") from exc
    return _parsed(value, encoded, "input")


def by_validator(value: object) -> Any:
    to_json(value)  # the same values reach it as reach the round trip
    return _validated(value, "input")


def encodes(value: object) -> bool:
    try:
        to_json(value)
    except ValueError:
        return False
    return True


def same(left: Any, right: Any) -> bool:
    """Equal, with the same types all the way down (NaN never reaches here kept)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same, left, right))
    return bool(left == right)


@settings(max_examples=1500, deadline=None)
@given(values)
def test_both_paths_decide_every_value_alike(value: object) -> None:
    if not encodes(value):
        return  # refused before the paths, by the encoder, whichever path would run
    round_trip = decided(by_round_trip, value)
    validator = decided(by_validator, value)

    assert round_trip[0] == validator[0], (value, round_trip, validator)
    if round_trip[0] == "kept":
        assert same(round_trip[1], validator[1]), (value, round_trip, validator)
        if isinstance(value, dict | list):  # a fresh copy, the caller's own untouched
            assert round_trip[1] is not value
            assert validator[1] is not value


def deep(depth: int, leaf: object) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("leaf", ["leaf", [], None], ids=["text", "empty list", "null"])
def test_the_deepest_document_the_validator_takes_is_one_the_round_trip_takes(
    leaf: object,
) -> None:
    value = deep(VALIDATOR_MAX_CONTAINERS - (1 if leaf == [] else 0), leaf)
    padded = to_json(value) + b" " * large_json.TEXT_DOCUMENT_BYTES

    assert large_json.applies(padded, VALIDATOR_MAX_CONTAINERS)
    assert same(by_round_trip(value), by_validator(value))


def test_one_container_more_goes_to_the_round_trip() -> None:
    for depth in (VALIDATOR_MAX_CONTAINERS + 1, MAX_NESTING + 1):
        value = deep(depth, "x" * large_json.TEXT_DOCUMENT_BYTES)

        assert not large_json.applies(to_json(value), VALIDATOR_MAX_CONTAINERS)
        with pytest.raises(InvalidTaskData, match="is not JSON"):
            by_round_trip(value)
