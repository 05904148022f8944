"""`pretrain dashboard RUN_DIR...` / `pretrain dashboard ROOT`: served on 127.0.0.1, live.

One RUN_DIR shows that run's report, several show the side-by-side comparison. The page
asks /version.json every few seconds (a digest of the runs' stage states and metrics
files) and, when it changed, fetches the page again and swaps its body in place: no
reload, the scroll position stays.

A ROOT that is not a run but holds runs (a sweep's root, a folder of experiments; also
one that holds none yet, or that its parent will hold: a sweep about to start) shows
every run under it in one table (`views.runs_report`). The page at / polls POST
/runs.json and redraws in place, keeping its sort, filter and selection; the answer
holds the table only when it changed and only the curve points logged since the last
poll (`views.dashboard_data`). GET /runs.json is the whole table (for scripts);
/sweep.md is the same table as Markdown. Runs are found again on every request, so new
sweep points appear. The root of a sweep in a bucket (s3://.../NAME, with its
sweep.json) shows the points that sweep.json names, read from the bucket.
Plain stdlib http.server: no extra dependency for people without wandb.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pipeline.config import ConfigError
from pipeline.run_discovery import bucket_sweep_points, is_run_dir
from storage.urls import is_url
from views.compare import render_comparison
from views.dashboard_data import RunsData
from views.run_source import load_run_source
from views.run_table_render import run_table_html, run_table_markdown, table_json
from views.runs_report import ScalingCache

LIVE_REFRESH_S = 10      # while a stage is unfinished
FINISHED_REFRESH_S = 60  # still asked: a finished run may be re-run with --force
POLL_S = 5               # the runs page (ROOT) polls /runs.json this often
MAX_POLL_BYTES = 4 << 20  # a poll names the shown runs and metrics: small
RUN_PAGES = ("/", "/index.html", "/report.md", "/version.json")
ROOT_PAGES = ("/", "/index.html", "/sweep.md", "/runs.json")
# The run page's live update: ask for the version, swap the body in when it changed.
RUN_PAGE_SCRIPT = """<script>
(() => {
  let version = %s;
  async function poll() {
    try {
      const answer = await (await fetch("version.json", {cache: "no-store"})).json();
      if (answer.version !== version) {
        const text = await (await fetch(location.pathname, {cache: "no-store"})).text();
        const fresh = new DOMParser().parseFromString(text, "text/html");
        const scroll = window.scrollY;
        document.body.replaceWith(fresh.body);
        window.scrollTo(0, scroll);
        version = answer.version;
      }
      setTimeout(poll, answer.refresh_seconds * 1000);
    } catch (error) {
      setTimeout(poll, %d);
    }
  }
  setTimeout(poll, %d);
})();
</script>"""


class Dashboard:
    def __init__(self, run_dirs: list[str | Path], *, live_refresh_s: int = LIVE_REFRESH_S,
                 poll_seconds: float = POLL_S):
        self.run_dirs = [d if is_url(d) else Path(d) for d in run_dirs]
        # One folder that is not a run itself: every run under it, in one table.
        self.root = self.run_dirs[0] if is_root(self.run_dirs) else None
        self.bucket_sweep = (len(self.run_dirs) == 1 and is_url(self.run_dirs[0])
                             and bucket_sweep_points(str(self.run_dirs[0])) is not None)
        if self.bucket_sweep:
            self.root = str(self.run_dirs[0])
        self.live_refresh_s = live_refresh_s
        self.poll_seconds = poll_seconds
        self.scaling = ScalingCache()  # the root page's plots, kept while no run changes
        self.data = RunsData(self.root, scaling=self.scaling, root_runs=self.root_runs) if self.root else None
        self.render_lock = threading.Lock()  # one render at a time on a small machine
        self.rendered: tuple[str, tuple[str, str]] | None = None  # (version, page) of RUN_DIRs
        self.load()  # fails now (ConfigError) if a RUN_DIR is not a run

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
            return []  # runs are found on each request; none yet is fine
        return [load_run_source(d) for d in self.run_dirs]

    def root_runs(self) -> list[str] | None:
        """A bucket sweep's points, read again from its sweep.json; None for a folder."""
        return bucket_sweep_points(self.root) if self.bucket_sweep else None

    def runs_json(self, etag: str | None = None) -> str:
        """The table of every run under ROOT; {"unchanged": true} when it still has `etag`."""
        with self.render_lock:
            table = self.data.table()
        if etag is not None and etag == table["etag"]:
            return table_json({"unchanged": True, "etag": etag, "generated": table["generated"]})
        return table_json(table)

    def poll(self, request: dict) -> str:
        """A poll of the runs page: what changed since the state `request` names."""
        with self.render_lock:
            return table_json(self.data.poll(request))

    def version(self) -> dict:
        """A digest of what the RUN_DIR page shows: stage states and metrics files."""
        sources = self.load()
        parts = []
        for source in sources:
            for stage in source.stages:
                files = []
                if stage.directory is not None and stage.state != "done":
                    files = [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in _entries(stage.directory)]
                parts.append((str(source.run_dir), stage.stage, stage.state, stage.fingerprint,
                              (stage.manifest or {}).get("end_time"), files))
        live = any(s.in_progress for s in sources)
        digest = hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:16]
        return {"version": digest, "refresh_seconds": self.live_refresh_s if live else FINISHED_REFRESH_S}

    def render(self) -> tuple[str, str]:
        """(html, markdown) of the run(s) as they are on disk right now."""
        with self.render_lock:
            if self.root is not None:
                table = self.data.table()
                return (run_table_html(table, poll_seconds=self.poll_seconds),
                        run_table_markdown(table, scaling_markdown=self.scaling.parts[1]))
            version = self.version()
            if self.rendered is None or self.rendered[0] != version["version"]:
                html, markdown, _ = render_comparison(self.load())
                script = RUN_PAGE_SCRIPT % (json.dumps(version["version"]), self.live_refresh_s * 1000,
                                            version["refresh_seconds"] * 1000)
                self.rendered = (version["version"], (html.replace("</body>", script + "</body>"), markdown))
            return self.rendered[1]


def is_root(paths: list[str | Path]) -> bool:
    """One local folder that is not a run: every run under it. It may hold none yet, or
    not exist yet while its parent does (a sweep started after its dashboard)."""
    if len(paths) != 1 or is_url(paths[0]):
        return False
    path = Path(paths[0])
    return (path.is_dir() and not is_run_dir(path)) or (not path.exists() and path.parent.is_dir())


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return [entry for entry in entries if entry.is_file()]
    except OSError:
        return []


def make_server(dashboard: Dashboard, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server bound to host:port (0 = a free port: `server.server_address[1]`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            path = url.path
            if path not in dashboard.pages:
                self._send(404, "text/plain", f"no page {self.path}; the report is at /\n")
                return
            try:
                if path == "/runs.json":
                    etag = parse_qs(url.query).get("table", [None])[0]
                    self._send(200, "application/json", dashboard.runs_json(etag))
                    return
                if path == "/version.json":
                    self._send(200, "application/json", json.dumps(dashboard.version()))
                    return
                html, markdown = dashboard.render()
            except Exception as error:  # noqa: BLE001 - show it, keep serving
                self._send(500, "text/plain", f"could not render the report: {type(error).__name__}: {error}\n")
                return
            if path.endswith(".md"):
                self._send(200, "text/markdown; charset=utf-8", markdown)
            else:
                self._send(200, "text/html; charset=utf-8", html)

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            if urlsplit(self.path).path != "/runs.json" or dashboard.root is None:
                self._send(404, "text/plain", f"no page {self.path} to post to\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_POLL_BYTES:
                self._send(413, "text/plain", "a poll names the shown runs and metrics; this one is too long\n")
                return
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as error:
                self._send(400, "text/plain", f"a poll is a JSON object: {error}\n")
                return
            try:
                body = dashboard.poll(request if isinstance(request, dict) else {})
            except Exception as error:  # noqa: BLE001 - show it, keep serving
                self._send(500, "text/plain", f"could not read the runs: {type(error).__name__}: {error}\n")
                return
            self._send(200, "application/json", body)

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
