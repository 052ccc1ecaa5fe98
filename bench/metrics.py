"""What Prometheus metrics cost, beside baselines measured in the same run.

Usage::

    uv run python bench/metrics.py [--rows N] [--writes N] [--rounds R]

1. The metrics observer on the write path: ``create`` then ``cancel`` on a store
   that counts into ``queuestore.metrics.prometheus`` beside the same calls on a store
   without it (same database, rounds interleaved, order alternating).
2. A scrape's store queries (``status_counts`` and ``unpublished_count``, the two
   aggregates ``StoreCollector`` runs) on a table of ``--rows`` tasks, beside one
   ``get`` by key; and a whole scrape (``generate_latest`` of the registry).

A fresh database ``queuestore_bench_<random>`` is created on the server named
by ``QUEUESTORE_BENCH_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
and dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from prometheus_client import generate_latest
from sqlalchemy import create_engine, make_url, text

from queuestore import SqlTaskStore
from queuestore.metrics.prometheus import OBSERVER, instrument, make_registry
from queuestore.store.sql.schema import TaskRow

DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def bench_database() -> Iterator[str]:
    server = make_url(os.environ.get("QUEUESTORE_BENCH_PG_URL", DEFAULT_SERVER))
    if server.drivername == "postgresql":
        server = server.set(drivername="postgresql+psycopg")
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"queuestore_bench_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def load(store: SqlTaskStore, rows: int) -> None:
    """``rows`` tasks copied from one template row, in a mix of statuses, vacuumed."""
    template = store.create("bench.template", {"n": 1})
    columns = [column.name for column in TaskRow.__table__.columns]
    chosen = [
        "substr(md5(random()::text || g), 1, 22)"
        if name == "id"
        else "(ARRAY['submitted','working','completed','failed','cancelled'])[1 + g % 5]"
        if name == "status"
        else f'"{name}"'
        for name in columns
    ]
    names = ", ".join(f'"{name}"' for name in columns)
    statement = (
        f"INSERT INTO queuestore_tasks ({names}) "
        f"SELECT {', '.join(chosen)} FROM queuestore_tasks, generate_series(1, :rows) AS g "
        "WHERE id = :id"
    )
    with store.engine.begin() as connection:
        connection.execute(text(statement), {"rows": rows, "id": template.id})
    # As autovacuum leaves a table in steady state: the visibility map lets the counts
    # read the (status, updated_at) index alone.
    with store.engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE queuestore_tasks")
        )


def per_second(operation: Callable[[], object], count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        operation()
    return count / (time.perf_counter() - started)


def latency_ms(operation: Callable[[], object], count: int) -> float:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        operation()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with bench_database() as url:
        plain = SqlTaskStore(url)
        plain.migrate()
        counted = instrument(SqlTaskStore(url))

        def lifecycle(store: SqlTaskStore) -> Callable[[], object]:
            return lambda: store.cancel(store.create("bench.job").id)

        for store in (plain, counted):  # each engine's pool and prepared statements
            per_second(lifecycle(store), 100)
        rates: dict[str, list[float]] = {"plain": [], "counted": []}
        for round_number in range(args.rounds):
            order = [("plain", plain), ("counted", counted)]
            for name, store in order if round_number % 2 == 0 else reversed(order):
                rates[name].append(per_second(lifecycle(store), args.writes))

        load(plain, args.rows)
        probe = plain.create("bench.probe")
        registry = make_registry(plain)
        get_ms, queries_ms, scrape_ms = [], [], []
        for _ in range(args.rounds):
            get_ms.append(latency_ms(lambda: plain.get(probe.id), 50))
            queries_ms.append(
                latency_ms(lambda: (plain.status_counts(), plain.unpublished_count()), 10)
            )
            scrape_ms.append(latency_ms(lambda: generate_latest(registry), 10))
        task = counted.get(probe.id)
        observe_us = 1000 * latency_ms(lambda: OBSERVER.status_written(task, claimed=True), 10_000)
        plain.close()
        counted.close()

    plain_rate, counted_rate = (
        statistics.median(rates["plain"]),
        statistics.median(rates["counted"]),
    )
    # Each round's pair ran back to back: their ratio is steadier than the medians' under load.
    paired = statistics.median(
        counted / plain for counted, plain in zip(rates["counted"], rates["plain"], strict=True)
    )
    get, queries, scrape = (statistics.median(v) for v in (get_ms, queries_ms, scrape_ms))
    print(
        f"\nmedians of {args.rounds} rounds; {args.rows:,} rows for the scrape; "
        f"load average at end: {os.getloadavg()[0]:.2f}\n"
    )
    print("rounds, create + cancel per second:")
    for name, values in rates.items():
        print(f"  {name:<8} " + " ".join(f"{value:.0f}" for value in values))
    print("| figure | value | baseline | ratio |")
    print("| --- | ---: | ---: | ---: |")
    print(
        f"| create + cancel with the metrics observer | {counted_rate:.0f}/s | "
        f"{plain_rate:.0f}/s without | {paired:.2f}x (paired rounds) |"
    )
    print(
        f"| one observer call (a status write counted) | {observe_us:.1f} us | "
        f"{1000 / plain_rate * 1000 / 2:.0f} us one write | "
        f"{observe_us / (1_000_000 / plain_rate / 2):.3f}x |"
    )
    print(
        f"| scrape's store queries (status counts + backlog) | {queries:.2f} ms | "
        f"{get:.2f} ms one get | {queries / get:.1f}x |"
    )
    print(
        f"| whole scrape (generate_latest) | {scrape:.2f} ms | {get:.2f} ms one get | "
        f"{scrape / get:.1f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
