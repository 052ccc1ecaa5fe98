"""MCP tasks benchmark: task-augmented calls against a plain tool, over streamable HTTP.

    uv run python bench/mcp_tasks.py [--calls N] [--seconds T] [--samples S]

Needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres,
trust). It creates a scratch database, starts ``bench/mcp_app.py`` as an MCP
server process on a free loopback port and one solo Celery worker, and drives
them with the real ``mcp`` client (2025-11-25 session). In one run it measures:

1. latency of a task-augmented ``tools/call`` (until ``CreateTaskResult``: the
   row committed and the job published) beside a plain in-process no-op tool
   of the same server, calls interleaved, p50 and p99;
2. ``tasks/get`` throughput beside the plain tool's call rate (one client,
   sequential requests);
3. the delay from a worker's completion (the task's ``lastUpdatedAt``, the
   database clock of the terminal write) to the return of a ``tasks/result``
   that was already waiting, and to the ``notifications/tasks/status`` that
   announces it.

Targets from the issue: (1) task p50 <= 2x plain p50; (3) result delay p50 < 20
ms on PostgreSQL; (2) tasks/get rate >= 0.5x the plain rate. Every process and
the scratch database are removed at the end, even on error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

import anyio
import mcp_types as types
from benchkit import HERE, free_port, process, scratch_database
from mcp.client import ClientSession, NotificationBinding
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from queuestore.mcp.client import LegacyTasks


def wait_port(port: int, child: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the server exited with {child.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError("the server did not listen in time")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def moment(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def measure(url: str, calls: int, seconds: float, samples: int) -> None:
    announced: dict[str, float] = {}

    async def on_status(params: types.TaskStatusNotificationParams) -> None:
        if params.status == "completed":
            announced[params.task_id] = time.time() - moment(params.last_updated_at)

    binding = NotificationBinding(
        method="notifications/tasks/status",
        params_type=types.TaskStatusNotificationParams,
        handler=on_status,
    )
    async with streamable_http_client(url) as (read, write):
        dispatcher = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher, notification_bindings=[binding]) as session:
            await session.initialize()
            tasks = LegacyTasks(session, dispatcher)
            for _ in range(20):  # warm up connections, pools and the change feed
                await session.call_tool("plain_noop", {})
                await tasks.create("noop", {})

            plain, augmented, last = await call_latencies(session, tasks, calls)
            await tasks.result(last)  # the worker drained the queue
            get_rate = await rate(lambda: tasks.get(last), seconds)
            plain_rate = await rate(lambda: session.call_tool("plain_noop", {}), seconds)
            to_result, ids = await completion_delays(tasks, samples)
            await anyio.sleep(1.0)
    to_notification = [announced[task_id] for task_id in ids if task_id in announced]

    p50 = statistics.median
    print(f"task-augmented tools/call : {spread(augmented)}")
    print(f"plain no-op tools/call    : {spread(plain)}")
    print(f"  task/plain p50          : {p50(augmented) / p50(plain):.2f}x (target <= 2x)")
    print(f"tasks/get                 : {get_rate:.0f}/s; plain call {plain_rate:.0f}/s")
    print(f"  get/plain rate          : {get_rate / plain_rate:.2f}x (target >= 0.5x)")
    print(f"completion -> tasks/result: {spread(to_result)} (target p50 < 20 ms)")
    print(f"completion -> notification: {spread(to_notification)}")


async def call_latencies(
    session: ClientSession, tasks: LegacyTasks, calls: int
) -> tuple[list[float], list[float], str]:
    """Plain and task-augmented calls, interleaved; the id of the last task."""
    plain: list[float] = []
    augmented: list[float] = []
    last = ""
    for _ in range(calls):
        started = time.perf_counter()
        await session.call_tool("plain_noop", {})
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        last = (await tasks.create("noop", {})).task_id
        augmented.append(time.perf_counter() - started)
    return plain, augmented, last


async def rate(call: Callable[[], Awaitable[object]], seconds: float) -> float:
    """Sequential calls per second."""
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await call()
        count += 1
    return count / (time.perf_counter() - started)


async def completion_delays(tasks: LegacyTasks, samples: int) -> tuple[list[float], list[str]]:
    """Terminal write -> return of a waiting tasks/result, per task; and the task ids."""
    delays: list[float] = []
    ids: list[str] = []
    for _ in range(samples):
        created = await tasks.create("nap", {"seconds": 0.3})
        await tasks.result(created.task_id)  # waits ~0.3 s for the worker
        received = time.time()
        finished = moment((await tasks.get(created.task_id)).last_updated_at)
        delays.append(received - finished)
        ids.append(created.task_id)
    return delays, ids


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    return f"p50 {p50 * 1000:7.2f} ms, p99 {p99 * 1000:7.2f} ms (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--samples", type=int, default=30)
    options = parser.parse_args()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcp-bench-{secrets.token_hex(3)}"
    logs.mkdir(parents=True)
    with scratch_database("queuestore_bench_mcp", migrate=True) as database_url:
        env = {key: value for key, value in os.environ.items() if not key.startswith("QUEUESTORE_")}
        env |= {
            "QUEUESTORE_DATABASE_URL": database_url,
            "QUEUESTORE_BROKER_URL": "redis://127.0.0.1:6379/0",
            "QUEUESTORE_BENCH_QUEUE": f"mcp-bench-{secrets.token_hex(4)}",
            "QUEUESTORE_HOME": str(logs / "home"),
            "QUEUESTORE_AUTO_MIGRATE": "false",
        }
        port = free_port()
        worker = [sys.executable, "-m", "celery", "-A", "mcp_app", "worker", "--pool=solo"]
        worker += ["--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "warning"]
        with (
            process(worker, env, logs / "worker.log"),
            process(
                [sys.executable, str(HERE / "mcp_app.py"), str(port)], env, logs / "server.log"
            ) as server,
        ):
            wait_port(port, server)
            anyio.run(
                measure,
                f"http://127.0.0.1:{port}/mcp",
                options.calls,
                options.seconds,
                options.samples,
            )
    print(f"(logs in {logs})")


if __name__ == "__main__":
    main()
