"""Who is calling: the principal of a request, which becomes the owner of its tasks.

A request names its principal with ``Authorization: Bearer <token>``, checked
by a token verifier (a static token map by default), or through a header set
by an authenticating proxy in front of the API. A request with neither is
anonymous (owner None): it reads a task created without an owner by its id
alone, never lists or streams them, and sees nothing at all when the store
requires owners. A bearer token that is not
valid is refused (401), never downgraded to anonymous.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, cast

from fastapi import Request

from queuestore.http.problems import ProblemError

TokenVerifier = Callable[[str], "str | Awaitable[str | None] | None"]
"""Maps a bearer token to its principal, or None when the token is not valid; may be async."""

CHALLENGE: Final = 'Bearer realm="queuestore"'


class StaticTokens:
    """A fixed token → principal map, for small deployments.

    Tokens are kept as SHA-256 digests, so a lookup's timing says nothing about
    how much of a guessed token is right, and the map never holds them in clear.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._principals = {_digest(token): principal for token, principal in tokens.items()}

    def __call__(self, token: str) -> str | None:
        return self._principals.get(_digest(token))

    def __repr__(self) -> str:
        return f"StaticTokens({len(self._principals)} tokens)"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def load_verifier(path: str) -> TokenVerifier:
    """The callable at ``module:name`` (``module.name`` also works).

    Raises:
        ValueError: nothing callable there.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(f"token verifier {path!r}: expected 'module:name'")
    found = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(found):
        raise ValueError(f"token verifier {path!r} is not callable")
    return cast(TokenVerifier, found)


class Authenticator:
    """Resolves a request's principal.

    Args:
        verifier: checks bearer tokens; None refuses every bearer token.
        trusted_header: the header an authenticating proxy sets to the principal.
        require_principal: refuse anonymous requests (the store requires owners).
    """

    def __init__(
        self,
        verifier: TokenVerifier | None,
        *,
        trusted_header: str | None = None,
        require_principal: bool = False,
    ) -> None:
        self.verifier = verifier
        self.trusted_header = trusted_header
        self.require_principal = require_principal

    async def principal(self, request: Request) -> str | None:
        """The caller's principal, or None for an anonymous caller.

        Raises:
            ProblemError: 401, for a malformed or invalid token, or an anonymous
                caller where a principal is required.
        """
        authorization = request.headers.get("authorization")
        if authorization is not None:
            return await self._verify(authorization)
        if self.trusted_header is not None:
            named = request.headers.get(self.trusted_header, "").strip()
            if named:
                return named
        if self.require_principal:
            raise _unauthorized("this server requires a principal: send a bearer token")
        return None

    async def _verify(self, authorization: str) -> str:
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _unauthorized("expected 'Authorization: Bearer <token>'", error="invalid_request")
        if self.verifier is None:
            raise _unauthorized("this server accepts no bearer tokens", error="invalid_token")
        principal = self.verifier(token)
        if inspect.isawaitable(principal):
            principal = await principal
        if not isinstance(principal, str) or not principal:
            raise _unauthorized("the bearer token is not valid", error="invalid_token")
        return principal


def named(principal: str | None, action: str) -> str:
    """``principal``, for an action no anonymous caller may take (listing, watching all).

    Anonymous tasks are protected by their unguessable ids: a caller who did not
    create one must not learn its id from a list.

    Raises:
        ProblemError: 401 for an anonymous caller.
    """
    if principal is None:
        raise _unauthorized(
            f"{action} needs a principal: send a bearer token "
            "(an anonymous caller reads a task by its id)"
        )
    return principal


def forbidden(detail: str) -> ProblemError:
    """403: the caller is known but may not take this action."""
    return ProblemError(403, "forbidden", detail)


def _unauthorized(detail: str, *, error: str | None = None) -> ProblemError:
    challenge = CHALLENGE if error is None else f'{CHALLENGE}, error="{error}"'
    return ProblemError(401, "unauthorized", detail, headers={"WWW-Authenticate": challenge})
