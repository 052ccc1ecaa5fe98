"""How long the ``queuestore`` command takes to answer, beside ``celery --help`` and bare Python.

Each command runs as a fresh process, as a user types it, in interleaved
rounds (one run of each per round); the figures are the medians, wall time:

- **python -c pass**: the interpreter's own start, the floor.
- **celery --help**: the tool queuestore sits on, the baseline a user knows.
- **queuestore --help**, **queuestore tasks --help**: the help, which imports no
  database or broker library.
- **queuestore tasks list** (and ``--json``): a page of tasks on the embedded
  default, an SQLite file in a fresh ``QUEUESTORE_HOME`` holding 20 tasks.

The targets: ``--help`` <= 0.3 s, ``tasks list`` <= 1.0 s.

Each command is timed twice over: with a bytecode cache, as an installed
package runs (the cache is written by the untimed warm-up, in a temporary
``PYTHONPYCACHEPREFIX``), and without one (``PYTHONDONTWRITEBYTECODE=1`` and no
cache: every module compiled from source at each start, as on a machine that
sets it).

    uv run python bench/cli_startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "celery --help": [str(BIN / "celery"), "--help"],
    "queuestore --help": [str(BIN / "queuestore"), "--help"],
    "queuestore tasks --help": [str(BIN / "queuestore"), "tasks", "--help"],
    "queuestore tasks list": [str(BIN / "queuestore"), "tasks", "list"],
    "queuestore tasks list --json": [str(BIN / "queuestore"), "tasks", "list", "--json"],
}
TARGETS = {"queuestore --help": 0.3, "queuestore tasks list": 1.0}


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def embedded_home(root: Path) -> Path:
    """A migrated embedded store holding 20 tasks, as a first session leaves it."""
    from queuestore import Settings

    home = root / "home"
    store = Settings(home=home).make_store()
    store.create_many([{"name": "reports.build", "input": {"n": n}} for n in range(20)])
    store.close()
    return home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="qs-bench-cli-") as folder:
        root = Path(folder)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("QUEUESTORE_", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"))
        }
        env |= {"QUEUESTORE_HOME": str(embedded_home(root)), "COLUMNS": "80"}
        modes = {
            "bytecode cache": env | {"PYTHONPYCACHEPREFIX": str(root / "pycache")},
            "no bytecode cache": env | {"PYTHONDONTWRITEBYTECODE": "1"},
        }
        times: dict[tuple[str, str], list[float]] = {(m, n): [] for m in modes for n in COMMANDS}
        for mode_env in modes.values():  # write the cache and warm the file cache, untimed
            for command in COMMANDS.values():
                timed(command, mode_env, root)
        for _ in range(args.runs):
            for mode, mode_env in modes.items():
                for name, command in COMMANDS.items():
                    times[mode, name].append(timed(command, mode_env, root))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(f"{args.runs} runs each, interleaved; median wall time")
    for mode in modes:
        report(mode, {name: times[mode, name] for name in COMMANDS})


def report(mode: str, times: dict[str, list[float]]) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor, celery = medians["python -c pass"], medians["celery --help"]
    print(f"\n{mode}:")
    print(f"  {'command':30} {'median':>8} {'min':>8} {'vs celery':>10} {'vs python':>10}  target")
    for name, median in medians.items():
        target = TARGETS.get(name)
        met = target is not None and median <= target
        verdict = "" if target is None else f"<= {target} s, {'met' if met else 'missed'}"
        print(
            f"  {name:30} {median:7.3f}s {min(times[name]):7.3f}s "
            f"{median / celery:9.2f}x {median / floor:9.1f}x  {verdict}"
        )


if __name__ == "__main__":
    main()
