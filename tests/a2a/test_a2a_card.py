"""The agent card ``agent_card`` builds and ``A2AServer`` serves: every field the A2A
specification requires, skills included, and a ``Cache-Control`` clients may cache it by.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from a2a.types import AgentSkill
from a2a.utils.proto_utils import validate_proto_required_fields
from celery import Celery
from starlette.applications import Starlette
from starlette.testclient import TestClient

from queuestore import InMemoryTaskStore, TaskQueue
from queuestore.a2a import A2AServer, agent_card

CARD_PATH = "/.well-known/agent-card.json"
URL = "http://127.0.0.1:8000"


@pytest.fixture
def queue() -> Iterator[TaskQueue]:
    app = Celery("a2a-card", broker="memory://", set_as_current=False)
    yield TaskQueue(InMemoryTaskStore(), app)
    app.close()


def served(server: A2AServer) -> TestClient:
    """The server's routes without its lifespan: the card needs no store."""
    return TestClient(Starlette(routes=server.routes()))


def test_a_card_without_skills_has_one_skill_for_the_agent() -> None:
    card = agent_card(URL, name="reports", description="Builds monthly reports.")

    (skill,) = card.skills
    assert (skill.name, skill.description) == ("reports", "Builds monthly reports.")
    assert skill.id
    assert list(skill.tags) == ["reports"]
    validate_proto_required_fields(card)  # raises on a REQUIRED field missing or empty


def test_given_skills_are_kept_and_an_empty_list_is_refused() -> None:
    skills = [AgentSkill(id="build", name="build", description="Builds.", tags=["reports"])]
    card = agent_card(URL, name="reports", description="Reports.", skills=skills)
    assert [skill.id for skill in card.skills] == ["build"]
    validate_proto_required_fields(card)

    with pytest.raises(ValueError, match="at least one skill"):
        agent_card(URL, name="reports", description="Reports.", skills=[])


def test_the_served_card_has_its_skills_and_may_be_cached(
    queue: TaskQueue, caplog: pytest.LogCaptureFixture
) -> None:
    card = agent_card(URL, name="reports", description="Builds monthly reports.")
    with caplog.at_level(logging.WARNING):
        server = A2AServer(queue, job="reports.build", card=card)
        client = served(server)
    assert "not spec-compliant" not in caplog.text  # the SDK's check of the card

    response = client.get(CARD_PATH)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    assert [skill["name"] for skill in response.json()["skills"]] == ["reports"]
    again = client.get(CARD_PATH, headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304  # revalidating costs one empty answer


def test_the_cache_control_is_the_deployments_to_choose(queue: TaskQueue) -> None:
    card = agent_card(URL, name="reports", description="Reports.")
    longer = A2AServer(queue, job="reports.build", card=card, card_cache_control="max-age=3600")
    assert served(longer).get(CARD_PATH).headers["cache-control"] == "max-age=3600"
    none = A2AServer(queue, job="reports.build", card=card, card_cache_control=None)
    assert "cache-control" not in served(none).get(CARD_PATH).headers
