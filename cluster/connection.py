"""A JobSubmissionClient for `--address`, or a clear error when the cluster is not there.

The Ray SDK's HTTP calls have no timeout: an address that drops packets would hang the
CLI forever. A TCP connect with a timeout comes first and fails in seconds.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from cluster.errors import ClusterError

CONNECT_TIMEOUT_S = 5.0
DEFAULT_DASHBOARD_PORT = 8265
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def dashboard_url(address: str) -> str:
    """'HOST', 'HOST:8265' or 'http://HOST:8265' -> 'http://HOST:8265'. The Jobs API is
    the dashboard's HTTP server, not the GCS port (6379) or Ray Client (ray://)."""
    if address.startswith("ray://"):
        raise ClusterError(f"--address {address}: Ray Jobs talk to the dashboard's HTTP server; "
                           f"use http://HEAD:{DEFAULT_DASHBOARD_PORT}, not a ray:// client address",
                           exit_code=2)
    if "://" not in address:
        address = f"http://{address}"
    parsed = urlparse(address)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ClusterError(f"--address {address}: expected http://HOST:{DEFAULT_DASHBOARD_PORT}",
                           exit_code=2)
    port = parsed.port or DEFAULT_DASHBOARD_PORT
    return f"{parsed.scheme}://{parsed.hostname}:{port}"


def is_local_address(address: str) -> bool:
    """Whether the cluster's head runs on this machine (then a local workdir is shared)."""
    host = urlparse(dashboard_url(address)).hostname or ""
    if host in LOCAL_HOSTS:
        return True
    try:
        return host in (socket.gethostname(), socket.getfqdn()) or \
            socket.gethostbyname(host) in ("127.0.0.1", socket.gethostbyname(socket.gethostname()))
    except OSError:
        return False


def check_reachable(address: str) -> str:
    """The dashboard URL if something listens there; else ClusterError naming the address."""
    url = dashboard_url(address)
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise ClusterError(
            f"cannot reach the Ray dashboard at {url} ({error.strerror or error}); check that the "
            f"cluster is up (`ray status` on the head) and that --address is the head's dashboard "
            f"address (port {DEFAULT_DASHBOARD_PORT} by default, reachable from this machine)") from None
    return url


def connect(address: str):
    """A JobSubmissionClient for the cluster at `address`."""
    url = check_reachable(address)
    from ray.job_submission import JobSubmissionClient  # slow import: only once reachable

    try:
        return JobSubmissionClient(url)
    except Exception as error:  # noqa: BLE001 - every cause becomes one clear message
        raise ClusterError(f"{url} answers but is not a usable Ray Jobs server: "
                           f"{type(error).__name__}: {error}") from None
