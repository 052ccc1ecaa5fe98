"""Random sequences of verbs against a model built from the transition table alone.

Hypothesis drives a store through creates, status writes, cancels, claims,
heartbeats, answers, artifacts and deletes; after every step each task the
machine created must match the model: same status, version, worker and
artifacts, finished exactly when terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from queuestore import (
    LIVE,
    TERMINAL,
    TRANSITIONS,
    Artifact,
    InvalidTransition,
    LeaseLost,
    TaskNotFound,
    TaskStatus,
    TaskStore,
)

LEASE = timedelta(minutes=10)
PARKED = frozenset({TaskStatus.INPUT_REQUIRED, TaskStatus.AUTH_REQUIRED})
WORKERS = st.sampled_from(["w1", "w2"])

SETTINGS = settings(
    max_examples=20,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class Model:
    """What the store should hold for one task."""

    status: TaskStatus = TaskStatus.SUBMITTED
    version: int = 1
    worker_id: str | None = None
    artifacts: list[str] = field(default_factory=list)
    answers: int = 0


def may_write(current: TaskStatus, target: TaskStatus) -> bool:
    """The transition table, plus rewriting a live task in its own status."""
    return target in TRANSITIONS[current] or (target == current and current in LIVE)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, store: TaskStore) -> None:
        super().__init__()
        self.store = store
        self.model: dict[str, Model] = {}
        self.deleted: set[str] = set()

    def written(self, task_id: str, **changes: object) -> Model:
        model = self.model[task_id]
        for name, value in changes.items():
            setattr(model, name, value)
        model.version += 1
        return model

    def task_ids(self) -> st.SearchStrategy[str]:
        return st.sampled_from(sorted(self.model))

    @initialize()
    def first_task(self) -> None:
        self.create()

    @rule()
    def create(self) -> None:
        task = self.store.create("machine.job")
        self.model[task.id] = Model()

    @rule(data=st.data(), status=st.sampled_from(sorted(TaskStatus)))
    def update_status(self, data: st.DataObject, status: TaskStatus) -> None:
        task_id, target = data.draw(self.task_ids()), status
        model = self.model[task_id]
        if may_write(model.status, target):
            task = self.store.update(task_id, status=target)
            releases = target in TERMINAL or target in PARKED
            self.written(task_id, status=target, worker_id=None if releases else model.worker_id)
            assert task.status == target
        else:
            try:
                self.store.update(task_id, status=target)
            except InvalidTransition:
                pass
            else:
                raise AssertionError(f"{model.status} -> {target} was allowed")

    @rule(data=st.data(), progress=st.floats(0, 1))
    def report_progress(self, data: st.DataObject, progress: float) -> None:
        task_id = data.draw(self.task_ids())
        if self.model[task_id].status in LIVE:
            assert self.store.update(task_id, progress=progress).progress == progress
            self.written(task_id)
        else:
            try:
                self.store.update(task_id, progress=progress)
            except InvalidTransition:
                pass
            else:
                raise AssertionError("a terminal task took a progress write")

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        task_id = data.draw(self.task_ids())
        if self.model[task_id].status in LIVE:
            self.store.cancel(task_id)
            self.written(task_id, status=TaskStatus.CANCELLED, worker_id=None)
        else:
            try:
                self.store.cancel(task_id)
            except InvalidTransition:
                pass
            else:
                raise AssertionError("a terminal task was cancelled")

    @rule(data=st.data(), worker_id=WORKERS)
    def claim(self, data: st.DataObject, worker_id: str) -> None:
        task_id = data.draw(self.task_ids())
        model = self.model[task_id]
        task = self.store.claim(task_id, worker_id, LEASE)
        claimable = model.status in (TaskStatus.SUBMITTED, TaskStatus.WORKING)
        if claimable and model.worker_id is None:
            assert task is not None
            self.written(task_id, status=TaskStatus.WORKING, worker_id=worker_id)
        else:
            assert task is None

    @rule(data=st.data(), worker_id=WORKERS)
    def heartbeat(self, data: st.DataObject, worker_id: str) -> None:
        task_id = data.draw(self.task_ids())
        model = self.model[task_id]
        task = self.store.heartbeat(task_id, worker_id, LEASE)
        assert task.version == model.version
        assert task.worker_id == model.worker_id

    @rule(data=st.data(), worker_id=WORKERS)
    def fenced_progress(self, data: st.DataObject, worker_id: str) -> None:
        task_id = data.draw(self.task_ids())
        model = self.model[task_id]
        try:
            self.store.update(task_id, progress=0.5, worker_id=worker_id)
        except InvalidTransition:
            assert model.status in TERMINAL
        except LeaseLost:
            assert model.status in LIVE
            assert model.worker_id != worker_id
        else:
            assert model.status in LIVE
            assert model.worker_id == worker_id
            self.written(task_id)

    @rule(data=st.data())
    def provide_input(self, data: st.DataObject) -> None:
        task_id = data.draw(self.task_ids())
        model = self.model[task_id]
        if model.status in PARKED:
            answer = {"n": model.answers}
            task = self.store.provide_input(task_id, answer)
            assert task.answers[-1] == answer
            self.written(task_id, status=TaskStatus.WORKING, answers=model.answers + 1)
        else:
            try:
                self.store.provide_input(task_id, "no")
            except InvalidTransition:
                pass
            else:
                raise AssertionError(f"input accepted in {model.status}")

    @rule(data=st.data(), artifact_id=st.sampled_from(["a", "b"]), append=st.booleans())
    def add_artifact(self, data: st.DataObject, artifact_id: str, append: bool) -> None:
        task_id = data.draw(self.task_ids())
        model = self.model[task_id]
        artifact = Artifact(artifact_id=artifact_id, parts=[model.version])
        if model.status in LIVE:
            self.store.add_artifact(task_id, artifact, append=append)
            ids = model.artifacts
            self.written(task_id, artifacts=ids if artifact_id in ids else [*ids, artifact_id])
        else:
            try:
                self.store.add_artifact(task_id, artifact, append=append)
            except InvalidTransition:
                pass
            else:
                raise AssertionError("a terminal task took an artifact")

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        task_id = data.draw(self.task_ids())
        self.store.delete(task_id)
        del self.model[task_id]
        self.deleted.add(task_id)
        if not self.model:
            self.create()

    @invariant()
    def every_task_matches_its_model(self) -> None:
        for task_id, model in self.model.items():
            task = self.store.get(task_id)
            assert task.status == model.status
            assert task.version == model.version
            assert task.worker_id == model.worker_id
            assert (task.lease_expires_at is not None) == (model.worker_id is not None)
            assert [a.artifact_id for a in task.artifacts] == model.artifacts
            assert len(task.answers) == model.answers
            assert (task.finished_at is not None) == (model.status in TERMINAL)

    @invariant()
    def deleted_tasks_stay_gone(self) -> None:
        for task_id in self.deleted:
            try:
                self.store.get(task_id)
            except TaskNotFound:
                continue
            raise AssertionError(f"deleted task {task_id} came back")

    def teardown(self) -> None:
        for task_id in self.model:
            self.store.delete(task_id)


def test_the_store_follows_the_model(store: TaskStore) -> None:
    run_state_machine_as_test(lambda: StoreMachine(store), settings=SETTINGS)
