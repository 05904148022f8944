"""`pretrain dashboard RUN_DIR...`: the HTML report(s) served on 127.0.0.1, live.

Every request re-reads the run directories and renders the page again (a second or so),
so curves grow while a run is in progress; the page reloads itself with a meta refresh.
One RUN_DIR shows that run's report, several show the side-by-side comparison.
Plain stdlib http.server: no extra dependency for people without wandb.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pipeline.compare import render_comparison
from pipeline.run_source import load_run_source

LIVE_REFRESH_S = 10      # while a stage is unfinished
FINISHED_REFRESH_S = 60  # still refresh: a finished run may be re-run with --force


class Dashboard:
    def __init__(self, run_dirs: list[str | Path], *, live_refresh_s: int = LIVE_REFRESH_S):
        self.run_dirs = [Path(d) for d in run_dirs]
        self.live_refresh_s = live_refresh_s
        self.render_lock = threading.Lock()  # one render at a time on a small machine
        self.load()  # fails now (ConfigError) if a RUN_DIR is not a run

    def load(self):
        return [load_run_source(d) for d in self.run_dirs]

    def render(self) -> tuple[str, str]:
        """(html, markdown) of the run(s) as they are on disk right now."""
        with self.render_lock:
            sources = self.load()
            live = any(s.in_progress for s in sources)
            html, markdown, _ = render_comparison(
                sources, refresh_seconds=self.live_refresh_s if live else FINISHED_REFRESH_S)
            return html, markdown


def make_server(dashboard: Dashboard, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server bound to host:port (0 = a free port: `server.server_address[1]`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path.split("?")[0] not in ("/", "/index.html", "/report.md"):
                self._send(404, "text/plain", f"no page {self.path}; the report is at /\n")
                return
            try:
                html, markdown = dashboard.render()
            except Exception as error:  # noqa: BLE001 - show it, keep serving
                self._send(500, "text/plain", f"could not render the report: {type(error).__name__}: {error}\n")
                return
            if self.path.startswith("/report.md"):
                self._send(200, "text/markdown; charset=utf-8", markdown)
            else:
                self._send(200, "text/html; charset=utf-8", html)

        def _send(self, status: int, content_type: str, body: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")  # always the run as it is now
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            pass  # one line per refresh would drown the terminal

    return ThreadingHTTPServer((host, port), Handler)


def serve(run_dirs: list[str], host: str = "127.0.0.1", port: int = 8000, echo=print) -> int:
    server = make_server(Dashboard(run_dirs), host, port)
    echo(f"dashboard for {', '.join(run_dirs)} at http://{host}:{server.server_address[1]}/ "
         f"(Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
