"""What both MCP eras' handlers share: the declared task tools and the task verbs.

:class:`TaskCore` holds one Celery app's task tools and does, for the caller
the current request authenticates, what every era's handler does: create a
task for a tool call, wait on it through the store's change feed, answer a
question it asked. :class:`~queuestore.mcp.handshake.HandshakeEra` and
:class:`~queuestore.mcp.extension.TasksExtension` take one;
:class:`~queuestore.mcp.server_tasks.McpTasks`, the façade users build, is one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import mcp_types as types
from celery import Celery
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import HandlerResult
from pydantic import JsonValue

from queuestore import InvalidTransition, Task, TaskNotFound, TaskQueue
from queuestore.aio import AsyncTaskQueue
from queuestore.mcp import wire
from queuestore.mcp.settings import McpSettings
from queuestore.mcp.tools import TaskSupport, TaskTool, call_tool_result, make_task_tool

log = logging.getLogger(__name__)


class TaskCore:
    """The task tools of one Celery app and the verbs both eras' handlers call.

    Built as :class:`~queuestore.mcp.server_tasks.McpTasks`, whose arguments it takes.
    """

    def __init__(self, app: Celery, *, settings: McpSettings | None = None) -> None:
        self.app = app
        self.settings = settings if settings is not None else McpSettings()
        self.tools: dict[str, TaskTool] = {}
        self._queue: AsyncTaskQueue | None = None

    # -- declaring tools ------------------------------------------------------

    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        task_support: TaskSupport = "optional",
        **celery_options: Any,
    ) -> Callable[[Callable[..., Any]], TaskTool]:
        """Declare ``function(ctx, **arguments)`` as a tool whose body runs on a worker.

        Args:
            name: the tool's name (default: the function's); its job is ``mcp.<name>``.
            title: a human-readable title.
            description: default: the function's docstring.
            task_support: ``optional`` (a call may or may not ask for a task; one
                without a task waits for the job), ``required`` or ``forbidden``.
            **celery_options: passed to ``@job`` (``queue``, ``time_limit``...).
        """

        def register(function: Callable[..., Any]) -> TaskTool:
            made = make_task_tool(
                self.app,
                function,
                name=name,
                title=title,
                description=description,
                task_support=task_support,
                celery_options=celery_options,
            )
            if made.name in self.tools:
                raise ValueError(f"tool {made.name!r} is already declared")
            self.tools[made.name] = made
            return made

        return register

    # -- what the eras' handlers use ----------------------------------------

    @property
    def queue(self) -> AsyncTaskQueue:
        """The app's task queue, awaitable."""
        if self._queue is None:
            self._queue = AsyncTaskQueue(TaskQueue.of(self.app))
        return self._queue

    def principal(self) -> str | None:
        """The caller: the access token's client (and subject), or the configured principal."""
        token = get_access_token()
        if token is None:
            return self.settings.principal
        if token.subject:
            return json.dumps([token.client_id, token.subject])
        return token.client_id

    # -- the verbs both eras share --------------------------------------------

    async def create(
        self,
        tool: TaskTool,
        arguments: Mapping[str, Any] | None,
        ttl_ms: int | None,
        *,
        task_id: str | None = None,
    ) -> Task:
        """Commit a task for a call of ``tool`` and enqueue its job; the caller owns it.

        Raises:
            InvalidArguments: the arguments do not fit the tool's schema.
        """
        return await self.submit(
            tool.job.name,
            tool.check(arguments),
            ttl_ms,
            metadata={"mcp": {"tool": tool.name}},
            task_id=task_id,
        )

    async def submit(
        self,
        job_name: str,
        input: Mapping[str, Any],
        ttl_ms: int | None,
        *,
        metadata: Mapping[str, Any],
        task_id: str | None = None,
    ) -> Task:
        """Commit a task owned by the caller, its ttl within the configured maximum; enqueue it."""
        if ttl_ms is not None and ttl_ms < 1:
            raise ValueError(f"ttl_ms must be at least 1, not {ttl_ms}")
        requested = self.settings.default_ttl_ms if ttl_ms is None else ttl_ms
        granted = min(requested, self.settings.max_ttl_ms)
        return await self.queue.submit(
            job_name,
            input,
            owner=self.principal(),
            ttl=timedelta(milliseconds=granted),
            metadata=metadata,
            task_id=task_id,
        )

    async def call(self, tool: TaskTool, arguments: Mapping[str, Any] | None) -> HandlerResult:
        """A call without a task: run the job on a worker and wait for its result.

        If the client gives up on the call (``notifications/cancelled``, a
        closed connection), the task is cancelled too: nobody would read it.

        Raises:
            MCPError: -32603, the server failed or rejected the task
                (:func:`~queuestore.mcp.wire.protocol_error`).
        """
        task = await self.create(tool, arguments, None)
        owner = self.principal()
        try:
            final = await self.until(
                task.id,
                owner,
                lambda seen: seen.is_terminal,
                timeout=self.settings.call_timeout_ms / 1000,
            )
        except asyncio.CancelledError:
            await asyncio.shield(self._abandon(task.id, owner))
            raise
        if not final.is_terminal:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"still running as task {task.id}")],
                is_error=True,
            )
        wire.raise_protocol_error(final)
        return call_tool_result(final)

    async def _abandon(self, task_id: str, owner: str | None) -> None:
        try:
            await self.queue.cancel(task_id, owner=owner, reason="the caller went away")
        except (InvalidTransition, TaskNotFound):
            pass
        except Exception:
            log.warning("could not cancel abandoned task %s", task_id, exc_info=True)

    async def until(
        self,
        task_id: str,
        owner: str | None,
        done: Callable[[Task], bool],
        *,
        timeout: float,
    ) -> Task:
        """Wait until the task satisfies ``done`` or ``timeout`` passes; return it as last seen.

        Waits on the store's change feed (LISTEN/NOTIFY on PostgreSQL), never a
        busy poll; re-reads the task now and then, in case it was deleted.

        Raises:
            TaskNotFound: the task is not (or no longer) visible to ``owner``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self.queue.store.watch(owner=owner, task_ids={task_id}) as changes:
            task = await self.queue.store.get(task_id, owner=owner)
            while not done(task):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                change = await changes.get(timeout=min(remaining, wire.REFRESH_SECONDS))
                if change is None:
                    task = await self.queue.store.get(task_id, owner=owner)
                elif change.version > task.version:
                    task = change
        return task

    async def answer(
        self, task: Task, action: str, content: Mapping[str, Any] | None, owner: str | None
    ) -> None:
        """Resume ``task`` with an accepted answer; cancel it when the user declined."""
        try:
            if action == "accept":
                values: dict[str, Any] = dict(content or {})
                reply: JsonValue = values["answer"] if set(values) == {"answer"} else values
                await self.queue.resume(task.id, reply, owner=owner)
            else:
                await self.queue.cancel(task.id, owner=owner, reason=f"input {action}ed")
        except InvalidTransition:
            log.info("task %s was answered or ended meanwhile; answer dropped", task.id)
