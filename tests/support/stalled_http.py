"""An HTTP server on loopback whose files never finish downloading: HEAD answers (the
planner sees a remote file and its size), GET sends headers and then stalls until the
server stops. A stage reading from it stays running for as long as a test needs, so a
test can interrupt it mid-stage without racing a stage that might finish first.

    with stalled_http_server() as base_url:
        source = f"{base_url}/book.txt"
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIZE = 1_000_000  # what HEAD announces


@contextmanager
def stalled_http_server():
    stopped = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self._headers()

        def do_GET(self):  # noqa: N802
            self._headers()
            self.wfile.flush()
            stopped.wait()  # the body never comes

        def _headers(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(SIZE))
            self.end_headers()

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stopped.set()
        server.shutdown()
        server.server_close()
