"""How the API reads a JSON request body: strictly, as RFC 8259 defines JSON.

FastAPI parses a body with :func:`json.loads`, which accepts what is not JSON
(``NaN``, ``Infinity``, any encoding it can detect) and fails on what it cannot
hold (nesting deeper than Python's recursion limit, integers of more than 4300
digits) with errors FastAPI answers as a bare 400 "There was an error parsing
the body". :class:`JsonRoute` reads the body here instead, and every refusal
is a :class:`json.JSONDecodeError`, which FastAPI turns into a validation error
of type ``json_invalid`` and :mod:`queuestore.http.problems` into the
documented ``malformed-json`` problem, with the reason in its detail.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from fastapi import Request, Response
from fastapi.routing import APIRoute


def loads(body: bytes) -> Any:
    """The JSON document ``body`` holds; raises :class:`json.JSONDecodeError` if none.

    The body must be UTF-8 (RFC 8259 section 8.1; a leading byte order mark is
    ignored, as the RFC allows); numbers must be finite.
    """
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise json.JSONDecodeError(
            f"not UTF-8: byte 0x{body[error.start]:02x} at {error.start}", "", 0
        ) from None
    try:
        return json.loads(text, parse_constant=_not_a_number)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to parse", text, 0) from None
    except ValueError:  # the only other refusal: an integer beyond the digit limit
        limit = sys.get_int_max_str_digits()
        raise json.JSONDecodeError(f"an integer has more than {limit} digits", text, 0) from None


def _not_a_number(constant: str) -> NoReturn:
    raise json.JSONDecodeError(f"{constant} is not a JSON number", constant, 0)


class JsonRequest(Request):
    """A request whose :meth:`json` is :func:`loads`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """A route whose JSON body is read by :func:`loads` (FastAPI's custom route class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return handle
