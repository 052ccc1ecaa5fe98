"""A2A push configs as the store's callbacks, on every backend, and their notifications' form.

The config store keeps each config as a callback of format ``a2a`` (every
status change), owner-scoped like the task store; a URL the store's policy
refuses is refused with the SDK's ``InvalidParamsError`` and nothing written.
``a2a_request`` writes a delivery as the SDK's own sender would: a
``StreamResponse`` with the token and authentication headers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from a2a.types import AuthenticationInfo, StreamResponse, TaskPushNotificationConfig, TaskState
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from celery import Celery
from google.protobuf.json_format import Parse

from queuestore import TaskQueue, TaskStatus, TaskStore
from queuestore.a2a import A2AServer, QueuestorePushConfigStore, a2a_request, agent_card
from queuestore.core.callbacks import Callback, CallbackEvents, CallbackFormat, Delivery
from queuestore.core.urls import UrlPolicy
from tests.a2a.a2a_support import ALICE, BOB, call_context, run

URL = "https://93.184.216.34/hook"  # a public address: no lookup, accepted by the default policy
OTHER_URL = "https://93.184.216.35/other"
REFUSED_URL = "http://10.0.0.1/x"


def new_id() -> str:
    """A task id no other test uses (a config may outlive a test whose task never existed)."""
    return f"t-{uuid.uuid4().hex}"


def config(url: str = URL, *, config_id: str = "", token: str = "") -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(id=config_id, url=url, token=token)


def ids(configs: list[TaskPushNotificationConfig]) -> list[str]:
    return [item.id for item in configs]


# -- the config store ----------------------------------------------------------------


def test_a_config_round_trips_with_its_token_and_authentication(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")
    given = config(config_id="c1", token="tok-1")
    given.authentication.CopyFrom(AuthenticationInfo(scheme="Bearer", credentials="secret"))

    stored = run(configs.set_info(task.id, given, ALICE))
    (got,) = run(configs.get_info(task.id, ALICE))
    (callback,) = store.callbacks(task.id)

    assert stored == got
    assert (got.id, got.task_id, got.url, got.token) == ("c1", task.id, URL, "tok-1")
    assert (got.authentication.scheme, got.authentication.credentials) == ("Bearer", "secret")
    assert not given.task_id  # the request's config is not mutated
    assert (callback.format, callback.events, callback.owner) == (
        CallbackFormat.A2A,
        CallbackEvents.ALL,
        "alice",
    )


def test_a_config_without_an_id_is_known_by_its_task_id(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")

    stored = run(configs.set_info(task.id, config(), ALICE))

    assert stored.id == task.id
    assert ids(run(configs.get_info(task.id, ALICE))) == [task.id]


def test_the_same_id_replaces_a_config_and_another_id_adds_one(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")
    run(configs.set_info(task.id, config(config_id="c1"), ALICE))
    run(configs.set_info(task.id, config(config_id="c2"), ALICE))
    run(configs.set_info(task.id, config(OTHER_URL, config_id="c1", token="new"), ALICE))

    got = {item.id: item for item in run(configs.get_info(task.id, ALICE))}

    assert sorted(got) == ["c1", "c2"]
    assert (got["c1"].url, got["c1"].token) == (OTHER_URL, "new")
    assert got["c2"].url == URL
    assert len(store.callbacks(task.id)) == 2


def test_get_info_answers_with_the_calls_tenant(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    tenant = call_context("alice", tenant="acme")
    task_id = new_id()
    run(configs.set_info(task_id, config(config_id="c1"), tenant))

    (got,) = run(configs.get_info(task_id, tenant))
    (published,) = run(configs.get_info_for_dispatch(task_id))

    assert got.tenant == "acme"
    assert published.tenant == ""
    assert run(configs.get_info(task_id, ALICE)) == []  # alice outside the tenant is another owner


def test_owners_see_only_their_configs_and_dispatch_sees_all(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task_id = new_id()  # no task yet: SendMessage sets its config first
    run(configs.set_info(task_id, config(config_id="a"), ALICE))
    run(configs.set_info(task_id, config(config_id="b"), BOB))

    assert ids(run(configs.get_info(task_id, ALICE))) == ["a"]
    assert ids(run(configs.get_info(task_id, BOB))) == ["b"]
    assert sorted(ids(run(configs.get_info_for_dispatch(task_id)))) == ["a", "b"]


def test_another_owners_task_takes_no_config(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")

    with pytest.raises(TaskNotFoundError):
        run(configs.set_info(task.id, config(config_id="b"), BOB))

    assert store.callbacks(task.id) == []
    assert run(configs.get_info(task.id, BOB)) == []


def test_a_refused_url_is_invalid_params_and_writes_nothing(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")

    with pytest.raises(InvalidParamsError) as refused:
        run(configs.set_info(task.id, config(REFUSED_URL), ALICE))

    assert REFUSED_URL in refused.value.message
    assert "private" in refused.value.message
    assert store.callbacks(task.id) == []
    assert run(configs.get_info_for_dispatch(task.id)) == []


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (config(config_id="no spaces"), "id"),
        (config(token="two\nlines"), "token"),
        (config(""), "url"),
    ],
    ids=["id", "token", "url"],
)
def test_a_malformed_config_is_invalid_params_naming_its_field(
    store: TaskStore, given: TaskPushNotificationConfig, named: str
) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")

    with pytest.raises(InvalidParamsError) as refused:
        run(configs.set_info(task.id, given, ALICE))

    assert f"push notification config {named}:" in refused.value.message
    assert store.callbacks(task.id) == []


def test_a_config_may_not_take_the_id_of_a_webhook_callback(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")
    webhook = store.add_callback(task.id, URL, owner="alice")  # the id "default"

    with pytest.raises(InvalidParamsError, match="taken by a webhook callback"):
        run(configs.set_info(task.id, config(OTHER_URL, config_id=webhook.id), ALICE))

    assert store.callbacks(task.id) == [webhook]
    assert run(configs.get_info(task.id, ALICE)) == []  # a webhook is no push config


def test_delete_removes_one_config_or_all_of_the_callers_and_nothing_else(
    store: TaskStore,
) -> None:
    configs = QueuestorePushConfigStore(store)
    task_id = new_id()
    for config_id in ("a1", "a2", "a3"):
        run(configs.set_info(task_id, config(config_id=config_id), ALICE))
    run(configs.set_info(task_id, config(config_id="b1"), BOB))

    run(configs.delete_info(task_id, ALICE, "a2"))
    run(configs.delete_info(task_id, BOB, "a1"))  # not bob's: nothing happens
    run(configs.delete_info(task_id, ALICE, "missing"))
    after_one = ids(run(configs.get_info(task_id, ALICE)))
    run(configs.delete_info(task_id, ALICE))

    assert after_one == ["a1", "a3"]
    assert run(configs.get_info(task_id, ALICE)) == []
    assert ids(run(configs.get_info_for_dispatch(task_id))) == ["b1"]


def test_a_webhook_callback_outlives_deleting_every_config(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task = store.create("x.job", owner="alice")
    webhook = store.add_callback(task.id, URL, owner="alice")
    run(configs.set_info(task.id, config(config_id="c1"), ALICE))

    run(configs.delete_info(task.id, ALICE))

    assert store.callbacks(task.id) == [webhook]


def test_a_config_set_before_its_task_reports_the_tasks_changes(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)
    task_id = new_id()
    run(configs.set_info(task_id, config(token="tok"), ALICE))
    store.create("x.job", owner="alice", task_id=task_id)
    store.update(task_id, status="working")
    store.update(task_id, status="completed", result={"ok": True})

    deliveries = store.deliveries(task_id)

    assert [(d.status, d.callback_id) for d in deliveries] == [
        (TaskStatus.WORKING, task_id),
        (TaskStatus.COMPLETED, task_id),
    ]


def test_a_task_id_queuestore_cannot_hold_has_no_configs(store: TaskStore) -> None:
    configs = QueuestorePushConfigStore(store)

    assert run(configs.get_info("not/a/task", ALICE)) == []
    assert run(configs.get_info_for_dispatch("not/a/task")) == []
    run(configs.delete_info("not/a/task", ALICE))


def test_accepts_url_follows_the_stores_policy(make_store: Callable[..., TaskStore]) -> None:
    default = QueuestorePushConfigStore(make_store())
    local = QueuestorePushConfigStore(make_store(url_policy=UrlPolicy.allowing("127.0.0.1")))

    assert run(default.accepts_url(URL))
    assert not run(default.accepts_url(REFUSED_URL))
    assert not run(default.accepts_url("http://127.0.0.1:9/hook"))
    assert run(local.accepts_url("http://127.0.0.1:9/hook"))
    assert not run(local.accepts_url("ftp://127.0.0.1/hook"))


# -- the server ---------------------------------------------------------------------


def test_the_server_serves_push_when_its_card_advertises_it(store: TaskStore) -> None:
    card = agent_card("http://127.0.0.1:1", name="push", description="a test")
    silent = agent_card(
        "http://127.0.0.1:1", name="push", description="a test", push_notifications=False
    )
    queue = _queue(store)

    on = A2AServer(queue, job="x.job", card=card)
    off = A2AServer(queue, job="x.job", card=silent)

    assert card.capabilities.push_notifications
    assert not silent.capabilities.push_notifications
    assert isinstance(on.push_configs, QueuestorePushConfigStore)
    assert on.handler._push_config_store is on.push_configs
    assert on.handler._push_sender is None  # sent from the store, never by the server
    assert on.handler._push_url_validator == on.push_configs.accepts_url
    assert off.push_configs is None
    assert off.handler._push_config_store is None


def _queue(store: TaskStore) -> TaskQueue:
    return TaskQueue(store, Celery("push-tests", set_as_current=False))


# -- the notification ----------------------------------------------------------------


def deliveries_of(store: TaskStore, *, context_id: str | None) -> list[Delivery]:
    """The deliveries of a task run to completion, with an ``all`` callback of format a2a."""
    task = store.create("x.job", context_id=context_id)
    store.add_callback(task.id, URL, events="all", format="a2a", callback_id="c1")
    store.update(task.id, status="working", progress=0.5, status_message="half way")
    store.update(task.id, status="completed", result={"answer": 42})
    return store.deliveries(task.id)


def a2a_callback(delivery: Delivery, **secrets: str) -> Callback:
    """The callback a delivery goes to, with ``token``, ``auth_scheme``, ``auth_credentials``."""
    return Callback.model_validate(
        {
            "id": delivery.callback_id,
            "task_id": delivery.task_id,
            "url": URL,
            "format": CallbackFormat.A2A,
            "events": CallbackEvents.ALL,
            "created_at": delivery.created_at,
            **secrets,
        }
    )


def parsed(body: bytes) -> StreamResponse:
    response = StreamResponse()
    Parse(body.decode(), response)
    return response


def test_a_change_that_goes_on_is_a_status_update(store: TaskStore) -> None:
    working, _ = deliveries_of(store, context_id="ctx-1")

    body, headers = a2a_request(working, a2a_callback(delivery=working))
    response = parsed(body)

    assert response.WhichOneof("payload") == "status_update"
    update = response.status_update
    assert (update.task_id, update.context_id) == (working.task_id, "ctx-1")
    assert update.status.state == TaskState.TASK_STATE_WORKING
    assert update.status.message.parts[0].text == "half way"
    assert headers == {}


def test_the_end_is_the_whole_task_with_its_result(store: TaskStore) -> None:
    _, completed = deliveries_of(store, context_id=None)  # a task made outside A2A

    body, _ = a2a_request(completed, a2a_callback(delivery=completed))
    response = parsed(body)

    assert response.WhichOneof("payload") == "task"
    assert response.task.id == completed.task_id
    assert response.task.context_id == ""
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
    (artifact,) = response.task.artifacts
    assert artifact.artifact_id == "result"
    assert json.loads(body)["task"]["artifacts"][0]["parts"][0]["data"] == {"answer": 42}


def test_the_headers_carry_the_token_and_the_authorization(store: TaskStore) -> None:
    _, completed = deliveries_of(store, context_id="ctx")

    _, both = a2a_request(
        completed,
        a2a_callback(
            delivery=completed, token="tok-9", auth_scheme="Bearer", auth_credentials="s3cret"
        ),
    )
    _, scheme_only = a2a_request(
        completed, a2a_callback(delivery=completed, token="tok-9", auth_scheme="Bearer")
    )

    assert both == {"X-A2A-Notification-Token": "tok-9", "Authorization": "Bearer s3cret"}
    assert scheme_only == {"X-A2A-Notification-Token": "tok-9"}  # as the SDK's sender


def test_a_delivery_without_its_snapshot_still_names_the_task_and_state(
    store: TaskStore,
) -> None:
    _, completed = deliveries_of(store, context_id="ctx")
    bare = completed.model_copy(update={"task": None})

    response = parsed(a2a_request(bare, a2a_callback(delivery=bare))[0])

    assert response.task.id == completed.task_id
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED
