"""A driver's console with real Ray workers (pipeline/worker_console.py, through
RaySession): the pipeline's own worker lines and the workers' warnings arrive, library
chatter does not; with PRETRAIN_VERBOSE (`pretrain run -v`) Ray prints everything as it
does alone. Each case is a driver process of its own, joined to the session's Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.cli import REPO_ROOT, cli_env

pytestmark = pytest.mark.ray

DRIVER = r'''
import sys, threading, warnings
import ray
from ray._private.ray_logging import global_worker_stdstream_dispatcher
from pipeline.config import RayConfig
from pipeline.ray_session import RaySession

MARK = "[pretrain] last line of the task"
arrived = threading.Event()
with RaySession(RayConfig(address=sys.argv[1])) as session:
    session.ensure_started(print)
    # Only to know when the task's lines have reached this driver (Ray ships them
    # asynchronously): a second handler beside whichever prints them.
    global_worker_stdstream_dispatcher.add_handler(
        "test_probe", lambda batch: any(MARK in line for line in batch["lines"]) and arrived.set())

    @ray.remote
    def chatter():
        print("DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully", flush=True)
        print("[pretrain] step 5/40 (12%)  loss 7.526", flush=True)
        warnings.warn("the learning rate is zero", UserWarning)
        print(MARK, flush=True)

    ray.get(chatter.remote())
    assert arrived.wait(120), "the task's lines never reached the driver"
    global_worker_stdstream_dispatcher.remove_handler("test_probe")
print("driver done")
'''


def drive(ray_address: str, verbose: str) -> subprocess.CompletedProcess:
    env = {**cli_env(), "PRETRAIN_VERBOSE": verbose}
    result = subprocess.run([sys.executable, "-c", DRIVER, ray_address], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def ray_address(ray_session) -> str:
    return ray_session.get_runtime_context().gcs_address


def test_the_console_gets_our_worker_lines_and_warnings_only(ray_address):
    result = drive(ray_address, "")
    console = result.stdout + result.stderr
    lines = console.splitlines()
    assert "[pretrain] step 5/40 (12%)  loss 7.526" in lines
    warning = next(line for line in lines if "UserWarning: the learning rate is zero" in line)
    assert warning.startswith("[chatter pid ") and "(log " in warning and ".err)" in warning
    assert "built successfully" not in console and "pid=" not in console
    assert result.stdout.splitlines()[-1] == "driver done"


def test_verbose_prints_what_ray_prints(ray_address):
    result = drive(ray_address, "1")
    console = result.stdout + result.stderr
    assert "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully" in console
    assert "(chatter pid=" in console  # Ray's own prefix
