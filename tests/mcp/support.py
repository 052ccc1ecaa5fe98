"""Clients of the MCP tests: the real ``mcp`` SDK client, in both protocol eras."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
from mcp.client import Client, ClientSession, NotificationBinding
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from queuestore.mcp.client import LegacyTasks, TasksClientExtension

Elicitation = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@asynccontextmanager
async def _transport(
    target: str | tuple[str, list[str], dict[str, str]], token: str | None
) -> AsyncIterator[Any]:
    if isinstance(target, tuple):
        command, args, env = target
        async with stdio_client(StdioServerParameters(command=command, args=args, env=env)) as io:
            yield io
        return
    headers = {"Authorization": f"Bearer {token}"} if token else None
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(target, http_client=http) as io,
    ):
        yield io


@asynccontextmanager
async def legacy(
    target: str | tuple[str, list[str], dict[str, str]],
    *,
    token: str | None = None,
    statuses: list[types.TaskStatusNotificationParams] | None = None,
    elicitation: Elicitation | None = None,
) -> AsyncIterator[LegacyTasks]:
    """A 2025-11-25 session (initialize handshake) with the task calls."""

    async def on_status(params: types.TaskStatusNotificationParams) -> None:
        if statuses is not None:
            statuses.append(params)

    binding = NotificationBinding(
        method="notifications/tasks/status",
        params_type=types.TaskStatusNotificationParams,
        handler=on_status,
    )
    async with _transport(target, token) as (read, write):
        dispatcher = JSONRPCDispatcher(read, write)
        async with ClientSession(
            dispatcher=dispatcher,
            notification_bindings=[binding],
            elicitation_callback=elicitation,
        ) as session:
            await session.initialize()
            yield LegacyTasks(session, dispatcher)


@asynccontextmanager
async def modern(
    target: str, *, token: str | None = None, declare: bool = True
) -> AsyncIterator[Client]:
    """A 2026-07-28 client, declaring the tasks extension unless told not to."""
    extensions = [TasksClientExtension()] if declare else []
    headers = {"Authorization": f"Bearer {token}"} if token else None
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        transport = streamable_http_client(target, http_client=http)
        async with Client(transport, extensions=extensions) as client:
            yield client
