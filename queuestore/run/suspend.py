"""How a run ends to wait, with no error and no worker held: :class:`Suspended`."""

from __future__ import annotations

from datetime import datetime

__all__ = ["Suspended"]


class Suspended(BaseException):
    """Ends the current run to wait until ``until``; the job runs again from the start then.

    The task stays ``working`` with no worker slot and no broker message held
    (``TaskStore.suspend``); ``message`` becomes its status message meanwhile.
    """

    def __init__(self, until: datetime, message: str) -> None:
        super().__init__(message)
        self.until = until
        self.message = message
