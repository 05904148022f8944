"""A real S3 server on loopback for tests and benchmarks: moto's standalone server
(`moto[server]`, a test dependency) in a thread of this process.

    with s3_server() as endpoint:      # sets AWS_ENDPOINT_URL and dummy credentials
        make_bucket("runs-test")
        ... code under test talks HTTP to it through boto3 / s3fs / pyarrow, unmocked

The environment variables are what a user sets for MinIO or any S3-compatible store, so
the project's code finds the server the way it would find theirs; subprocesses (the
`pretrain` CLI) inherit them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tests.support.environment import environment

SERVER_ENV = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret",
              "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """Start the server on a free port; yields its endpoint URL. The environment is
    restored afterwards."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _forget_cached_clients()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with environment({**SERVER_ENV, "AWS_ENDPOINT_URL": endpoint}):
            yield endpoint
    finally:
        server.stop()
        _forget_cached_clients()


def _forget_cached_clients() -> None:
    # fsspec caches file systems by their constructor arguments, not by the environment:
    # without this, a second server in one process would be reached through the first
    # one's client (its port).
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def make_bucket(prefix: str) -> str:
    """Create a new, empty bucket named `prefix-<random>` on the server the environment
    points at; returns its s3:// URL.

    The suffix is not decoration: moto keeps its buckets in process-wide state that
    outlives a server, and a test module imported under two names (pytest's basename and
    `tests.unit.x`) has two counters, so a counted name can meet a bucket that an earlier
    test filled, and every stage then reads as cached (CI, 2026-11-29)."""
    import uuid

    import boto3

    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return f"s3://{name}"
