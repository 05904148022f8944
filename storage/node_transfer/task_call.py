"""The task's side of an object-store run's node transfer (storage.node_transfer.driver has the
driver's side and the whole story): a `TaskCall` is sent in place of a task's function.

On the driver's node it fetches into the driver's mirror what the item names that only
the bucket holds, then makes the plain call. On another node it fetches the item's files
into that node's mirror, runs the function in a private copy of the stage's folder (the
item's paths moved there), uploads what it wrote, and names those files, with their
sizes and digests, beside the result. `task_call_loop` does the same for a Ray Train
worker, which leaves its list of uploads in the bucket instead.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.digest import sha256_file
from storage.file_tree import matches_any
from storage.mirror import mirror_dir
from storage.node_transfer import transfer
from storage.node_transfer.item_paths import paths_under, relocate

UPLOADS = ".uploads"
JOURNAL = ".remote"  # the driver's record of bulk files only the bucket holds

# (relative path in the bucket, size, sha256); relative to the run's URL
FileState = tuple[str, int, str]
# A file a task wrote: its FileState, and when the task only appended to the copy it was
# given (a metrics.jsonl), that copy's size and where the appended bytes were put (the
# object under the file's own name keeps the bytes other tasks were dispatched with);
# else None, None.
Uploaded = tuple[str, int, str, int | None, str | None]


@dataclass(frozen=True)
class TaskResult:
    value: Any
    uploaded: tuple[Uploaded, ...] = ()


def current_node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


@dataclass(frozen=True)
class TaskCall:
    """The task's side: picklable, sent in place of the function (see the module doc)."""

    function: Callable
    url: str
    driver_root: str
    stage_rel: str
    driver_node: str
    plan: dict[str, tuple[FileState, ...]]
    folders: dict[str, tuple[str, ...]]
    bulk: tuple[str, ...] = ()  # the stage's bulk files, linked rather than copied
    # How the driver reaches the bucket (storage.bucket_fs.connection_options): a worker
    # started before the driver's environment had the endpoint and credentials has neither.
    storage: dict = field(default_factory=dict)

    def __call__(self, item: Any) -> TaskResult:
        if current_node() == self.driver_node:
            self.fetch_on_driver_node(item)
            return TaskResult(self.function(item))
        value, uploaded = self.run_elsewhere(item)
        return TaskResult(value, uploaded)

    def fetch_on_driver_node(self, item: Any) -> None:
        """A task on the driver's own node reads the driver's mirror: what its item names
        that only the bucket holds (bulk inputs, files tasks elsewhere wrote) is fetched
        there first. The driver's node is then one of the nodes that do the work."""
        driver_root = Path(self.driver_root)
        planned = {rel: (size, digest) for reference in paths_under(item, driver_root)
                   for rel, size, digest in self.plan.get(reference.relative_to(driver_root).as_posix(), ())}
        missing = [(rel, digest) for rel, (size, digest) in sorted(planned.items())
                   if not _holds_here(driver_root, rel, size, digest)]
        if missing:
            fs, root = transfer.bucket(self.url, self.storage)
            transfer.download(fs, root, driver_root, missing, {rel: size for rel, (size, _) in planned.items()})

    def run_elsewhere(self, item: Any) -> tuple[Any, tuple[Uploaded, ...]]:
        """Fetch, run in a private folder for the stage, upload what it wrote."""
        driver_root, node_root = Path(self.driver_root), mirror_dir(self.url)
        fs, root = transfer.bucket(self.url, self.storage)
        # The stage's folder is private to this task: tasks of one node run side by side,
        # and one must never upload another's half-written file as its own output.
        transfer.remove_dead_task_folders(node_root)
        private_root = transfer.task_folder(node_root)
        private_stage = private_root / self.stage_rel
        moves = [(driver_root / self.stage_rel, private_stage), (driver_root, node_root)]
        wanted: dict[str, tuple[int, str]] = {}
        try:
            private_stage.mkdir(parents=True)
            for reference in paths_under(item, driver_root):
                reference_rel = reference.relative_to(driver_root).as_posix()
                for folder in self.folders.get(reference_rel, ()):
                    (private_root / folder).mkdir(parents=True, exist_ok=True)
                wanted.update({rel: (size, digest) for rel, size, digest in self.plan.get(reference_rel, ())})
            missing = [(rel, digest) for rel, (size, digest) in sorted(wanted.items())
                       if not transfer.holds(node_root, rel, size, digest)]
            transfer.download(fs, root, node_root, missing, {rel: size for rel, (size, _) in wanted.items()})
            given = {rel: state for rel, state in wanted.items() if rel.startswith(self.stage_rel + "/")}
            for rel, (_, digest) in given.items():  # the node's copies stay as fetched
                if matches_any(rel[len(self.stage_rel) + 1:], self.bulk):
                    transfer.link_checked(fs, root, node_root, private_root, rel, digest)
                else:
                    transfer.copy_checked(fs, root, node_root, private_root, rel, digest)
            before = _listing(private_stage)
            value = self.function(relocate(item, moves))
            changed = [f"{self.stage_rel}/{path}" for path, signature in sorted(_listing(private_stage).items())
                       if before.get(path) != signature]
            appended = [rel for rel in changed if rel in given and transfer.starts_with(private_root / rel, *given[rel])]
            written = [rel for rel in changed if rel not in appended]
            uploaded = []
            for rel, (size, digest) in zip(written, transfer.upload(fs, root, private_root, written)):
                uploaded.append((rel, size, digest, None, None))
                # The node keeps it: a later task here that reads it needs no download.
                transfer.keep(private_root, node_root, rel, digest)
            for rel in appended:
                tail = f"{self.stage_rel}/{UPLOADS}/tails/{uuid.uuid4().hex}"
                size, digest = transfer.upload_tail(fs, root, private_root, rel, given[rel][0], tail)
                uploaded.append((rel, size, digest, given[rel][0], tail))
            transfer.log_work(node_root, self.stage_rel, fetched=len(missing), uploaded=len(uploaded))
            back = [(private_stage, driver_root / self.stage_rel), (node_root, driver_root)]
            return relocate(value, back), tuple(uploaded)
        finally:
            shutil.rmtree(private_root, ignore_errors=True)


def _holds_here(local_root: Path, rel: str, size: int, sha256: str) -> bool:
    """Whether the local file holds those bytes: by its record, else by hashing it."""
    if transfer.holds(local_root, rel, size, sha256):
        return True
    path = local_root / rel
    try:
        if path.stat().st_size != size:
            return False
    except OSError:
        return False
    if sha256_file(path) != sha256:
        return False
    transfer.remember(local_root, rel, sha256)
    return True


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for current, _, names in os.walk(directory):
        for name in names:
            path = Path(current) / name
            stat = path.stat()
            found[path.relative_to(directory).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def run_task_call(call: TaskCall, item: Any) -> TaskResult:
    """A Ray task's body (module level, so Ray pickles it by reference)."""
    return call(item)


def task_call_loop(call: TaskCall, loop_config: dict) -> None:
    """A Ray Train worker's loop: the loop config is the item; what a worker elsewhere
    uploaded is listed in the bucket for the driver (`collect_worker_uploads`)."""
    if current_node() == call.driver_node:
        call.fetch_on_driver_node(loop_config)
        call.function(loop_config)
        return
    _, uploaded = call.run_elsewhere(loop_config)
    if uploaded:
        fs, root = transfer.bucket(call.url, call.storage)
        fs.pipe_file(transfer.key(root, f"{call.stage_rel}/{UPLOADS}/{uuid.uuid4().hex}.json"),
                     json.dumps([list(entry) for entry in uploaded]).encode())


def loop_for(call: TaskCall) -> Callable[[dict], None]:
    """Ray Train inspects the loop's signature: a partial keeps the one `config` argument."""
    return functools.partial(task_call_loop, call)
