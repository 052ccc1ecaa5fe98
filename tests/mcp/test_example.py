"""The example server the README links: one command on the embedded default."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from tests.mcp.support import legacy

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def _processes_in(folder: Path) -> list[int]:
    """PIDs of the processes whose working folder is ``folder`` (ours: the example's tree)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_the_example_runs_its_tools_on_its_own_worker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUESTORE_")}
    env["QUEUESTORE_HOME"] = str(tmp_path / ".queuestore")
    command = (sys.executable, ["-m", "queuestore.mcp.example", "--worker"], env)
    async with legacy(command) as tasks:
        created = await tasks.create("slow_add", {"a": 2, "b": 3, "seconds": 0})
        assert (await tasks.result(created.task_id)).structured_content == {"result": 5}
    home = tmp_path / ".queuestore"
    assert "mcp.slow_add" in (home / "mcp-example-worker.log").read_text()
    # The worker (and its prefork children) stopped with the server.
    deadline = time.monotonic() + 30
    while _processes_in(home):
        assert time.monotonic() < deadline, f"still running: {_processes_in(home)}"
        await anyio.sleep(0.2)
