"""Owner scoping: the one definition of who may see which task."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal


class _Any(Enum):
    ANY = "ANY"

    def __repr__(self) -> str:
        return "queuestore.ANY"


ANY: Final = _Any.ANY
"""Unscoped access, for workers, the janitor and operators. Protocol surfaces never pass it."""

Owner = str | None | Literal[_Any.ANY]
"""What a caller passes as ``owner``: a principal, None (anonymous) or ``ANY``."""


@dataclass(frozen=True, slots=True)
class OwnerScope:
    """An owner filter resolved against the store's ``require_owner`` setting.

    Attributes:
        unscoped: every task is visible (``ANY``).
        owner: the only owner visible when scoped; None means unowned tasks.
        nobody: no task is visible at all (anonymous caller, owners required).
    """

    unscoped: bool = False
    owner: str | None = None
    nobody: bool = False

    @classmethod
    def resolve(cls, owner: Owner, *, require_owner: bool) -> OwnerScope:
        """The scope a caller passing ``owner`` gets."""
        if owner is ANY:
            return cls(unscoped=True)
        if owner is None:
            return cls(nobody=require_owner)
        if not isinstance(owner, str):
            from queuestore.core.errors import InvalidTaskData

            raise InvalidTaskData("must be a string, None or queuestore.ANY", field="owner")
        return cls(owner=owner)

    def admits(self, task_owner: str | None) -> bool:
        """Whether a task with ``task_owner`` is visible in this scope (exact equality)."""
        if self.unscoped:
            return True
        if self.nobody:
            return False
        return task_owner == self.owner

    def fingerprint(self) -> str:
        """A stable text naming the scope, so a cursor cannot cross scopes."""
        if self.unscoped:
            return "*"
        if self.nobody:
            return "!"
        return "-" if self.owner is None else "=" + self.owner
