"""A webhook receiver, run as its own process by the push tests.

``python receiver.py LOG [--port N] [--status CODE] [--delay S]`` listens on
127.0.0.1 (a free port unless ``--port``), prints the port on its first line,
and appends each request it gets to ``LOG`` as one JSON line: when it arrived
(``time.time()``), the path, the headers and the body as text. It answers
``--status`` (204 by default), ``--delay`` seconds after it logged the
request; the tests stop and start it to take it down.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--status", type=int, default=204)
    parser.add_argument("--delay", type=float, default=0.0)
    options = parser.parse_args()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived = time.time()
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode()
            record = {
                "received_at": arrived,
                "path": self.path,
                "headers": {name.lower(): value for name, value in self.headers.items()},
                "body": body,
            }
            with lock, options.log.open("a") as log:
                log.write(json.dumps(record) + "\n")
            time.sleep(options.delay)
            self.send_response(options.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    sys.stdout.write(f"{server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
