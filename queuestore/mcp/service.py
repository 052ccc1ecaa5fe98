"""MCP tasks on queuestore: tools whose calls become durable Celery jobs.

:class:`McpTasks` holds the task tools of one Celery app and serves them to MCP
clients of both protocol eras on the official SDK:

- 2025-11-25 (handshake connections): the ``tasks`` capability, task-augmented
  ``tools/call`` answered with ``CreateTaskResult`` once the task is committed
  and its job enqueued, ``tasks/get|result|list|cancel`` and
  ``notifications/tasks/status`` for every status change, whichever process
  wrote it (the store's change feed);
- 2026-07-28: the tasks extension ``io.modelcontextprotocol/tasks`` (SEP-2663),
  ``tasks/get|update|cancel`` and the flat ``resultType: "task"`` result.

Every verb passes the caller's principal to the store as the owner, so one
client never sees, waits on or cancels another's task. The rules (transitions,
owner filter, cursors, cancel) are the store's and the queue's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import mcp_types as types
from celery import Celery
from mcp.server import MCPServer, Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import HandlerResult, ServerMiddleware
from mcp.server.extension import compose_tool_call_handler
from mcp.shared.exceptions import MCPError
from pydantic import JsonValue

from queuestore import InvalidTransition, Task, TaskNotFound, TaskQueue
from queuestore.aio import AsyncTaskQueue
from queuestore.mcp import wire
from queuestore.mcp.handshake import HandshakeEra
from queuestore.mcp.settings import McpSettings
from queuestore.mcp.tools import TaskSupport, TaskTool, call_tool_result, make_task_tool

if TYPE_CHECKING:
    from queuestore.mcp.extension import TasksExtension

log = logging.getLogger(__name__)


class McpTasks:
    """The task tools of one Celery app, served over MCP.

    The MCP server process and the Celery worker import the module that makes
    it and declares the tools, so both register the same jobs::

        tasks = McpTasks(app)

        @tasks.tool(task_support="optional")
        def slow_add(ctx: TaskContext, a: int, b: int) -> int: ...

        # the low-level server, or MCPServer (its extensions fixed at construction)
        server = Server("demo", lifespan=tasks.lifespan)
        mcp = MCPServer("demo", extensions=[tasks.extension], lifespan=tasks.lifespan)
        tasks.attach(server)             # (or tasks.attach(mcp))

    Args:
        app: the Celery app the jobs run on; the serving process must also
            have made its ``TaskQueue(store, app)``.
        settings: ttl, poll interval, page size, principal of unauthenticated
            transports; by default read from ``QUEUESTORE_MCP_*``.
    """

    def __init__(self, app: Celery, *, settings: McpSettings | None = None) -> None:
        from queuestore.mcp.extension import TasksExtension

        self.app = app
        self.settings = settings if settings is not None else McpSettings()
        self.tools: dict[str, TaskTool] = {}
        self.extension: TasksExtension = TasksExtension(self)
        self._queue: AsyncTaskQueue | None = None
        self.handshake = HandshakeEra(self)
        self.middleware: ServerMiddleware[Any] = self.handshake.middleware
        """The ``Server.middleware`` entry of the 2025-11-25 era (see :class:`HandshakeEra`)."""

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

    # -- serving -------------------------------------------------------------

    def attach(self, server: Server[Any] | MCPServer[Any]) -> None:
        """Serve the task tools and the task methods of both eras on ``server``.

        On a low-level ``Server`` this registers everything. An ``MCPServer``
        must have been built with ``extensions=[tasks.extension]`` (its
        extensions are fixed at construction); this adds :meth:`middleware`,
        which passing ``middleware=[tasks.middleware]`` to it does as well.
        """
        if isinstance(server, MCPServer):
            server.middleware.append(self.middleware)
            return
        for binding in self.extension.methods():
            server.add_request_handler(binding.method, binding.params_type, binding.handler)
        server.extensions[wire.EXTENSION_ID] = self.extension.settings()
        if server.get_request_handler("tools/list") is None:
            server.add_request_handler("tools/list", types.PaginatedRequestParams, _no_tools)
        existing = server.get_request_handler("tools/call")
        handler = existing.handler if existing is not None else _unknown_tool
        server.add_request_handler(
            "tools/call",
            types.CallToolRequestParams,
            compose_tool_call_handler([self.extension], handler),
        )
        server.middleware.append(self.middleware)

    async def aclose(self) -> None:
        """Stop the status notifiers of this process (they also end with their task)."""
        await self.handshake.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, _server: object) -> AsyncIterator[dict[str, Any]]:
        """A server lifespan (``Server(..., lifespan=tasks.lifespan)``): the store opened
        on the server's event loop while it runs, so the task methods' store calls take
        no thread hop (see ``TaskStore.open_async``)."""
        async with self.queue.store.open():
            yield {}

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


async def _no_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[])


async def _unknown_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> HandlerResult:
    raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}")
