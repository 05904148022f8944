"""Checkpoints that do not stop training (pretrain.checkpoint_async; worker side).

    checkpointer = open_checkpointer(engine, asynchronous=cfg.checkpoint_async)
    ...
    checkpointer.save(step, extra_state, metrics)   # collective, at a step boundary
    ...
    checkpointer.finish()                           # after the loop: the last save is done

Synchronous (the default), `save` is stages.training.checkpoint.report_checkpoint:
DeepSpeed writes the files, Ray Train copies them to storage, and training waits for
both. Asynchronous, training waits only while the state is copied to host memory:

1. At the step boundary, `engine.save_checkpoint` runs as usual (same files, names and
   collectives), but with a HostSnapshotEngine in place of DeepSpeed's checkpoint engine:
   DeepSpeed hands every file's state dict to a checkpoint engine's `save(state_dict,
   path)`, and this one keeps a host-memory copy of it instead of writing it. Our extra
   state (a few KB) is written as before.
2. `ray.train.report(..., checkpoint_upload_mode=ASYNC, checkpoint_upload_fn=...)`: Ray
   Train's own asynchronous upload. On the training thread it only agrees on the
   checkpoint's directory name with the other ranks; its upload thread then calls our
   function, which writes the copied state with DeepSpeed's own checkpoint engine
   (torch.save, as a synchronous save would) and copies the directory to storage.
3. Ray Train commits a checkpoint when every rank's upload has finished and reported:
   a checkpoint still being written is never the one a restarted run resumes from.

At most one save is in flight: the next `save` (and `finish`) first waits for the
previous one, so at most one copy of the state is held. A save that failed in the
background fails the run: Ray Train raises the error from its upload thread into the
worker (eagerly), and the next `save` or `finish` raises it on the training thread.

Why not DeepSpeed's decoupled checkpoint engine (`"checkpoint": {"writer": {"decoupled":
true}}`)? Its writer process receives the live tensors and finishes a checkpoint only
at the next optimizer step (which waits for it), after `save_checkpoint` has returned:
Ray Train would copy a half-written directory, and the overlap is one step at most; its
fast writer needs DeepSpeed's async_io op (libaio), not built on this CPU machine. Why
not torch.distributed.checkpoint.async_save? It writes DCP's format, not DeepSpeed's:
engine.load_checkpoint, the universal-checkpoint resharding (stages.training.checkpoint)
and zero_to_fp32 would no longer read our checkpoints.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from stages.training.checkpoint import checkpoint_dir_name, report_checkpoint, write_local_checkpoint


class CheckpointSaveFailed(RuntimeError):
    """A checkpoint written in the background failed; training stops."""


class SaveSlot:
    """At most one save in flight, and its failure raised on the training thread.

    `track(fn)` wraps the function a background thread will run for one save; `wait()`
    blocks until that save has finished and raises CheckpointSaveFailed if it failed
    (then, and at every later wait: a run does not go on after a lost checkpoint)."""

    def __init__(self) -> None:
        self._future: Future | None = None
        self._error: BaseException | None = None
        self._what = ""

    @property
    def in_flight(self) -> bool:
        return self._future is not None and not self._future.done()

    def wait(self) -> None:
        if self._future is not None:
            future, self._future = self._future, None
            self._error = future.exception() or self._error  # blocks until it is done
        if self._error is not None:
            raise CheckpointSaveFailed(f"{self._what} failed in the background: {self._error}") from self._error

    def track(self, fn: Callable[..., Any], what: str) -> Callable[..., Any]:
        self.wait()  # never two in flight (nor a new one after a failure)
        future: Future = Future()
        future.set_running_or_notify_cancel()
        self._future, self._what = future, what

        def run(*args: Any) -> Any:
            try:
                result = fn(*args)
            except BaseException as error:
                future.set_exception(error)
                raise  # for the background thread's owner too (Ray Train fails the worker)
            future.set_result(None)
            return result

        return run


class HostSnapshotEngine:
    """A DeepSpeed checkpoint engine that writes nothing: `save` keeps a host-memory copy
    of each file's state (`files`), for `writer` (DeepSpeed's real engine) to write later.
    The whole interface of DeepSpeed's CheckpointEngine, not a subclass of it: DeepSpeed
    is imported on the workers only (the driver imports the training loop)."""

    name = "HostSnapshotEngine"

    def __init__(self, writer) -> None:
        self.writer = writer
        self.files: list[tuple[str, Any]] = []
        self.nbytes = 0  # host memory the copies hold

    def create(self, info) -> None:
        pass

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def save(self, state_dict, path: str) -> None:
        memo: dict = {}
        self.files.append((path, host_copy(state_dict, memo)))
        self.nbytes += sum(storage.nbytes() for storage in memo.values())

    def load(self, path: str, map_location=None):
        return self.writer.load(path, map_location=map_location)

    def commit(self, info) -> bool:
        return True

    def is_data_parallel_writer(self, dp_rank) -> bool:
        return self.writer.is_data_parallel_writer(dp_rank)

    def is_decoupled(self) -> bool:  # finished when save_checkpoint returns, as far as DeepSpeed knows
        return False

    def set_commit_info(self, info) -> None:
        pass

    def get_commit_info(self) -> None:
        return None

    def cleanup(self) -> None:
        pass

    def preserves_storage_sharing(self) -> bool:  # as the torch engine: DeepSpeed compacts module tensors first
        return self.writer.preserves_storage_sharing()

    def write(self) -> None:
        """Write every copied file with the real engine, freeing each copy once written."""
        while self.files:
            path, state = self.files.pop(0)
            self.writer.save(state, path)


def host_copy(value: Any, memo: dict) -> Any:
    """`value` with every tensor copied to host memory, as torch.save would see it at this
    moment: tensors that shared a storage share the copy of it (`memo`, per file), so the
    file written later has the same storages and views. Other leaves are kept as they are
    (numbers, strings, DeepSpeed's config: nothing training changes in place)."""
    if isinstance(value, torch.Tensor):
        return _host_tensor(value, memo)
    if isinstance(value, dict):
        copied = type(value)() if type(value) is not dict else {}
        for key, item in value.items():
            copied[key] = host_copy(item, memo)
        return copied
    if isinstance(value, list):
        return [host_copy(item, memo) for item in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(host_copy(item, memo) for item in value)
    return value


def _host_tensor(tensor: torch.Tensor, memo: dict) -> torch.Tensor:
    storage = tensor.untyped_storage()
    key = (storage.device, storage.data_ptr(), storage.nbytes())
    if key not in memo:
        memo[key] = storage.clone() if storage.device.type == "cpu" else storage.cpu()
    copied = torch.empty(0, dtype=tensor.dtype).set_(
        memo[key], tensor.storage_offset(), tensor.size(), tensor.stride())
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
    return copied


class SyncCheckpointer:
    """report_checkpoint: training waits for the files and their copy to storage."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def save(self, step: int, extra_state: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
        return report_checkpoint(self.engine, step, extra_state, metrics)

    def finish(self) -> None:
        pass


class AsyncCheckpointer:
    """Snapshot at the step boundary, write and upload in Ray Train's upload thread (module doc)."""

    def __init__(self, engine) -> None:
        from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

        if type(engine.checkpoint_engine) is not TorchCheckpointEngine:
            raise ValueError(
                f"pretrain.checkpoint_async writes with DeepSpeed's default checkpoint engine, but the "
                f"DeepSpeed config selects {type(engine.checkpoint_engine).__name__} (its \"checkpoint\": "
                "{\"writer\": ...} or \"datastates\" section): remove that section or set "
                "pretrain.checkpoint_async: false")
        self.engine = engine
        self.slot = SaveSlot()
        self.background_seconds: dict[str, float] = {}  # the last finished save's write and upload
        self.snapshot_bytes = 0  # host memory the last save's copy took

    def save(self, step: int, extra_state: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
        """Collective. Returns the seconds training was blocked, by phase: waiting for the
        previous save, copying the state, reporting (agreeing on the directory name)."""
        import ray.train
        from ray.train import CheckpointUploadMode

        started = time.perf_counter()
        self.slot.wait()
        waited = time.perf_counter()
        rank = ray.train.get_context().get_world_rank()
        local_dir = Path(tempfile.mkdtemp(prefix=f"checkpoint-step{step}-rank{rank}-"))
        writer = self.engine.checkpoint_engine
        snapshot = HostSnapshotEngine(writer)
        try:
            self.engine.checkpoint_engine = snapshot
            try:
                write_local_checkpoint(self.engine, local_dir, step, extra_state)
            finally:
                self.engine.checkpoint_engine = writer
            storage = ray.train.get_context().get_storage()
            copied = time.perf_counter()
            self.snapshot_bytes = snapshot.nbytes
            upload = self.slot.track(self._write_and_upload(snapshot, storage), f"the checkpoint of step {step}")
            ray.train.report(
                metrics,
                checkpoint=ray.train.Checkpoint.from_directory(str(local_dir)),
                checkpoint_dir_name=checkpoint_dir_name(step),
                checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                delete_local_checkpoint_after_upload=True,
                checkpoint_upload_fn=upload,
            )
        except BaseException:
            shutil.rmtree(local_dir, ignore_errors=True)
            raise
        reported = time.perf_counter()
        return {"wait": waited - started, "snapshot": copied - waited, "report": reported - copied}

    def finish(self) -> None:
        """Wait for the save in flight; raise its failure."""
        self.slot.wait()

    def _write_and_upload(self, snapshot: HostSnapshotEngine, storage) -> Callable:
        def write_and_upload(checkpoint, dir_name: str):
            try:
                started = time.perf_counter()
                snapshot.write()
                written = time.perf_counter()
                persisted = storage.persist_current_checkpoint(checkpoint, dir_name)
                self.background_seconds = {"write": written - started, "upload": time.perf_counter() - written}
                return persisted
            except BaseException:
                # Ray deletes the local directory only after a successful upload.
                shutil.rmtree(checkpoint.path, ignore_errors=True)
                raise

        return write_and_upload


def open_checkpointer(engine, asynchronous: bool) -> SyncCheckpointer | AsyncCheckpointer:
    return AsyncCheckpointer(engine) if asynchronous else SyncCheckpointer(engine)
