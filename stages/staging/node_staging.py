"""Ray tasks and Ray Train workers of an object-store run, on any node of the cluster.

A stage of an s3:// (gs://, ...) run writes into the driver's mirror of the bucket
(pipeline.remote_store), and its tasks get items naming files there. A task placed on
another node sees none of them, so every task goes through a `StagedCall`:

- On the driver's node it is the plain call: the files are right there.
- On another node:
  1. the files its item names are fetched into that node's own mirror (stages.mirror):
     those the driver listed when it dispatched the task (`NodeStaging.dispatch`), each
     with its sha256, skipped when the node already holds those bytes (transfer.holds);
  2. the task gets a private copy of its stage's folder (only the files its item names),
     the item's paths are moved there and to the node's mirror (item_paths.relocate), and
     the function runs;
  3. the files it wrote in that folder are uploaded under the same names in the bucket,
     and named, with their sizes and digests, beside the result; the folder is removed.
- The driver then downloads those files into its mirror (`NodeStaging.collect`), so the
  stage's next step, and the commit, find them there; the commit does not upload them
  again (`in_bucket`), and removes the objects tasks uploaded that the stage deleted before
  it finished (a scratch folder).
- But for the stage's bulk files (StageSpec.bulk_files: shards, weights): those stay in
  the bucket only, and the driver keeps the size and sha256 the task reported (`remote`).
  A later task whose item names one fetches it like an input; the commit lists it from
  the report (`remote_files`); a scratch folder the stage removes is `forget`-ten, and its
  objects deleted at the commit. Code in the driver never opens such a file: it hands
  the work to a task (stages.ray_tasks.map_staged), or fetches the few bytes it reads
  (`bring_here`).
- A task that lands on the driver's own node runs the plain call in the driver's mirror,
  after fetching there what its item names that only the bucket holds.

What the driver itself writes (or a task on its node) is uploaded when a task elsewhere
is dispatched with an item naming it. A directory in an item stands for every file in it
at that moment: a task writing into its stage's folder does not fetch the files other
tasks of the same round write there.

Ray Train workers get the same treatment through `staged_loop` (the loop's config is the
item). A worker cannot return a list of files, so it writes one to the bucket
(`<stage>/.uploads/<uuid>.json`), and the driver reads those after `fit`.

A task's private copy of a stage file it was given is a copy, or a hard link for a bulk
file (written once, only read: a dedup task reading every staged file copies nothing).

Files are trusted by sha256: a node's copy is used only if its record says it holds the
bytes the driver named, so a forced re-run's new weights of the same size are fetched
again, never mistaken for the old ones.

The corpus and task data the stages read outside the mirror (data_dir, ingest sources)
must be readable from every node: a URL or a shared mount.
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

from stages.bucket_fs import connection_options
from stages.file_digest import sha256_file
from stages.file_tree import matches_any
from stages.mirror import mirror_dir
from stages.staging import transfer
from stages.staging.item_paths import paths_under, relocate

UPLOADS = ".uploads"

# (relative path in the bucket, size, sha256); relative to the run's URL
FileState = tuple[str, int, str]
# A file a task wrote: its FileState, and when the task only appended to the copy it was
# given (a metrics.jsonl), that copy's size and where the appended bytes were put (the
# object under the file's own name keeps the bytes other tasks were dispatched with);
# else None, None.
Uploaded = tuple[str, int, str, int | None, str | None]


@dataclass(frozen=True)
class StagedResult:
    value: Any
    uploaded: tuple[Uploaded, ...] = ()


def _current_node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


@dataclass
class NodeStaging:
    """The driver's side, for one stage of an object-store run.

    `known` maps the committed input files (relative to `url`) to their sha256, and
    `known_sizes` to their sizes, from the inputs' manifests: those are in the bucket
    already, whether or not the driver holds a copy. `bulk` holds the stage's
    StageSpec.bulk_files: what a task elsewhere writes that matches one stays in the
    bucket (`remote`), never downloaded to the driver."""

    url: str
    driver_root: Path
    stage_dir: Path
    known: dict[str, str] = field(default_factory=dict)
    known_sizes: dict[str, int] = field(default_factory=dict)
    bulk: tuple[str, ...] = ()
    # relative path -> (size, mtime_ns, sha256) of this stage's files whose bytes are in
    # the bucket under that name (uploaded by a task elsewhere, or pushed by the driver)
    synced: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    # relative path -> (size, sha256) of this stage's bulk files that tasks elsewhere
    # wrote: only the bucket holds them, and the commit lists them from these reports
    remote: dict[str, tuple[int, str]] = field(default_factory=dict)
    # this stage's objects the stage dropped (`forget`), removed from the bucket at commit
    dropped: set[str] = field(default_factory=set)
    _driver_node: str | None = None

    def __post_init__(self) -> None:
        self.driver_root = Path(self.driver_root)
        self.stage_dir = Path(self.stage_dir)
        self.stage_rel = self.stage_dir.relative_to(self.driver_root).as_posix()

    @property
    def driver_node(self) -> str:
        if self._driver_node is None:
            self._driver_node = _current_node()
        return self._driver_node

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.driver_root).as_posix()

    def _is_bulk(self, rel: str) -> bool:
        prefix = self.stage_rel + "/"
        return rel.startswith(prefix) and matches_any(rel[len(prefix):], self.bulk)

    def _elsewhere(self, rel: str) -> dict[str, tuple[int, str]]:
        """(size, sha256) of the files at or under `rel` that only the bucket holds:
        committed inputs the driver did not fetch, and this stage's remote files."""
        found = {}
        inside = rel + "/"
        for name, digest in self.known.items():
            if (name == rel or name.startswith(inside)) and name in self.known_sizes \
                    and not (self.driver_root / name).is_file():
                found[name] = (self.known_sizes[name], digest)
        for name, state in self.remote.items():
            if name == rel or name.startswith(inside):
                found[name] = state
        return found

    # -- before tasks are dispatched --------------------------------------------------------
    def dispatch(self, function: Callable, items: list[Any]) -> StagedCall:
        """The call to send in place of `function`: it names, for every path under the
        mirror that `items` mention, the files there now (held here or only in the
        bucket), with their digests. This stage's files among them that the driver wrote
        are uploaded first unless they are there already."""
        fs, root = transfer.bucket(self.url)
        listed: dict[str, list[Path]] = {}
        elsewhere: dict[str, dict[str, tuple[int, str]]] = {}
        folders: dict[str, tuple[str, ...]] = {}
        for reference in sorted({p for item in items for p in paths_under(item, self.driver_root)}):
            rel = self._rel(reference)
            elsewhere[rel] = self._elsewhere(rel)
            if reference.is_file():
                files, dirs = [reference], [reference.parent]
            elif reference.is_dir():
                inside = sorted(reference.rglob("*"))
                files = [p for p in inside if p.is_file()]
                dirs = [reference, *(p for p in inside if p.is_dir())]
            elif elsewhere[rel]:  # held only by the bucket
                files = []
                dirs = [reference] if rel not in elsewhere[rel] else [reference.parent]
            else:  # a file the task will write, into a folder the driver made
                files, dirs = [], [reference.parent] if reference.parent.is_dir() else []
            dirs += [(self.driver_root / name).parent for name in elsewhere[rel]]
            listed[rel] = files
            # The task's private copy of the stage's folder has these, empty or not.
            folders[rel] = tuple(sorted({self._rel(d) for d in dirs if d.is_relative_to(self.stage_dir)}))
        self._push(fs, root, {path for files in listed.values() for path in files})
        plan = {rel: tuple(state for path in files if (state := self._state(path)) is not None)
                + tuple((name, size, digest) for name, (size, digest) in sorted(elsewhere[rel].items())
                        if not (self.driver_root / name).is_file())
                for rel, files in listed.items()}
        return StagedCall(function, self.url, str(self.driver_root), self.stage_rel,
                          self.driver_node, plan, folders, self.bulk, connection_options(self.url))

    def _push(self, fs, root: str, paths: set[Path]) -> None:
        """Upload this stage's files among `paths` that the bucket does not have as they
        are now (a task elsewhere may read them)."""
        rels = sorted(self._rel(path) for path in paths
                      if path.is_relative_to(self.stage_dir) and self._state(path) is None)
        for rel, (size, digest) in zip(rels, transfer.upload(fs, root, self.driver_root, rels)):
            self.synced[rel] = (size, (self.driver_root / rel).stat().st_mtime_ns, digest)

    def _state(self, path: Path) -> FileState | None:
        """(rel, size, sha256) of a file whose bytes are in the bucket under its name, or
        None (not pushed yet, or neither this stage's nor a committed input's)."""
        rel = self._rel(path)
        stat = path.stat()
        if rel in self.known:
            return rel, stat.st_size, self.known[rel]
        synced = self.synced.get(rel)
        if synced is not None and synced[:2] == (stat.st_size, stat.st_mtime_ns):
            return rel, stat.st_size, synced[2]
        return None

    # -- after they finished --------------------------------------------------------------
    def collect(self, result: Any) -> Any:
        """A task's value; the files it uploaded from another node come into this mirror,
        but for bulk files, which stay in the bucket (`remote`). A file the task only
        appended to gets those bytes appended here, so that tasks appending to one log
        side by side (fine-tuning tasks' metrics.jsonl) lose none."""
        if not isinstance(result, StagedResult):
            return result
        if result.uploaded:
            fs, root = transfer.bucket(self.url)
            whole = [(rel, size, digest) for rel, size, digest, _, tail in result.uploaded if tail is None]
            for rel, size, digest in whole:
                if self._is_bulk(rel):
                    self.remote[rel] = (size, digest)
                    self.dropped.discard(rel)
                    self.synced.pop(rel, None)
                    # An older copy here (an earlier attempt's) would be listed, and
                    # uploaded over the task's, at the commit.
                    (self.driver_root / rel).unlink(missing_ok=True)
            whole = [entry for entry in whole if not self._is_bulk(entry[0])]
            transfer.download(fs, root, self.driver_root, [
                (rel, digest) for rel, size, digest in whole
                if not transfer.holds(self.driver_root, rel, size, digest)])
            for rel, size, digest in whole:
                stat = (self.driver_root / rel).stat()
                self.synced[rel] = (stat.st_size, stat.st_mtime_ns, digest)
            for rel, _, _, _, tail in result.uploaded:
                if tail is not None:
                    # Onto the driver's copy, which others may have appended to meanwhile:
                    # it now differs from the object, so the commit uploads it.
                    transfer.append_object(fs, root, tail, self.driver_root / rel)
                    self.synced.pop(rel, None)
        return result.value

    def collect_worker_uploads(self) -> None:
        """What Ray Train workers on other nodes uploaded (their `.uploads` lists)."""
        fs, root = transfer.bucket(self.url)
        folder = transfer.key(root, f"{self.stage_rel}/{UPLOADS}")
        for listing in sorted(fs.glob(f"{folder}/*.json")):  # not tails/, which the lists name
            uploaded = tuple(tuple(entry) for entry in json.loads(fs.cat_file(listing)))
            self.collect(StagedResult(None, uploaded))
            fs.rm_file(listing)

    def forget(self, path: Path) -> None:
        """The stage removed `path` (a file or a folder, its scratch): its files that only
        the bucket holds are no longer outputs, and the commit deletes them there."""
        rel = self._rel(Path(path))
        for name in [name for name in self.remote if name == rel or name.startswith(rel + "/")]:
            del self.remote[name]
            self.dropped.add(name)

    def bring_items_here(self, items: list[Any]) -> None:
        """For tasks run in the driver's process (stages.ray_tasks.run_in_process): what
        their items name that only the bucket holds."""
        for reference in sorted({p for item in items for p in paths_under(item, self.driver_root)}):
            self.bring_here(reference)

    def bring_here(self, path: Path) -> None:
        """Download into the driver's mirror the files at or under `path` that only the
        bucket holds (bytes through the driver: for the few reads the driver must do)."""
        wanted = self._elsewhere(self._rel(Path(path)))
        fs, root = transfer.bucket(self.url)
        transfer.download(fs, root, self.driver_root, [(rel, digest) for rel, (_, digest) in sorted(wanted.items())])

    def in_bucket(self) -> dict[str, tuple[int, int]]:
        """This stage's files (relative to its folder) whose bytes are in the bucket,
        with the (size, mtime_ns) the local copy had then."""
        prefix = self.stage_rel + "/"
        return {rel[len(prefix):]: (size, mtime_ns) for rel, (size, mtime_ns, _) in self.synced.items()
                if rel.startswith(prefix)}

    def remote_files(self) -> list[dict]:
        """This stage's files only the bucket holds, as manifest entries (relative to its
        folder, with the size and sha256 the task that wrote them reported)."""
        prefix = self.stage_rel + "/"
        return [{"path": rel[len(prefix):], "bytes": size, "sha256": digest}
                for rel, (size, digest) in sorted(self.remote.items())]

    def dropped_files(self) -> tuple[str, ...]:
        prefix = self.stage_rel + "/"
        return tuple(sorted(rel[len(prefix):] for rel in self.dropped))


@dataclass(frozen=True)
class StagedCall:
    """The task's side: picklable, sent in place of the function (see the module doc)."""

    function: Callable
    url: str
    driver_root: str
    stage_rel: str
    driver_node: str
    plan: dict[str, tuple[FileState, ...]]
    folders: dict[str, tuple[str, ...]]
    bulk: tuple[str, ...] = ()  # the stage's bulk files, linked rather than copied
    # How the driver reaches the bucket (stages.bucket_fs.connection_options): a worker
    # started before the driver's environment had the endpoint and credentials has neither.
    storage: dict = field(default_factory=dict)

    def __call__(self, item: Any) -> StagedResult:
        if _current_node() == self.driver_node:
            self.fetch_on_driver_node(item)
            return StagedResult(self.function(item))
        value, uploaded = self.run_elsewhere(item)
        return StagedResult(value, uploaded)

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


def run_staged(call: StagedCall, item: Any) -> StagedResult:
    """A Ray task's body (module level, so Ray pickles it by reference)."""
    return call(item)


def staged_loop(call: StagedCall, loop_config: dict) -> None:
    """A Ray Train worker's loop: the loop config is the item; what a worker elsewhere
    uploaded is listed in the bucket for the driver (`collect_worker_uploads`)."""
    if _current_node() == call.driver_node:
        call.fetch_on_driver_node(loop_config)
        call.function(loop_config)
        return
    _, uploaded = call.run_elsewhere(loop_config)
    if uploaded:
        fs, root = transfer.bucket(call.url, call.storage)
        fs.pipe_file(transfer.key(root, f"{call.stage_rel}/{UPLOADS}/{uuid.uuid4().hex}.json"),
                     json.dumps([list(entry) for entry in uploaded]).encode())


def loop_for(call: StagedCall) -> Callable[[dict], None]:
    """Ray Train inspects the loop's signature: a partial keeps the one `config` argument."""
    return functools.partial(staged_loop, call)
