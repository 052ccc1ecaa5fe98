"""ListTasks on queuestore's listing: every field of the request, tokens in the SDK's format.

The order is queuestore's: newest created first, by ``(created_at, id)``, an
immutable key, so a task that changes while a client pages is neither skipped
nor repeated. Page tokens carry that position in a2a-sdk's cursor format
(``{"ts": <created_at ns>, "id": <task id>}``, url-safe base64); the owner
filter applies to every page, inside the query, before the limit, and
``total_size`` is one ``COUNT`` with the same filters, run beside the page.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from a2a.types import ListTasksRequest, ListTasksResponse
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

from queuestore import TaskStore
from queuestore.a2a import convert
from queuestore.core.errors import InvalidTaskData

DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 100


async def list_page(
    store: TaskStore, params: ListTasksRequest, owner: str | None
) -> ListTasksResponse:
    """One page of ``owner``'s tasks for ``params``, with ``total_size``.

    The page and the count run side by side (``store.run_async`` each: two
    connections, one round trip's wait).

    Raises:
        InvalidParamsError: a bad page size, page token or filter.
    """
    listing = _Listing.of(params, owner)
    # Both or neither fail (the same filters): gather each outcome, so that a
    # second failure is not left unretrieved.
    page, total = await asyncio.gather(
        store.run_async(listing.page, store),
        store.run_async(listing.total, store),
        return_exceptions=True,
    )
    for outcome in (page, total):
        if isinstance(outcome, InvalidTaskData):
            raise InvalidParamsError(message=str(outcome)) from outcome
        if isinstance(outcome, BaseException):
            raise outcome
    assert isinstance(page, ListTasksResponse)
    assert isinstance(total, int)
    page.total_size = total
    return page


@dataclass(frozen=True, slots=True)
class _Listing:
    """A ``ListTasksRequest`` as the store's filters, checked."""

    filters: dict[str, Any]
    page_size: int
    after: tuple[datetime, str] | None
    history_length: int | None
    include_artifacts: bool

    @classmethod
    def of(cls, params: ListTasksRequest, owner: str | None) -> _Listing:
        page_size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE_SIZE
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidParamsError(message=f"page_size must be 1..{MAX_PAGE_SIZE}")
        # Root tasks only: the tasks a client created, not the children their jobs spawned.
        filters: dict[str, Any] = {"owner": owner, "parent_id": None}
        if params.status:
            try:
                filters["status"] = convert.status_of(params.status)
            except ValueError as exc:
                raise InvalidParamsError(message=str(exc)) from exc
        if params.context_id:
            filters["context_id"] = params.context_id
        if params.HasField("status_timestamp_after"):
            # A2A keeps tasks updated at or after the instant; the store's filter is strict.
            after = params.status_timestamp_after.ToDatetime(tzinfo=UTC)
            filters["updated_after"] = after - timedelta(microseconds=1)
        position = None
        if params.page_token:
            token = decode_list_tasks_cursor(params.page_token)
            if token is None or token.timestamp_ns is None:
                raise InvalidParamsError(message="page_token is not a token of this listing")
            position = (_from_ns(token.timestamp_ns), token.task_id)
        return cls(
            filters=filters,
            page_size=page_size,
            after=position,
            history_length=params.history_length if params.HasField("history_length") else None,
            include_artifacts=params.include_artifacts,
        )

    def page(self, store: TaskStore) -> ListTasksResponse:
        """The page's tasks, converted, and the next page's token (no ``total_size``)."""
        cursor = None if self.after is None else store.cursor_after(*self.after, **self.filters)
        page = store.list(limit=self.page_size, cursor=cursor, **self.filters)
        response = ListTasksResponse(
            tasks=[
                convert.to_a2a(
                    row,
                    history_length=self.history_length,
                    include_artifacts=self.include_artifacts,
                )
                for row in page.tasks
            ],
            page_size=self.page_size,
        )
        if page.next_cursor is not None:
            last = page.tasks[-1]
            response.next_page_token = encode_list_tasks_cursor(
                ListTasksCursor(convert.timestamp_ns(last.created_at), last.id)
            )
        return response

    def total(self, store: TaskStore) -> int:
        """How many tasks the listing walks through."""
        return store.count(**self.filters)


def _from_ns(value: int) -> datetime:
    seconds, nanoseconds = divmod(value, 1_000_000_000)
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidParamsError(message="page_token is not a token of this listing") from exc
    return moment + timedelta(microseconds=nanoseconds // 1_000)


__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "list_page"]
