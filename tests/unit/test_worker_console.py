"""What reaches the console of a run from Ray's workers (pipeline/worker_console.py): the
pipeline's own lines and the workers' warnings, with the log file that holds the rest;
`-v` (PRETRAIN_VERBOSE) keeps everything; DeepSpeed's op lock is waited for quietly. Batches are shaped as Ray's driver receives them;
the lines are copied from a gpt-tiny run's console before the change."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import warnings

import pytest

from cluster.cli import main
from pipeline.worker_console import VERBOSE_ENV, WorkerConsole, quiet_ray_driver
from stages.training.launch import without_known_noise, worker_env_vars
from stages.training.native_ops import exclusive_build
from tests.unit.test_native_ops import HOLDER_SCRIPT, OP, REPO_ROOT

RAY_TRAIN_NOISE = [
    "Setting up process group for: env:// [rank=0, world_size=2]",
    "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully",
    "Checkpoint successfully created at: Checkpoint(filesystem=local, path=/tmp/r/checkpoint-step00000010)",
    "Reporting training result 1: TrainingReport(checkpoint=Checkpoint(filesystem=local, path=/tmp/r), "
    "metrics={'steps': 10, 'final_loss': 7.33, 'val_loss': None}, validation=False) from rank 0",
    "  return func(*args, **kwargs)",
    "pretrain:   0%|          | 0/40 [00:00<?, ?step/s]",
]
TORCH_WARNING = ("/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: "
                 "`torch.distributed.all_gather_into_tensor` is deprecated.")
OURS = ["[pretrain] step 5/40 (12%)  loss 7.526  11.2k tokens/s  0:00 elapsed, ~0:03 left",
        "[training] building DeepSpeed's CPU op deepspeed_shm_comm (first run only, 1-3 min) in /x ..."]


def batch(lines, *, pid=5078, is_err=False, ip="10.0.0.1", localhost="10.0.0.1"):
    return {"ip": ip, "localhost": localhost, "pid": pid, "is_err": is_err, "lines": list(lines),
            "actor_name": "RayTrainWorker", "task_name": ""}


@pytest.fixture
def console(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for suffix in ("out", "err"):  # Ray's names: worker-<worker id>-<job id>-<pid>.out/.err
        (logs / f"worker-4e91b44c-01000000-5078.{suffix}").touch()
    out, err = io.StringIO(), io.StringIO()
    return WorkerConsole(logs, out=out, err=err), out, err, logs


def test_our_lines_pass_as_they_are_and_library_chatter_stays_in_the_log(console):
    relay, out, err, _ = console
    relay(batch(RAY_TRAIN_NOISE[:2] + OURS[:1] + RAY_TRAIN_NOISE[2:] + OURS[1:]))
    assert out.getvalue().splitlines() == OURS
    assert err.getvalue() == ""


def test_a_warning_or_error_reaches_the_console_naming_the_worker_and_its_log_once(console):
    relay, out, err, logs = console
    relay(batch(["x", "RuntimeError: the loss is nan at step 12"], is_err=True))
    relay(batch(["2026-11-29 06:31:21,871\tWARNING checkpoint.py:40 -- slow upload"], is_err=True))
    lines = err.getvalue().splitlines()
    assert lines == [f"[RayTrainWorker pid 5078] (log {logs / 'worker-4e91b44c-01000000-5078.err'}): "
                     "RuntimeError: the loss is nan at step 12",
                     "[RayTrainWorker pid 5078]: 2026-11-29 06:31:21,871\tWARNING checkpoint.py:40 -- slow upload"]
    assert out.getvalue() == ""


def test_a_worker_on_another_node_is_named_with_the_command_that_fetches_its_log(console):
    relay, _, err, logs = console
    (logs / "worker-0a1b2c3d-01000000-777.err").touch()  # pid 777 of this node: not that worker
    relay(batch([TORCH_WARNING], pid=777, is_err=True, ip="10.0.0.2"))
    assert err.getvalue().startswith(
        "[RayTrainWorker pid 777] (log: `ray logs worker --pid 777 --node-ip 10.0.0.2 --err`): /venv/")


def test_a_line_that_arrives_from_both_streams_is_shown_once(console):
    # A Ray Train worker's stdout lands in its .out and its .err file, and Ray sends both.
    relay, out, _, _ = console
    relay(batch(OURS[:1]))
    relay(batch(OURS[:1] + ["[pretrain] step 10/40"], is_err=True))
    relay(batch(["[pretrain] step 10/40", "[pretrain] step 15/40"]))
    relay(batch(["[pretrain] step 15/40"], is_err=True))
    assert out.getvalue().splitlines() == [OURS[0], "[pretrain] step 10/40", "[pretrain] step 15/40"]


def test_rays_start_up_notices_are_dropped_and_its_other_warnings_kept(caplog):
    token = logging.getLogger("ray._private.authentication.authentication_token_setup")
    worker = logging.getLogger("ray._private.worker")
    with caplog.at_level(logging.INFO):
        with quiet_ray_driver():
            token.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled ...")
            worker.info("Started a local Ray instance. View the dashboard at %s", "http://127.0.0.1:8265")
            worker.warning("The driver may not be able to keep up with the stdout/stderr of the workers.")
        worker.info("Started a local Ray instance. View the dashboard at %s", "outside the block")
    assert [r.getMessage() for r in caplog.records] == [
        "The driver may not be able to keep up with the stdout/stderr of the workers.",
        "Started a local Ray instance. View the dashboard at outside the block"]


def deprecated_gather(loop_config):
    warnings.warn("`torch.distributed.all_gather_into_tensor` is deprecated. Please use "
                  "`torch.distributed.all_gather_single` instead.", FutureWarning)
    warnings.warn("`something_else` is deprecated", FutureWarning)


@pytest.mark.parametrize("verbose, shown", [("", 1), ("1", 2)])
def test_workers_drop_the_known_torch_deprecation_unless_verbose(monkeypatch, verbose, shown):
    monkeypatch.setenv(VERBOSE_ENV, verbose)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        without_known_noise(deprecated_gather)({})
    assert len(caught) == shown
    assert worker_env_vars(use_gpu=False).get(VERBOSE_ENV, "") == verbose


def test_run_v_turns_verbose_on_for_the_run_and_its_workers(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(VERBOSE_ENV, "")  # restored (unset) after the test
    # A missing data_dir stops the run before any stage (exit 2), after the flag is applied.
    code = main(["run", "configs/gpt-tiny.yaml", "-v", "-o", f"workdir={tmp_path / 'w'}",
                 "-o", f"data_dir={tmp_path / 'no-data'}"])
    assert code == 2 and "data_dir" in capsys.readouterr().err
    assert os.environ[VERBOSE_ENV] == "1"
    assert worker_env_vars(use_gpu=False)[VERBOSE_ENV] == "1"


def test_a_rank_that_waits_a_moment_for_another_ranks_load_says_nothing(tmp_path):
    # Every Ray Train run: one rank loads the built op (~0.1 s) while the other waits for
    # the build lock; "waiting for pid ..." is for waits that last (a real build).
    letting_go = tmp_path / "letting-go"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_SCRIPT, str(tmp_path), OP, "0.5", str(letting_go)],
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lines: list[str] = []
        with exclusive_build(tmp_path, OP, echo=lines.append, poll_seconds=0.05):
            assert letting_go.exists()  # it did wait
    finally:
        holder.kill()
        holder.wait()
    assert lines == []
