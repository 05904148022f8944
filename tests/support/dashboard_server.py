"""A `pretrain dashboard` server on a free port in a thread, and a GET that returns the
status of errors instead of raising (the dashboard tests read 404 and 500 pages)."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from views.dashboard import Dashboard, make_server


@pytest.fixture
def serve():
    """`serve(*run_dirs) -> base URL`; every server started is stopped after the test."""
    servers = []

    def start(*run_dirs) -> str:
        server = make_server(Dashboard(list(run_dirs)), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()
