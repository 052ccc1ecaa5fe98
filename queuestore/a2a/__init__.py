"""A2A on queuestore: durable, cluster-safe task stores and an executor on Celery (extra ``a2a``).

See ``docs/howto/a2a-agent.md`` and ``docs/reference/a2a.md``.
:class:`VersionedQueuestoreTaskStore` and
:class:`QueuestoreTaskStore` keep a2a-sdk's tasks as queuestore rows (owner
filter in the query, terminal states sticky, CANCELED keeps artifacts and
revokes the job); :class:`QueuestoreEventStream` delivers every committed
version to ``SubscribeToTask``; :class:`QueuestoreAgentExecutor` runs each
task as a queuestore job; :class:`QueuestorePushConfigStore` keeps push
configs as the store's callbacks, which ``queuestore deliver`` sends as A2A
push notifications (:func:`a2a_request`); :class:`A2AServer` wires them into routes.
"""

from queuestore.a2a.agent_executor import QueuestoreAgentExecutor, text_answer, text_input
from queuestore.a2a.event_stream import QueuestoreEventStream, events_between
from queuestore.a2a.principal import NamedUser, OwnerResolver, resolve_owner
from queuestore.a2a.push_configs import QueuestorePushConfigStore, a2a_request
from queuestore.a2a.server import A2AServer, agent_card
from queuestore.a2a.task_store import (
    SDK_TASK,
    JobRequest,
    QueuestoreTaskStore,
    VersionedQueuestoreTaskStore,
)

__all__ = [
    "SDK_TASK",
    "A2AServer",
    "JobRequest",
    "NamedUser",
    "OwnerResolver",
    "QueuestoreAgentExecutor",
    "QueuestoreEventStream",
    "QueuestorePushConfigStore",
    "QueuestoreTaskStore",
    "VersionedQueuestoreTaskStore",
    "a2a_request",
    "agent_card",
    "events_between",
    "resolve_owner",
    "text_answer",
    "text_input",
]
