"""Settings of the MCP surface, read from ``QUEUESTORE_MCP_*`` variables.

Durations are integer milliseconds, the unit MCP itself speaks (``ttl``,
``pollInterval``, ``ttlMs``, ``pollIntervalMs``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class McpSettings(BaseSettings):
    """How the MCP surface serves tasks; each field reads ``QUEUESTORE_MCP_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="QUEUESTORE_MCP_", extra="ignore")

    principal: str | None = Field(
        None,
        description=(
            "Owner of tasks created over transports without authentication (stdio, "
            "HTTP without auth). Unset: such tasks have no owner, and only their "
            "unguessable id protects them."
        ),
    )
    default_ttl_ms: int = Field(
        3_600_000, ge=1, description="Retention of a task whose creator asked for none."
    )
    max_ttl_ms: int = Field(
        86_400_000,
        ge=1,
        description="Longest retention granted; a longer requested ttl is cut to it.",
    )
    poll_interval_ms: int = Field(
        1_000, ge=1, description="Polling interval suggested to clients (pollInterval)."
    )
    call_timeout_ms: int = Field(
        3_600_000,
        ge=1,
        description="How long a tools/call without a task waits for its job.",
    )
    page_size: int = Field(50, ge=1, le=1000, description="Tasks per tasks/list page.")
