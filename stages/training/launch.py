"""Run a training loop on Ray Train workers (driver side).

    result = fit(train_loop, {"lr": 1e-3, ...}, num_workers=2,
                 storage_path=output_dir / "ray", run_name="pretrain", max_failures=1)
    result.metrics          # what rank 0 reported with its last checkpoint
    result.checkpoint       # that checkpoint (ray.train.Checkpoint) or None

Resuming: Ray Train V2 keeps the run's state under storage_path/run_name. Calling `fit`
again with the same storage_path and run_name (after the driver was killed, or after the
run finished) gives the workers the last committed checkpoint through
`ray.train.get_checkpoint()`; `checkpoint.restore_latest` loads it. A checkpoint whose
upload did not complete is never committed, so it is never resumed from.
Within one `fit`, `max_failures` restarts the worker group after a worker or node dies,
also from the last committed checkpoint. Ctrl-C kills the run at once and raises
KeyboardInterrupt (stages/training/ctrl_c.py); committed checkpoints stay for the rerun.
However the run ends, its CPUs are given back (stages/training/placement_group_guard.py).

Workers get the repository on PYTHONPATH (so they import `stages` whether or not the
project is pip-installed) and, without GPUs, DS_ACCELERATOR=cpu so that DeepSpeed picks
its CPU accelerator without probing for CUDA. Ray itself must already be initialised by
the caller, or Ray Train starts a local instance.

The console shows the pipeline's lines and the workers' warnings (pipeline.worker_console);
a warning that only DeepSpeed or torch can act on, printed once per rank, is silenced on
the workers by a filter scoped to its message (KNOWN_NOISE), unless PRETRAIN_VERBOSE (-v).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storage.urls import is_url

REPO_ROOT = Path(__file__).resolve().parents[2]
HEALTH_CHECK_INTERVAL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
HEALTH_CHECK_INTERVAL_S = "0.25"
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"
VERBOSE_ENV = "PRETRAIN_VERBOSE"  # pipeline.worker_console.VERBOSE_ENV: stages never import the engine
# (category, message regex): warnings the workers drop unless verbose.
KNOWN_NOISE = (
    # DeepSpeed's ZeRO gathers with it on every rank; the deprecation is DeepSpeed's to act on.
    (FutureWarning, r"`torch\.distributed\.all_gather_into_tensor` is deprecated"),
)


def fit(
    train_loop_per_worker: Callable[[dict], None],
    loop_config: dict[str, Any],
    *,
    num_workers: int,
    storage_path: str | Path,
    run_name: str,
    max_failures: int = 0,
    use_gpu: bool = False,
    checkpoints_to_keep: int = 2,
    transfer=None,
):
    """Run `train_loop_per_worker(loop_config)` on `num_workers` Ray Train workers.

    Returns the `ray.train.Result`; raises `ray.train.TrainingFailedError` when the run
    failed more than `max_failures` times. One CPU per worker.
    """
    # Imported here so that importing this module (e.g. to read its docstring, or from
    # the engine's planner) does not start Ray's import machinery.
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from stages.training.ctrl_c import killed_at_once_on_ctrl_c, sigint_handler_restored
    from stages.training.no_dataset_manager import without_dataset_manager
    from stages.training.placement_group_guard import new_run_key, placement_group_freed, recording_placement_group

    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    from stages.ray_tasks import transfer_for_tasks
    from storage.node_transfer.task_call import loop_for

    # An object-store run's workers on other nodes fetch and upload their files
    # (storage.node_transfer; `transfer` is the stage's StageContext.node_transfer).
    transfer = transfer_for_tasks(transfer)
    if transfer is not None:
        train_loop_per_worker = loop_for(transfer.dispatch(train_loop_per_worker, [loop_config]))
    train_loop_per_worker = without_known_noise(train_loop_per_worker)
    storage_path, storage_filesystem = ray_storage(storage_path)
    # Ray Train's controller checks on its workers every 2 s by default, and every phase of
    # a run (start, each worker group state, the end) waits for the next check: a run that
    # does nothing took 17-26 s here, 14-19 s at 0.25 s. The driver's value reaches the
    # controller (Ray Train propagates it); one set by the user wins.
    os.environ.setdefault(HEALTH_CHECK_INTERVAL_ENV, HEALTH_CHECK_INTERVAL_S)
    placement_group_key = new_run_key()
    trainer_class = recording_placement_group(without_dataset_manager(TorchTrainer), placement_group_key)
    trainer = killed_at_once_on_ctrl_c(trainer_class)(
        train_loop_per_worker,
        train_loop_config=loop_config,
        # gloo on CPU; NCCL when the workers hold GPUs (TorchConfig's default).
        torch_config=TorchConfig(backend=None if use_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=num_workers, use_gpu=use_gpu, resources_per_worker={"CPU": 1.0}
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            failure_config=FailureConfig(max_failures=max_failures),
            # Keep the last few checkpoints: the newest to resume from, one more in case
            # the newest turns out unreadable; older ones only cost disk.
            checkpoint_config=CheckpointConfig(num_to_keep=checkpoints_to_keep),
            worker_runtime_env={"env_vars": worker_env_vars(use_gpu)},
        ),
    )
    with sigint_handler_restored(), placement_group_freed(placement_group_key), preemption_watcher_if_multinode():
        result = trainer.fit()
    if transfer is not None:
        transfer.collect_worker_uploads()
    return result


@contextmanager
def preemption_watcher_if_multinode() -> Iterator[None]:
    """Ray Train starts a PreemptionWatcher actor per run that polls Ray for nodes being
    drained (spot instances going away). On a one-node Ray, as on a laptop or in `make
    demo`, the node that would be drained also runs the driver, so it only costs a process:
    3.2 CPU-seconds of a tiny run here. It is turned off for the runs started while the
    cluster has one node (an autoscaler adding nodes later gets it back for later runs),
    unless the user set RAY_TRAIN_ENABLE_PREEMPTION_WATCHER. Ray Train passes the driver's
    value to the controller when the run starts."""
    import ray

    if (PREEMPTION_WATCHER_ENV in os.environ or not ray.is_initialized()
            or sum(node["Alive"] for node in ray.nodes()) > 1):
        yield
        return
    os.environ[PREEMPTION_WATCHER_ENV] = "0"
    try:
        yield
    finally:
        os.environ.pop(PREEMPTION_WATCHER_ENV, None)


def without_known_noise(train_loop_per_worker: Callable[[dict], None]) -> Callable[[dict], None]:
    """The loop, run after filtering KNOWN_NOISE out of the worker's warnings."""

    def train_loop_without_known_noise(loop_config: dict) -> None:
        if os.environ.get(VERBOSE_ENV, "") in ("", "0"):
            for category, message in KNOWN_NOISE:
                warnings.filterwarnings("ignore", message=message, category=category)
        return train_loop_per_worker(loop_config)

    return train_loop_without_known_noise


def ray_storage(storage_path: str | Path):
    """(storage_path, storage_filesystem) for Ray Train's RunConfig. A URL gets a
    pyarrow file system built here, on the driver, from the driver's environment
    (AWS_ENDPOINT_URL, AWS_* credentials, STORAGE_EMULATOR_HOST): Ray Train pickles it to
    its controller and workers, whose processes may have started before those variables
    were set."""
    if not is_url(storage_path):
        return str(Path(storage_path).resolve()), None
    import pyarrow.fs

    from storage.bucket_fs import connection_options

    url = str(storage_path)
    # The same endpoint and credentials the node transfer's tasks get, in pyarrow's names;
    # without keys in the environment, pyarrow's own default chain on each node.
    given = connection_options(url)
    if url.startswith("s3://"):
        client = given.get("client_kwargs", {})
        options = {"endpoint_override": client.get("endpoint_url"), "region": client.get("region_name"),
                   "access_key": given.get("key"), "secret_key": given.get("secret"),
                   "session_token": given.get("token")}
        filesystem = pyarrow.fs.S3FileSystem(**{k: v for k, v in options.items() if v})
        return url[len("s3://"):], filesystem
    emulator = given.get("emulator")
    if url.startswith(("gs://", "gcs://")) and emulator:
        # A GCS emulator (what gcsfs and google-cloud-storage read): anonymous, over the
        # scheme it names. Real GCS falls through to pyarrow's default credentials below.
        scheme, _, host = emulator.rpartition("://")
        filesystem = pyarrow.fs.GcsFileSystem(anonymous=True, scheme=scheme or "http",
                                              endpoint_override=host.rstrip("/"))
        return url.split("://", 1)[1], filesystem
    filesystem, path = pyarrow.fs.FileSystem.from_uri(url)
    return path, filesystem


def worker_env_vars(use_gpu: bool) -> dict[str, str]:
    """Environment for training workers (merged over the job's runtime_env).

    TORCH_EXTENSIONS_DIR: the user's, else <venv>/torch_extensions, where DeepSpeed's
    compiled ops are built once for this virtualenv (see stages.training.native_ops).
    """
    from stages.training.native_ops import extensions_env

    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": pythonpath, **extensions_env()}
    if not use_gpu:
        env["DS_ACCELERATOR"] = "cpu"
    if os.environ.get(VERBOSE_ENV):
        env[VERBOSE_ENV] = os.environ[VERBOSE_ENV]  # -v: workers keep every warning
    return env
