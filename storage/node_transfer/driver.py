"""Ray tasks and Ray Train workers of an object-store run, on any node of the cluster.

A stage of an s3:// (gs://, ...) run writes into the driver's mirror of the bucket
(storage.object_store), and its tasks get items naming files there. A task placed on
another node sees none of them, so every task goes through a `TaskCall`:

- On the driver's node it is the plain call: the files are right there.
- On another node:
  1. the files its item names are fetched into that node's own mirror (storage.mirror):
     those the driver listed when it dispatched the task (`NodeTransfer.dispatch`), each
     with its sha256, skipped when the node already holds those bytes (transfer.holds);
  2. the task gets a private copy of its stage's folder (only the files its item names),
     the item's paths are moved there and to the node's mirror (item_paths.relocate), and
     the function runs;
  3. the files it wrote in that folder are uploaded under the same names in the bucket,
     and named, with their sizes and digests, beside the result; the folder is removed.
- The driver then downloads those files into its mirror (`NodeTransfer.collect`), so the
  stage's next step, and the commit, find them there; the commit does not upload them
  again (`in_bucket`), and removes the objects tasks uploaded that the stage deleted before
  it finished (a scratch folder).
- But for the stage's bulk files (StageSpec.bulk_files: shards, weights): those stay in
  the bucket only, and the driver keeps the size and sha256 the task reported (`remote`).
  A later task whose item names one fetches it like an input; the commit lists it from
  the report (`remote_files`); a scratch folder the stage removes is `forget`-ten, and its
  objects deleted at the commit. Code in the driver never opens such a file: it hands
  the work to a task (stages.ray_tasks.map_where_files_are), or fetches the few bytes it reads
  (`bring_here`).
- A task that lands on the driver's own node runs the plain call in the driver's mirror,
  after fetching there what its item names that only the bucket holds.

What the driver itself writes (or a task on its node) is uploaded when a task elsewhere
is dispatched with an item naming it. A directory in an item stands for every file in it
at that moment: a task writing into its stage's folder does not fetch the files other
tasks of the same round write there.

Ray Train workers get the same treatment through `task_call_loop` (the loop's config is the
item). A worker cannot return a list of files, so it writes one to the bucket
(`<stage>/.uploads/<uuid>.json`), and the driver reads those after `fit`.

A task's private copy of a stage file it was given is a copy, or a hard link for a bulk
file (written once, only read: a dedup task reading every cleaned file copies nothing).

Files are trusted by sha256: a node's copy is used only if its record says it holds the
bytes the driver named, so a forced re-run's new weights of the same size are fetched
again, never mistaken for the old ones.

The corpus and task data the stages read outside the mirror (data_dir, ingest sources)
must be readable from every node: a URL or a shared mount.
"""

from __future__ import annotations

import bisect
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.bucket_fs import connection_options
from storage.file_tree import matches_any
from storage.node_transfer import transfer
from storage.node_transfer.item_paths import paths_under
from storage.node_transfer.task_call import JOURNAL, UPLOADS, FileState, TaskCall, TaskResult, current_node


@dataclass
class NodeTransfer:
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
    # the journal objects that record `remote` in the bucket (relative to the run's URL)
    journal: list[str] = field(default_factory=list)
    _driver_node: str | None = None

    def __post_init__(self) -> None:
        self.driver_root = Path(self.driver_root)
        self.stage_dir = Path(self.stage_dir)
        self.stage_rel = self.stage_dir.relative_to(self.driver_root).as_posix()

    @property
    def driver_node(self) -> str:
        if self._driver_node is None:
            self._driver_node = current_node()
        return self._driver_node

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.driver_root).as_posix()

    def _is_bulk(self, rel: str) -> bool:
        prefix = self.stage_rel + "/"
        return rel.startswith(prefix) and matches_any(rel[len(prefix):], self.bulk)

    def _bucket_only(self) -> _BucketOnly:
        """The files only the bucket holds now: committed inputs the driver did not
        fetch, and this stage's remote files it holds no copy of. Built once per
        dispatch (a stat per file), then looked up per path the items name."""
        files = {name: (self.known_sizes[name], digest) for name, digest in self.known.items()
                 if name in self.known_sizes}
        files.update(self.remote)
        return _BucketOnly({name: state for name, state in files.items()
                            if not (self.driver_root / name).is_file()})

    # -- before tasks are dispatched --------------------------------------------------------
    def dispatch(self, function: Callable, items: list[Any]) -> TaskCall:
        """The call to send in place of `function`: it names, for every path under the
        mirror that `items` mention, the files there now (held here or only in the
        bucket), with their digests. This stage's files among them that the driver wrote
        are uploaded first unless they are there already."""
        fs, root = transfer.bucket(self.url)
        listed: dict[str, list[Path]] = {}
        elsewhere: dict[str, dict[str, tuple[int, str]]] = {}
        folders: dict[str, tuple[str, ...]] = {}
        bucket_only = self._bucket_only()
        for reference in sorted({p for item in items for p in paths_under(item, self.driver_root)}):
            rel = self._rel(reference)
            elsewhere[rel] = bucket_only.at_or_under(rel)
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
                + tuple((name, size, digest) for name, (size, digest) in sorted(elsewhere[rel].items()))
                for rel, files in listed.items()}
        return TaskCall(function, self.url, str(self.driver_root), self.stage_rel,
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
        remote = self.remote.get(rel)  # a bulk file fetched here since: the bucket has it
        if remote is not None and transfer.holds(self.driver_root, rel, *remote):
            return rel, *remote
        return None

    # -- after they finished --------------------------------------------------------------
    def collect(self, result: Any) -> Any:
        """A task's value; the files it uploaded from another node come into this mirror,
        but for bulk files, which stay in the bucket (`remote`). A file the task only
        appended to gets those bytes appended here, so that tasks appending to one log
        side by side (fine-tuning tasks' metrics.jsonl) lose none."""
        if not isinstance(result, TaskResult):
            return result
        if result.uploaded:
            fs, root = transfer.bucket(self.url)
            whole = [(rel, size, digest) for rel, size, digest, _, tail in result.uploaded if tail is None]
            self._record_remote(fs, root, [entry for entry in whole if self._is_bulk(entry[0])])
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

    def _record_remote(self, fs, root: str, entries: list[FileState]) -> None:
        """Keep the reports of bulk files in the bucket too (`<stage>/.remote/*.json`): the
        driver's memory is their only other copy, and a driver killed mid-stage would
        otherwise redo, on its next run, every task whose output only the bucket holds."""
        if not entries:
            return
        name = f"{self.stage_rel}/{JOURNAL}/{time.time_ns()}-{uuid.uuid4().hex}.json"
        fs.pipe_file(transfer.key(root, name), json.dumps([list(entry) for entry in entries]).encode())
        self.journal.append(name)

    def restore_remote(self) -> int:
        """For a stage resumed after its driver stopped: take back the bulk files an
        earlier attempt's tasks reported (its journal) whose objects are still in the
        bucket with the reported size. Returns how many."""
        fs, root = transfer.bucket(self.url)
        prefix = transfer.key(root, self.stage_rel)
        try:
            listing = fs.find(prefix, detail=True)  # one listing: sizes of everything there
        except FileNotFoundError:
            return 0
        sizes = {path[len(root.rstrip("/")) + 1:]: info.get("size") for path, info in listing.items()}
        journals = sorted(rel for rel in sizes if rel.startswith(f"{self.stage_rel}/{JOURNAL}/"))
        for name in journals:
            for rel, size, digest in json.loads(fs.cat_file(transfer.key(root, name))):
                if sizes.get(rel) == size and self._is_bulk(rel):
                    self.remote[rel] = (size, digest)
            self.journal.append(name)
        return len(self.remote)

    def collect_worker_uploads(self) -> None:
        """What Ray Train workers on other nodes uploaded (their `.uploads` lists)."""
        fs, root = transfer.bucket(self.url)
        folder = transfer.key(root, f"{self.stage_rel}/{UPLOADS}")
        for listing in sorted(fs.glob(f"{folder}/*.json")):  # not tails/, which the lists name
            uploaded = tuple(tuple(entry) for entry in json.loads(fs.cat_file(listing)))
            self.collect(TaskResult(None, uploaded))
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
        self._bring(sorted({p for item in items for p in paths_under(item, self.driver_root)}))

    def bring_here(self, path: Path) -> None:
        """Download into the driver's mirror the files at or under `path` that only the
        bucket holds (bytes through the driver: for the few reads the driver must do)."""
        self._bring([Path(path)])

    def _bring(self, paths: list[Path]) -> None:
        bucket_only = self._bucket_only()
        wanted = {rel: state for path in paths for rel, state in bucket_only.at_or_under(self._rel(path)).items()}
        if wanted:
            fs, root = transfer.bucket(self.url)
            transfer.download(fs, root, self.driver_root, [(rel, digest) for rel, (_, digest) in sorted(wanted.items())],
                              {rel: size for rel, (size, _) in wanted.items()})

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
        """This stage's objects for the commit to delete: dropped files, and the journal
        (the manifest lists what it recorded)."""
        prefix = self.stage_rel + "/"
        return tuple(sorted(rel[len(prefix):] for rel in (*self.dropped, *self.journal)))


class _BucketOnly:
    """Files only the bucket holds (relative path -> (size, sha256)), found by path:
    names sorted once, so a folder's files are one range (a bisect) instead of a scan of
    every file per path an item names."""

    def __init__(self, files: dict[str, tuple[int, str]]):
        self.files, self.names = files, sorted(files)

    def at_or_under(self, rel: str) -> dict[str, tuple[int, str]]:
        found = {rel: self.files[rel]} if rel in self.files else {}
        inside = rel + "/"
        index = bisect.bisect_left(self.names, inside)
        while index < len(self.names) and self.names[index].startswith(inside):
            found[self.names[index]] = self.files[self.names[index]]
            index += 1
        return found
