"""The pending rule, defined once (``queuestore.store.pending``), read alike everywhere.

The Python predicate, the statements of the SQL store, the text of the sweep's
partial indexes, the in-memory store and the claim must all pick the same
tasks: a task in every state a task can be in is built on each store, and
each reading is compared with the others.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from queuestore import SqlTaskStore, Task, TaskStatus, TaskStore
from queuestore.store.pending import PENDING_SQL, PENDING_STATUSES, is_pending, unpublished_sql

LEASE = timedelta(seconds=30)


def every_state(store: TaskStore) -> dict[str, Task]:
    """One task in each state that matters to the rule, by a name that says which."""
    tasks = {"submitted": store.create("x.job"), "record": store.create("x.job", job=False)}
    claimed = store.create("x.job")
    tasks["working, held"] = store.claim(claimed.id, "w-held", LEASE) or claimed
    parked = store.create("x.job")
    store.claim(parked.id, "w-parked", LEASE)
    tasks["input_required"] = store.report(
        parked.id, "w-parked", status=TaskStatus.INPUT_REQUIRED, status_message="?"
    )
    answered = store.create("x.job")
    store.claim(answered.id, "w-answered", LEASE)
    store.report(answered.id, "w-answered", status=TaskStatus.INPUT_REQUIRED)
    tasks["working, answered"] = store.provide_input(answered.id, "yes")
    done = store.create("x.job")
    store.claim(done.id, "w-done", LEASE)
    tasks["completed"] = store.report(done.id, "w-done", status=TaskStatus.COMPLETED)
    tasks["cancelled"] = store.cancel(store.create("x.job").id)
    waiting = store.create("x.job")
    store.claim(waiting.id, "w-waiting", LEASE)
    ((tasks["submitted child"], _),) = store.spawn(waiting.id, "w-waiting", [{"name": "x.child"}])
    tasks["working, parked on its children"] = (
        store.suspend(waiting.id, "w-waiting", message="waiting", waits_on=[]) or waiting
    )
    return tasks


def test_the_predicate_names_the_tasks_a_run_may_claim(store: TaskStore) -> None:
    tasks = every_state(store)

    pending = {name for name, task in tasks.items() if is_pending(task)}

    assert pending == {"submitted", "submitted child", "record", "working, answered"}
    assert tasks["working, parked on its children"].waits_on == []
    assert {tasks[name].status for name in pending} <= PENDING_STATUSES
    for name, task in tasks.items():
        assert (store.claim(task.id, f"w2-{name}", LEASE) is not None) is (name in pending), name


def test_the_store_publishes_the_pending_jobs_and_only_those(store: TaskStore) -> None:
    tasks = every_state(store)
    jobs = {task.id for name, task in tasks.items() if is_pending(task) and name != "record"}

    unpublished = {task.id for task in store.unpublished(timedelta(0), limit=100)}

    assert unpublished == jobs
    assert store.unpublished_count() == len(jobs)
    store.mark_published_many([(task_id, store.get(task_id).version) for task_id in jobs])
    assert store.unpublished(timedelta(0), limit=100) == []


def test_the_sweep_indexes_spell_the_rule_the_statements_apply(store: TaskStore) -> None:
    if not isinstance(store, SqlTaskStore):
        return  # the in-memory store reads the predicate itself (above)
    tasks = every_state(store)
    dialect = store.engine.dialect.name
    assert dialect in ("postgresql", "sqlite")

    with store.engine.connect() as connection:
        pending = connection.execute(text(f"SELECT id FROM queuestore_tasks WHERE {PENDING_SQL}"))
        indexed = connection.execute(
            text(
                "SELECT id FROM queuestore_tasks WHERE "
                + unpublished_sql(dialect, published=False, scheduled=False)  # type: ignore[arg-type]
            )
        )
        pending_ids, indexed_ids = {row[0] for row in pending}, {row[0] for row in indexed}

    assert pending_ids == {task.id for task in tasks.values() if is_pending(task)}
    assert indexed_ids == {task.id for task in store.unpublished(timedelta(0), limit=100)}
