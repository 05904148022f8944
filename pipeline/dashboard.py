"""`pretrain dashboard RUN_DIR...` / `pretrain dashboard ROOT`: served on 127.0.0.1, live.

Every request re-reads the run directories and renders the page again (a second or so),
so curves grow while a run is in progress. One RUN_DIR shows that run's report, several
show the side-by-side comparison; the page reloads itself with a meta refresh.

A ROOT that is not a run but holds runs (a sweep's root, a folder of experiments) shows
every run under it in one table (`pipeline.runs_report`): the page at / polls /runs.json
and redraws in place, keeping its sort, filter and selection; runs are found again on
every request, so new sweep points appear. /sweep.md is the same table as Markdown. The
root of a sweep in a bucket (s3://.../NAME, with its sweep.json) shows the points that
sweep.json names, read from the bucket.
Plain stdlib http.server: no extra dependency for people without wandb.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pipeline.compare import render_comparison
from pipeline.config import ConfigError
from pipeline.run_discovery import bucket_sweep_points, find_run_dirs, is_runs_root
from pipeline.run_source import load_run_source
from pipeline.runs_report import ScalingCache, render_runs, runs_table
from stages.report.run_table_render import table_json

LIVE_REFRESH_S = 10      # while a stage is unfinished
FINISHED_REFRESH_S = 60  # still refresh: a finished run may be re-run with --force
POLL_S = 5               # the runs page (ROOT) asks for /runs.json this often
RUN_PAGES = ("/", "/index.html", "/report.md")
ROOT_PAGES = ("/", "/index.html", "/sweep.md", "/runs.json")


class Dashboard:
    def __init__(self, run_dirs: list[str | Path], *, live_refresh_s: int = LIVE_REFRESH_S,
                 poll_seconds: float = POLL_S):
        self.run_dirs = [d if "://" in str(d) else Path(d) for d in run_dirs]
        # One folder that is not a run itself: every run under it, in one table.
        self.root = self.run_dirs[0] if is_runs_root(self.run_dirs) else None
        self.bucket_sweep = (len(self.run_dirs) == 1 and "://" in str(self.run_dirs[0])
                             and bucket_sweep_points(str(self.run_dirs[0])) is not None)
        if self.bucket_sweep:
            self.root = str(self.run_dirs[0])
        self.live_refresh_s = live_refresh_s
        self.poll_seconds = poll_seconds
        self.scaling = ScalingCache()  # the root page's plots, kept while no run changes
        self.render_lock = threading.Lock()  # one render at a time on a small machine
        self.load()  # fails now (ConfigError) if a RUN_DIR is not a run, or ROOT holds none

    @property
    def pages(self) -> tuple[str, ...]:
        return RUN_PAGES if self.root is None else ROOT_PAGES

    def load(self):
        if self.bucket_sweep:
            points = self.root_runs()
            if not points:
                raise ConfigError(f"{self.root}/sweep.json names no point; run `pretrain sweep` first")
            return points
        if self.root is not None:
            return find_run_dirs(self.root)
        return [load_run_source(d) for d in self.run_dirs]

    def root_runs(self) -> list[str] | None:
        """A bucket sweep's points, read again from its sweep.json; None for a folder."""
        return bucket_sweep_points(self.root) if self.bucket_sweep else None

    def runs_json(self) -> str:
        """The table of every run under ROOT, as the page's poll reads it."""
        with self.render_lock:
            table, _ = runs_table(self.root, scaling=self.scaling, run_dirs=self.root_runs())
        return table_json(table)

    def render(self) -> tuple[str, str]:
        """(html, markdown) of the run(s) as they are on disk right now."""
        with self.render_lock:
            if self.root is not None:
                html, markdown, _ = render_runs(self.root, poll_seconds=self.poll_seconds,
                                                scaling=self.scaling, run_dirs=self.root_runs())
                return html, markdown
            sources = self.load()
            live = any(s.in_progress for s in sources)
            html, markdown, _ = render_comparison(
                sources, refresh_seconds=self.live_refresh_s if live else FINISHED_REFRESH_S)
            return html, markdown


def make_server(dashboard: Dashboard, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server bound to host:port (0 = a free port: `server.server_address[1]`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?")[0]
            if path not in dashboard.pages:
                self._send(404, "text/plain", f"no page {self.path}; the report is at /\n")
                return
            try:
                if path == "/runs.json":
                    data = dashboard.runs_json()
                else:
                    html, markdown = dashboard.render()
            except Exception as error:  # noqa: BLE001 - show it, keep serving
                self._send(500, "text/plain", f"could not render the report: {type(error).__name__}: {error}\n")
                return
            if path == "/runs.json":
                self._send(200, "application/json", data)
            elif path.endswith(".md"):
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
    dashboard = Dashboard(run_dirs)
    server = make_server(dashboard, host, port)
    what = f"every run under {dashboard.root}" if dashboard.root is not None else ", ".join(run_dirs)
    echo(f"dashboard for {what} at http://{host}:{server.server_address[1]}/ (Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
