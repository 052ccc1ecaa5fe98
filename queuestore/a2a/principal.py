"""Whose task it is: the owner queuestore filters on, from the A2A call context."""

from __future__ import annotations

import json
from collections.abc import Callable

from a2a.auth.user import User
from a2a.server.context import ServerCallContext

OwnerResolver = Callable[[ServerCallContext], "str | None"]
"""The owner of a call: a queuestore owner string, or None for an anonymous caller."""


def resolve_owner(context: ServerCallContext) -> str | None:
    """The default owner: the user's name, inside the call's tenant when it has one.

    An unauthenticated caller (empty user name) is anonymous (None): it sees only
    tasks created without an owner, and nothing at all on a store built with
    ``require_owner=True``. With a tenant (the REST ``/{tenant}/...`` prefix or
    the request's ``tenant``), the owner is the JSON array ``[tenant, user]``,
    so the same user name in two tenants names two owners.
    """
    user = context.user.user_name
    if not user:
        return None
    if context.tenant:
        return json.dumps([context.tenant, user], separators=(",", ":"))
    return user


class NamedUser(User):
    """A user known by name, as an authenticating context builder makes it.

    Authenticated when the name is not empty; an empty name is the anonymous
    caller, whose owner is None (see :func:`resolve_owner`).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"NamedUser({self._name!r})"

    @property
    def is_authenticated(self) -> bool:
        return bool(self._name)

    @property
    def user_name(self) -> str:
        return self._name


__all__ = ["NamedUser", "OwnerResolver", "resolve_owner"]
