"""A child process that ends with its parent, however the parent ends.

``python -m queuestore.run.tether PARENT_PID COMMAND...`` holds itself to
PARENT_PID, then runs COMMAND in the same process: ``-m MODULE ARGS``,
``-c CODE ARGS`` and ``SCRIPT ARGS`` as ``python`` would, any other program
by ``exec``.
:func:`tethered` writes that command line; the demo, the MCP example and the
benchmarks start their workers, beat and servers through it, so that a
SIGKILL of the parent (which runs no cleanup) leaves nothing running.

Held means: on Linux the kernel sends the child SIGTERM when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, which outlives an ``exec``); and a watchdog
thread checks twice a second that the parent is still there. When it is
gone the watchdog sends SIGTERM itself where the platform has no
``PR_SET_PDEATHSIG``, and if the process has not ended after a grace (a
worker's warm shutdown waits for its running jobs), it kills its process
group, the prefork children with it.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Sequence

GRACE_SECONDS = 15.0
"""How long a tethered process may take to stop warmly once its parent is gone."""

_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5


def tethered(command: Sequence[str], *, parent: int | None = None) -> list[str]:
    """``command`` (to start with :class:`subprocess.Popen`) held to ``parent``, by default
    this process.

    The process that starts the child must outlive it, and on Linux so must
    the thread that starts it: the kernel's signal follows the thread.
    """
    holder = [sys.executable, "-m", __name__, str(os.getpid() if parent is None else parent)]
    if command and command[0] == sys.executable:
        return [*holder, *command[1:]]  # the same interpreter: run in the held process
    return [*holder, "--exec", *command]


def hold(parent: int, *, grace: float = GRACE_SECONDS) -> None:
    """End this process when ``parent`` is gone (see the module's docstring)."""
    signalled = _ask_the_kernel(signal.SIGTERM)
    if os.getppid() != parent:  # it died before the kernel was asked
        raise SystemExit(f"queuestore.run.tether: parent {parent} is gone")
    watchdog = threading.Thread(
        target=_watch, args=(parent, grace, not signalled), name="tether", daemon=True
    )
    watchdog.start()


def _ask_the_kernel(signum: int) -> bool:
    """Have the kernel send ``signum`` when the parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, grace: float, signal_itself: bool) -> None:
    while os.getppid() == parent:
        time.sleep(_POLL_SECONDS)
    if signal_itself:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    group = os.getpgid(0)
    if group == os.getpid():  # a session or group of its own: its children go too
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: Sequence[str]) -> None:
    """``PARENT_PID (-m MODULE | -c CODE | SCRIPT | --exec PROGRAM) ARGS...``"""
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit(f"usage: python -m {__name__} PARENT_PID COMMAND...")
    parent, command = int(argv[0]), list(argv[1:])
    if command[0] == "--exec":
        _ask_the_kernel(signal.SIGTERM)  # kept across exec; the watchdog is not
        if os.getppid() != parent:
            raise SystemExit(f"{__name__}: parent {parent} is gone")
        os.execvp(command[1], command[1:])
    hold(parent)
    if command[0] == "-m":
        sys.argv = command[1:]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    elif command[0] == "-c":
        sys.argv = ["-c", *command[2:]]
        exec(compile(command[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = command
        sys.path[0] = os.path.dirname(os.path.abspath(command[0]))
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
