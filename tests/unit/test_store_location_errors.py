"""A workdir or store the pipeline cannot use is one `error:` line and exit 2, through the
real CLI in a subprocess, before any stage or Ray starts (issue 31, defect 2): a bucket
that does not exist (on a real S3 server on loopback, moto's), an endpoint nobody listens
on, one that hangs up on every request (retried a bounded number of times, not the 50
connections over 40 s that s3fs and botocore make by default), and a scheme that is no
object store (ftp://, which fsspec would otherwise connect to); for gs://, a missing
bucket and a server that hangs up (gcsfs alone retries for over 30 s)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import REPO_ROOT, cli_command, cli_env
from tests.support.s3_server import make_bucket


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))  # read by cli_env()
    (tmp_path / "data").mkdir()
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: unit\ndata_dir: {tmp_path / 'data'}\n"
                    "ingest:\n  sources:\n    - path: corpus/*.txt\n")
    return path


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(*args), cwd=REPO_ROOT, env={**cli_env(), **env},
                          capture_output=True, text=True, timeout=120)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The run's stderr, which must be exactly one `error:` line, with exit 2."""
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "Traceback" not in said, said
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    return lines[0]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the socket is: nobody listens there


def test_a_bucket_that_does_not_exist_is_one_error_line(s3_endpoint, config_file):
    url = "s3://no-such-bucket/runs/x"
    # `run` (which would start Ray for ingest), `plan`, and `status` of a run there.
    for args in (("run", str(config_file), "-o", f"workdir={url}", "--only", "ingest"),
                 ("plan", str(config_file), "-o", f"store={url}"),
                 ("status", url)):
        line = one_error_line(cli(*args))
        assert line.startswith(f"error: {url}: the bucket 'no-such-bucket' does not exist at {s3_endpoint}"), line
        assert "aws s3 mb s3://no-such-bucket" in line, line


def test_an_endpoint_nobody_answers_on_is_one_error_line(s3_endpoint, config_file):
    url = f"{make_bucket('errors-exists')}/runs/x"
    endpoint = f"http://127.0.0.1:{closed_port()}"
    line = one_error_line(cli("plan", str(config_file), "-o", f"workdir={url}", AWS_ENDPOINT_URL=endpoint))
    assert line.startswith(f"error: {url}: cannot reach the object store at {endpoint} (AWS_ENDPOINT_URL)"), line
    assert "check AWS_ENDPOINT_URL and the network" in line, line


@contextlib.contextmanager
def hang_up_server() -> Iterator[tuple[str, list]]:
    """An endpoint that accepts each connection and closes it at once; yields its URL and
    the list it adds one item to per connection."""
    connections: list = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)

        def hang_up() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:  # the server socket was closed: the test is over
                    return
                connections.append(1)
                connection.close()

        threading.Thread(target=hang_up, daemon=True).start()
        yield "http://127.0.0.1:%d" % server.getsockname()[1], connections


def test_an_endpoint_that_hangs_up_is_tried_a_bounded_number_of_times(config_file):
    with hang_up_server() as (endpoint, connections):
        line = one_error_line(cli("plan", str(config_file), "-o", "workdir=s3://any-bucket/runs/x",
                                  AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="key", AWS_SECRET_ACCESS_KEY="secret"))
    assert line.startswith(f"error: s3://any-bucket/runs/x: cannot reach the object store at {endpoint}"), line
    # Two attempts (object_store.open_bucket), each of which the HTTP client may open twice.
    assert 1 <= len(connections) <= 4, len(connections)


def test_a_scheme_that_is_no_object_store_is_one_error_line(config_file):
    for key in ("store", "workdir"):
        line = one_error_line(cli("plan", str(config_file), "-o", f"{key}=ftp://host/x"))
        assert line.startswith("error: ftp://host/x: ftp:// is not an object store a run can live in"), line
        assert "s3://bucket/prefix" in line and "gs://bucket/prefix" in line, line


def test_a_gcs_bucket_that_does_not_exist_or_a_server_that_hangs_up_is_one_error_line(gcs_endpoint, config_file):
    url = "gs://no-such-bucket/runs/x"
    line = one_error_line(cli("plan", str(config_file), "-o", f"workdir={url}"))
    assert line.startswith(f"error: {url}: the bucket 'no-such-bucket' does not exist at {gcs_endpoint}"), line
    with hang_up_server() as (endpoint, connections):
        line = one_error_line(cli("plan", str(config_file), "-o", f"workdir={url}", STORAGE_EMULATOR_HOST=endpoint))
    assert line.startswith(f"error: {url}: cannot reach the object store at {endpoint} (STORAGE_EMULATOR_HOST)"), line
    assert 1 <= len(connections) <= 4, len(connections)  # not gcsfs's six attempts with backoff
