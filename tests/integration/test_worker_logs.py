"""What a worker's log says, at the level it deserves, read from real worker processes.

- At start: a worker on the embedded (filesystem) broker says that broker has
  no event loop (not that its pool has none), as a note; a prefetch
  multiplier above 1 given on the command line is warned about, on any pool.
- The janitor, the reaper and the sweep are quiet at INFO while they find
  nothing to do, and say so at INFO when they act.
- A claim its concurrency limit refused is logged as that, not as a run
  that "succeeded".
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from queuestore import TERMINAL, TaskStatus
from tests.integration.harness import DeploymentFactory, LoggedProcess, count_lines, wait_for

pytestmark = pytest.mark.integration

MAINTENANCE = ("queuestore.janitor", "queuestore.reaper", "queuestore.sweep")


def info_lines(process: LoggedProcess, *needles: str) -> list[str]:
    """The INFO (or higher) lines of ``process``'s log that contain every one of ``needles``."""
    return [
        line
        for line in process.text().splitlines()
        if re.search(r": (INFO|WARNING|ERROR|CRITICAL)/", line)
        and all(needle in line for needle in needles)
    ]


def test_a_prefork_worker_on_the_embedded_broker_says_which_side_has_no_event_loop(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("filesystem", "sqlite")
    worker = stack.start_worker(pool="prefork", concurrency=2)

    line = stack.wait_log(worker, "queuestore:", "no event loop")

    assert "the filesystem broker has no event loop" in line, line
    assert "INFO/" in line, line
    assert "solo, threads or gevent" not in worker.text()
    assert "prefetch" not in worker.text()


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_prefetch_multiplier_given_on_the_command_line_is_warned_about(
    deployment: DeploymentFactory, pool: str
) -> None:
    stack = deployment("filesystem", "sqlite")
    worker = stack.start_worker(pool=pool, concurrency=1, options=["--prefetch-multiplier=4"])

    line = stack.wait_log(worker, "queuestore:", "prefetch multiplier is 4")

    assert "WARNING/" in line, line


def test_maintenance_is_quiet_at_info_until_it_acts(deployment: DeploymentFactory) -> None:
    stack = deployment("filesystem", "sqlite")  # beats every second (the harness's FAST)
    worker = stack.start_worker(concurrency=1, beat=True)
    stack.wait_log(worker, "beat: Starting...")
    time.sleep(5.0)  # each has run a few times with nothing to do
    assert [line for name in MAINTENANCE for line in info_lines(worker, name)] == []
    assert info_lines(worker, "janitor") == []
    assert info_lines(worker, "sweep") == []

    store = stack.queue.store
    expired = store.create("tests.count_runs", ttl=timedelta(seconds=1), job=False)
    store.update(expired.id, status=TaskStatus.CANCELLED)

    line = stack.wait_log(worker, "janitor removed 1 expired task")
    assert "INFO/" in line, line


def test_a_claim_refused_by_its_limit_is_not_logged_as_a_success(
    deployment: DeploymentFactory,
) -> None:
    stack = deployment("filesystem", "sqlite", QUEUESTORE_OWNER_CONCURRENCY="1")
    worker = stack.start_worker(concurrency=2, beat=True)
    # Two submits in a burst: each finds no task running, so both are published,
    # and one of the two claims is refused at the limit.
    tasks = [stack.queue.submit("tests.sleep", {"seconds": 1.0}, owner="alice") for _ in range(2)]
    for task in tasks:
        assert stack.wait_status(task.id, *TERMINAL).status is TaskStatus.COMPLETED

    def succeeded() -> list[str]:
        return [line for task in tasks for line in info_lines(worker, f"[{task.id}] succeeded")]

    wait_for(lambda: len(succeeded()) >= 2, timeout=30, what="both runs' lines", logs=[worker])
    time.sleep(1.0)  # a line for the refusal would be written by now
    refusals = info_lines(worker, "waits for a slot", "concurrency limit")
    received = sum(count_lines(worker, f"Task tests.sleep[{task.id}] received") for task in tasks)
    assert len(refusals) >= 1, worker.text()[-4000:]
    assert received == 2 + len(refusals), worker.text()[-4000:]
    assert len(succeeded()) == 2, succeeded()  # one for each run, none for a refusal
