"""MCP tasks on queuestore: a tool call becomes a durable Celery job (extra ``mcp``).

See ``docs/howto/mcp-task-tools.md`` and ``docs/reference/mcp.md``.
:class:`McpTasks` declares task tools and serves them on
the official SDK's low-level ``Server`` and on ``MCPServer``, to 2025-11-25
clients (the ``tasks`` capability) and to 2026-07-28 clients (the tasks
extension ``io.modelcontextprotocol/tasks``, SEP-2663).
"""

from queuestore.mcp.extension import TasksExtension
from queuestore.mcp.server_tasks import McpTasks
from queuestore.mcp.settings import McpSettings
from queuestore.mcp.tools import InvalidArguments, TaskSupport, TaskTool, call_tool_result
from queuestore.mcp.wire import EXTENSION_ID, RELATED_TASK

__all__ = [
    "EXTENSION_ID",
    "RELATED_TASK",
    "InvalidArguments",
    "McpSettings",
    "McpTasks",
    "TaskSupport",
    "TaskTool",
    "TasksExtension",
    "call_tool_result",
]
