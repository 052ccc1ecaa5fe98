"""A headless Chromium driven over the Chrome DevTools Protocol, with nothing downloaded.

Debian's ``chromium`` is started with ``--remote-debugging-port=0`` in a
profile folder of its own; the port it picked is read from the folder's
``DevToolsActivePort`` file, and the page is driven through its WebSocket
with ``websockets``: navigate, evaluate script, resize the window, set the time
zone, take a screenshot.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Self

import httpx
from websockets.sync.client import ClientConnection, connect

from tests.integration.harness import LoggedProcess, wait_for

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


class Chromium:
    """One browser with one page; use it as a context manager, which stops the browser."""

    def __init__(self, executable: str, root: Path, env: dict[str, str]) -> None:
        self.executable = executable
        self.root = root
        self.env = env
        self.process: LoggedProcess | None = None
        self._stack = ExitStack()
        self._ids = itertools.count(1)

    def __enter__(self) -> Self:
        with ExitStack() as starting:
            self.process = self._start()
            starting.callback(self.process.stop, timeout=5)
            self._socket = starting.enter_context(self._connect(self.process))
            self._stack = starting.pop_all()
        self.send("Page.enable")
        self.send("Runtime.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> LoggedProcess:
        profile = self.root / "chromium-profile"
        profile.mkdir()
        command = [
            self.executable,
            *FLAGS,
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--window-size=1280,900",
            "about:blank",
        ]
        return LoggedProcess.start(
            "chromium", command, env=self.env, cwd=self.root, log=self.root / "chromium.log"
        )

    def _connect(self, process: LoggedProcess) -> ClientConnection:
        active = self.root / "chromium-profile" / "DevToolsActivePort"
        wait_for(
            lambda: active.exists() and len(active.read_text().splitlines()) >= 2,
            timeout=30,
            what="chromium's DevTools port",
            logs=[process],
        )
        port = int(active.read_text().splitlines()[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(target for target in targets if target["type"] == "page")
        return connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result (events in between are dropped)."""
        call = next(self._ids)
        self._socket.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == call:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        """The value of a script expression in the page (promises are awaited)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && location.href.startsWith('http')")

    def wait(self, expression: str, *, timeout: float = 30.0, what: str | None = None) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                page = self.evaluate("document.body.innerText")
                raise AssertionError(f"timed out waiting for {what or expression}; page:\n{page}")
            time.sleep(0.05)

    def resize(self, width: int, height: int = 900) -> None:
        """Lay the page out in a window ``width`` CSS pixels wide (a laptop, a tablet)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.wait(f"window.innerWidth === {width}", what=f"a {width} px wide window")

    def time_zone(self, zone: str) -> None:
        """Run the page as if the computer's time zone were ``zone`` (an IANA name)."""
        self.send("Emulation.setTimezoneOverride", timezoneId=zone)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path
