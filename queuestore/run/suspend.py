"""How a run ends to wait, with no error and no worker held: :class:`Suspended`."""

from __future__ import annotations

from datetime import datetime

__all__ = ["Suspended"]


class Suspended(BaseException):
    """Ends the current run to wait; the job runs again from the start then.

    It waits until ``until``, or (``waits_on``: child task ids, ``[]`` for every
    child) until those children have ended. The task stays ``working`` with no
    worker slot and no broker message held (``TaskStore.suspend``); ``message``
    becomes its status message meanwhile.
    """

    def __init__(
        self, until: datetime | None, message: str, *, waits_on: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.until = until
        self.message = message
        self.waits_on = waits_on
