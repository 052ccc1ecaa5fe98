"""Processes a command starts end with it, however it ends: a SIGKILL of the demo's
process starter or of the MCP example leaves no worker or beat running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from queuestore.run.tether import tethered
from tests.integration.harness import free_port

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def test_a_python_command_runs_in_the_held_process_and_any_other_by_exec() -> None:
    holder = [sys.executable, "-m", "queuestore.run.tether", str(os.getpid())]

    assert tethered([sys.executable, "-m", "celery", "worker"]) == [
        *holder,
        "-m",
        "celery",
        "worker",
    ]
    assert tethered([sys.executable, "app.py", "8000"]) == [*holder, "app.py", "8000"]
    assert tethered(["redis-server"]) == [*holder, "--exec", "redis-server"]
    assert tethered(["x"], parent=1)[3] == "1"


def test_the_held_process_runs_code_and_scripts_as_python_does(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\n")
    code = "import sys; print(__name__, sys.argv)"

    ran_code = subprocess.run(
        tethered([sys.executable, "-c", code, "a"]), capture_output=True, text=True, check=True
    )
    ran_script = subprocess.run(
        tethered([sys.executable, str(script), "b"]), capture_output=True, text=True, check=True
    )

    assert ran_code.stdout == "__main__ ['-c', 'a']\n"
    assert ran_script.stdout == f"__main__ ['b'] {tmp_path}\n"


@linux_only
def test_a_tethered_script_ends_when_its_parent_is_killed(tmp_path: Path, ours: list[int]) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    starter = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from queuestore.run.tether import tethered
        child = subprocess.Popen(tethered([sys.executable, {str(script)!r}]))
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    with started([sys.executable, "-c", starter], ours) as parent:
        child = int(first_line(parent))
        ours.append(child)
        wait_until(lambda: running(child), "the child to start")

        parent.kill()

        wait_until(lambda: not running(child), "the child to end", timeout=10)


@pytest.mark.integration
@linux_only
def test_killing_the_demo_s_process_starter_stops_its_worker_and_beat(
    tmp_path: Path, ours: list[int]
) -> None:
    starter = textwrap.dedent(
        """
        import os, sys, time
        from pathlib import Path
        from queuestore.run.subprocesses import celery_process
        home = Path(sys.argv[1])
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
        env["QUEUESTORE_HOME"] = str(home)
        options = dict(env=env, cwd=home)
        with celery_process(
            "workers", "worker", "--pool=prefork", "--concurrency=2", "--loglevel=INFO",
            log=home / "worker.log", **options,
        ) as worker, celery_process("workers", "beat", log=home / "beat.log", **options) as beat:
            print(worker.pid, beat.pid, flush=True)
            time.sleep(600)
        """
    )
    with started([sys.executable, "-c", starter, str(tmp_path)], ours) as parent:
        worker, beat = map(int, first_line(parent).split())
        ours.extend([worker, beat])
        wait_until(lambda: "ready." in (tmp_path / "worker.log").read_text(), "the worker")
        wait_until(lambda: len(children(worker)) == 2, "the worker's pool")
        processes = [worker, beat, *children(worker)]
        ours.extend(processes)

        parent.kill()

        wait_until(lambda: not any(map(running, processes)), "its processes to end", timeout=30)


@pytest.mark.integration
@linux_only
def test_killing_the_mcp_example_stops_its_worker(tmp_path: Path, ours: list[int]) -> None:
    pytest.importorskip("mcp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
    command = [sys.executable, "-m", "queuestore.mcp.example", "--http", str(free_port())]
    with started([*command, "--worker"], ours, cwd=tmp_path, env=env) as example:
        log = tmp_path / ".queuestore" / "mcp-example-worker.log"
        wait_until(lambda: log.exists() and "ready." in log.read_text(), "the worker")
        (worker,) = children(example.pid)
        processes = [worker, *children(worker)]
        ours.extend(processes)

        example.kill()

        wait_until(lambda: not any(map(running, processes)), "its worker to end", timeout=30)


# -- processes, as /proc shows them --------------------------------------------------


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in {"Z", "X"}


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid and running(int(entry.name)):
                found.append(int(entry.name))
    return sorted(found)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


@pytest.fixture
def ours() -> Iterator[list[int]]:
    """The processes a test started, each ended (by pid) if a failure left it running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def started(command: list[str], ours: list[int], **options: Any) -> Iterator[subprocess.Popen[str]]:
    """``command`` started with its output piped, and killed on the way out."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, **options)
    ours.append(process.pid)
    try:
        yield process
    finally:
        ours.extend(children(process.pid))
        process.kill()
        process.wait(timeout=30)
        assert process.stdout is not None
        process.stdout.close()
