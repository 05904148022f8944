"""Shared fixtures. One local Ray instance serves the whole test session (starting Ray
costs seconds; a second instance on 2 cores would fight the first for CPUs)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("DATA_DIR", REPO_ROOT.parent / "shared" / "data")).resolve()

# A suite started as a background job (`make test &`, or from a script with `&`) inherits
# SIGINT ignored, and so would every `pretrain` process the tests start: the tests of
# Ctrl-C then wait for a driver that never sees it (two sweep-stop tests timed out that
# way). A handler, unlike "ignored", is reset to the default when a child execs, so the
# drivers get Python's own Ctrl-C, as in a terminal. Ctrl-C at a terminal does not reach
# a background job either way.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"DATA_DIR={DATA_DIR} does not exist: set DATA_DIR to the shared data folder")
    return DATA_DIR


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for the module. Models this small gain nothing from threads, and
    on a busy machine their spinning made a few dozen training steps take 20 s instead of
    0.3 s. Use with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def ray_session():
    """Start (once) a local Ray with 2 CPUs and no dashboard; shut it down at the end."""
    import psutil
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}},
        )
    yield ray
    ray.shutdown()
    if "wandb" in sys.modules:
        # Close wandb's service process now: the reaper below would kill it, and its
        # atexit teardown would then print a ConnectionResetError.
        sys.modules["wandb"].teardown()
    # Now and then a Ray worker (e.g. a Train controller) outlives shutdown; end every
    # process this test session started so the next session starts clean.
    leftovers = psutil.Process().children(recursive=True)
    for process in leftovers:
        process.kill()
    psutil.wait_procs(leftovers, timeout=10)


@pytest.fixture(scope="module")
def s3_endpoint():
    """A real S3 server on loopback for one test module (tests/support/s3_server.py); yields its
    endpoint, with AWS_ENDPOINT_URL and credentials set while it runs."""
    from tests.support.s3_server import s3_server

    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def gcs_endpoint():
    """A GCS emulator on loopback for one test module (tests/support/gcs_server.py); yields its
    endpoint, with STORAGE_EMULATOR_HOST set while it runs."""
    from tests.support.gcs_server import gcs_server

    with gcs_server() as endpoint:
        yield endpoint
