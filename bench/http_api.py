"""HTTP API benchmark: create and get over HTTP beside the same calls made in-process,
and the delay from a worker's write to the event on the SSE stream.

    uv run python bench/http_api.py [--clients N] [--seconds T] [--samples S]

Needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (user postgres,
trust). It creates a scratch database, starts ``queuestore serve --app http_app``
on a free loopback port and one solo Celery worker, and in one run measures at
the same concurrency (N clients, each sending its next request when the last
one returned):

1. ``POST /tasks`` (commit + publish) beside ``AsyncTaskQueue.submit`` called
   in this process on the same database and broker (the same work), and beside
   ``AsyncTaskStore.create`` (the commit alone);
2. ``GET /tasks/{id}`` beside ``AsyncTaskStore.get``;
3. ``GET /livez`` (a no-op route: the floor of HTTP on this machine);
4. the delay from a worker's progress write (the task's ``updated_at``, the
   database clock of the write) to the arrival of its event on
   ``GET /tasks/{id}/events``, p50 and p95.

Targets from the issue: HTTP create >= 0.5x the direct rate; SSE p50 < 20 ms.
Every process, the queues and the scratch database are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
from benchkit import HERE, free_port, process, scratch_database
from kombu import Connection

from queuestore.aio import AsyncTaskQueue

REDIS = os.environ.get("QUEUESTORE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


@contextlib.contextmanager
def dropped_queues(*names: str) -> Iterator[None]:
    try:
        yield
    finally:
        # kombu's queue_delete only drops queues this connection declared.
        with Connection(REDIS) as connection:
            connection.default_channel.client.delete(*names)


def wait_ready(url: str, child: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the server exited with {child.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the server did not answer in time")


def wait_log(log: Path, needle: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while needle not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{needle!r} never appeared in {log}")
        time.sleep(0.1)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def rate(call: Callable[[], Awaitable[object]], clients: int, seconds: float) -> float:
    """Calls per second by ``clients`` concurrent callers, each calling back to back."""
    deadline = time.perf_counter() + seconds
    counts = [0] * clients

    async def caller(index: int) -> None:
        while time.perf_counter() < deadline:
            await call()
            counts[index] += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(index) for index in range(clients)))
    return sum(counts) / (time.perf_counter() - started)


def http_rate(
    port: int, method: str, path: str, body: bytes | None, *, clients: int, seconds: float
) -> float:
    """Requests per second by ``clients`` threads, each on its own keep-alive connection.

    The client is the standard library's ``http.client``: httpx's async client
    costs more CPU per request than the server does, and would measure itself.
    """
    headers = {"Content-Type": "application/json"} if body is not None else {}
    counts = [0] * clients
    deadline = time.perf_counter() + seconds

    def caller(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            while time.perf_counter() < deadline:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                if response.status >= 300:
                    raise RuntimeError(f"{method} {path}: {response.status}")
                counts[index] += 1
        finally:
            connection.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        for done in [pool.submit(caller, index) for index in range(clients)]:
            done.result()
    return sum(counts) / (time.perf_counter() - started)


async def measure(port: int, clients: int, seconds: float, samples: int) -> None:
    import http_app  # the same app as the server's, in this process

    direct = AsyncTaskQueue(http_app.queue)
    create = json.dumps({"name": "bench.noop", "input": {}}).encode()

    async def direct_submit() -> None:
        await direct.submit("bench.noop", {})

    async def direct_create() -> None:
        await direct.store.create("bench.noop", {})

    def over_http(method: str, path: str, body: bytes | None = None) -> Awaitable[float]:
        return asyncio.to_thread(
            http_rate, port, method, path, body, clients=clients, seconds=seconds
        )

    for _ in range(50):  # warm up pools and prepared statements on both sides
        await direct_submit()
    await over_http("POST", "/tasks", create)
    known = (await direct.store.list(limit=1)).tasks[0].id

    async def direct_get() -> None:
        await direct.store.get(known)

    rates = {
        "HTTP POST /tasks": await over_http("POST", "/tasks", create),
        "AsyncTaskQueue.submit": await rate(direct_submit, clients, seconds),
        "AsyncTaskStore.create": await rate(direct_create, clients, seconds),
        "HTTP GET /tasks/{id}": await over_http("GET", f"/tasks/{known}"),
        "AsyncTaskStore.get": await rate(direct_get, clients, seconds),
        "HTTP GET /livez (no-op)": await over_http("GET", "/livez"),
    }
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        delays = await sse_delays(http, samples)

    print(
        f"{clients} concurrent clients, {seconds:.0f} s each; load average {os.getloadavg()[0]:.1f}"
    )
    for name, value in rates.items():
        print(f"  {name:<26} {value:8.0f}/s")
    create_ratio = rates["HTTP POST /tasks"] / rates["AsyncTaskQueue.submit"]
    print(f"  create HTTP/submit        {create_ratio:8.2f}x (target >= 0.5x)")
    commit_ratio = rates["HTTP POST /tasks"] / rates["AsyncTaskStore.create"]
    print(f"  create HTTP/store.create  {commit_ratio:8.2f}x")
    get_ratio = rates["HTTP GET /tasks/{id}"] / rates["AsyncTaskStore.get"]
    print(f"  get HTTP/direct           {get_ratio:8.2f}x")
    print(
        f"worker write -> SSE event ({len(delays)} events): p50 "
        f"{statistics.median(delays) * 1000:.1f} ms, p95 {percentile(delays, 0.95) * 1000:.1f} ms"
        " (target p50 < 20 ms)"
    )


async def sse_delays(http: httpx.AsyncClient, samples: int) -> list[float]:
    """Per progress event: arrival time minus the write's ``updated_at`` (database clock)."""
    delays: list[float] = []
    while len(delays) < samples:
        created = await http.post(
            "/tasks", json={"name": "bench.ticks", "input": {"count": 50, "pause": 0.02}}
        )
        task_id = created.json()["id"]
        async with http.stream("GET", f"/tasks/{task_id}/events") as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                arrived = time.time()
                task = json.loads(line.removeprefix("data:"))
                if task["status"] == "working" and task["progress"] is not None:
                    written = datetime.fromisoformat(task["updated_at"]).timestamp()
                    delays.append(arrived - written)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--samples", type=int, default=200)
    options = parser.parse_args()
    port = free_port()
    idle, work = (f"qs-bench-http-{secrets.token_hex(4)}" for _ in range(2))
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(scratch_database("queuestore_bench_http", migrate=True))
        stack.enter_context(dropped_queues(idle, work))
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="qs-bench-http-")))
        settings = {
            "QUEUESTORE_DATABASE_URL": database,
            "QUEUESTORE_BROKER_URL": REDIS,
            "QUEUESTORE_BENCH_QUEUE": idle,
            "QUEUESTORE_BENCH_WORK_QUEUE": work,
            "QUEUESTORE_REPORT_INTERVAL": "0",
        }
        # This process builds the same app as the server's, for the direct calls.
        os.environ.update(settings)
        sys.path.insert(0, str(HERE))
        env = {key: value for key, value in os.environ.items() if not key.startswith("QUEUESTORE")}
        env |= settings | {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        }
        server = stack.enter_context(
            process(
                [sys.executable, "-m", "queuestore", "serve", "--port", str(port), "--app",
                 "http_app"],
                env,
                logs / "server.log",
            )
        )  # fmt: skip
        stack.enter_context(
            process(
                [sys.executable, "-m", "celery", "-A", "http_app", "worker", "--pool=solo",
                 "-Q", work, "--without-heartbeat", "--without-gossip", "--without-mingle",
                 "--loglevel=INFO"],
                env,
                logs / "worker.log",
            )
        )  # fmt: skip
        wait_ready(f"http://127.0.0.1:{port}", server)
        wait_log(logs / "worker.log", "ready.")
        asyncio.run(measure(port, options.clients, options.seconds, options.samples))


if __name__ == "__main__":
    main()
