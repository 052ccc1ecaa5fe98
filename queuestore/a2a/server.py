"""An A2A server on queuestore in a few lines: the handler, the routes, the ASGI app.

    queue = Settings().make_queue(app)
    server = A2AServer(queue, job="agent.echo", card=card)
    uvicorn.run(server.app(), port=8000)

The handler gets the versioned store and the event stream on the same rows, so
``SubscribeToTask`` and ``CancelTask`` work for tasks that run on workers,
other replicas or before a restart; JSON-RPC is served at ``/`` and HTTP+JSON
(REST) beside it, and the agent card at ``/.well-known/agent-card.json``.

Push notifications are on when the card advertises them (:func:`agent_card`
does by default): the configs are kept in the store
(:class:`~queuestore.a2a.push_configs.QueuestorePushConfigStore`) and sent from it by
``queuestore deliver``, never by the server process, so run a deliverer too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

from a2a.server.agent_execution import RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from pydantic import JsonValue
from starlette.applications import Starlette

from queuestore import TaskQueue
from queuestore.a2a.agent_executor import QueuestoreAgentExecutor, text_answer, text_input
from queuestore.a2a.event_stream import QueuestoreEventStream
from queuestore.a2a.principal import OwnerResolver, resolve_owner
from queuestore.a2a.push_configs import QueuestorePushConfigStore
from queuestore.a2a.task_store import VersionedQueuestoreTaskStore


def agent_card(
    url: str,
    *,
    name: str,
    description: str,
    skills: list[AgentSkill] | None = None,
    version: str = "1.0.0",
    push_notifications: bool = True,
) -> AgentCard:
    """A card for an agent served at ``url`` over JSON-RPC (``/``) and HTTP+JSON.

    It advertises streaming and, unless ``push_notifications`` is False, push
    notifications (which :class:`A2AServer` then serves).

    Args:
        skills: what the agent can do; the specification requires at least one.
            By default one skill, ``main``, named and described as the agent and
            tagged with its name.

    Raises:
        ValueError: ``skills`` is an empty list.
    """
    if skills is not None and not skills:
        raise ValueError("an agent card needs at least one skill (or skills=None for one default)")
    if skills is None:
        skills = [AgentSkill(id="main", name=name, description=description, tags=[name])]
    base = url.rstrip("/")
    return AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=[
            AgentInterface(url=base + "/", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=base, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=push_notifications),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )


DEFAULT_CARD_CACHE_CONTROL: Final = "public, max-age=300"
"""How long clients may keep the agent card without asking again (the specification's
SHOULD): five minutes, then one conditional request (``ETag``) answered 304 while the
card is unchanged."""


class A2AServer:
    """The request handler and the routes of an agent whose work is a queuestore job.

    Push notifications are served when ``card`` advertises them
    (``capabilities.push_notifications``): their configs are rows of the
    store's callbacks (:attr:`push_configs`), their URLs are checked against
    the store's ``url_policy``, and they are sent by ``queuestore deliver``
    processes, at least once and in order per config; the server sends none.

    Args:
        queue: the queue whose workers run ``job``.
        job: the job every task runs.
        card: the agent card to serve; its ``capabilities.push_notifications``
            turns push notifications on or off.
        context_builder: who the caller is (the SDK's default reads Starlette's
            authentication middleware).
        owner_resolver: the owner of a call (default: user name within the tenant).
        input_from: the job's input for a new task's message.
        answer_from: the answer to the job's question, from a continuing message.
        interrupted_task_timeout: seconds a task waiting for input stays in the
            SDK's memory before it is released (the row keeps it regardless).
        card_cache_control: the ``Cache-Control`` of the served card; None sends none.
    """

    def __init__(
        self,
        queue: TaskQueue,
        *,
        job: str,
        card: AgentCard,
        context_builder: DefaultServerCallContextBuilder | None = None,
        owner_resolver: OwnerResolver = resolve_owner,
        input_from: Callable[[RequestContext], Mapping[str, Any]] = text_input,
        answer_from: Callable[[RequestContext], JsonValue] = text_answer,
        interrupted_task_timeout: float | None = 60.0,
        card_cache_control: str | None = DEFAULT_CARD_CACHE_CONTROL,
    ) -> None:
        self.card = card
        self.card_cache_control = card_cache_control
        self.context_builder = context_builder
        self.store = VersionedQueuestoreTaskStore(queue, owner_resolver=owner_resolver)
        self.events = QueuestoreEventStream(queue.store)
        self.executor = QueuestoreAgentExecutor(
            self.store, job, input_from=input_from, answer_from=answer_from
        )
        self.push_configs: QueuestorePushConfigStore | None = None
        """The push configs' store; None when the card does not advertise push."""
        if card.capabilities.push_notifications:
            self.push_configs = QueuestorePushConfigStore(queue, owner_resolver=owner_resolver)
        self.handler = DefaultRequestHandler(
            agent_executor=self.executor,
            task_store=self.store,
            agent_card=card,
            event_stream=self.events,
            push_config_store=self.push_configs,
            push_url_validator=None if self.push_configs is None else self.push_configs.accepts_url,
            interrupted_task_timeout=interrupted_task_timeout,
        )

    def routes(self) -> list[Any]:
        """The agent card, JSON-RPC at ``/`` and the REST routes."""
        return [
            *create_agent_card_routes(self.card, cache_control=self.card_cache_control),
            *create_jsonrpc_routes(self.handler, rpc_url="/", context_builder=self.context_builder),
            *create_rest_routes(self.handler, context_builder=self.context_builder),
        ]

    def app(self) -> Starlette:
        """A Starlette app serving :meth:`routes`, draining the handler on shutdown.

        While it runs, the store's calls run on the server's event loop, on its
        own connections (:meth:`~queuestore.TaskStore.open_async`).
        """

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with self.store.store.open_async():
                yield
                await self.handler.aclose()

        return Starlette(routes=self.routes(), lifespan=lifespan)


__all__ = ["A2AServer", "agent_card"]
