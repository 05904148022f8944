"""Map a function over work items: as Ray tasks when the driver has started Ray, in this
process otherwise.

The data stages (ingest, tokenizer, dataset) are plain functions that a unit test calls
without Ray; on a cluster the same call fans out over the nodes. Results always come
back in item order, so a stage's output never depends on which task finished first.

Ray is imported only when the driver already imported and started it: this module costs
nothing in a process without Ray. It lives outside `stages.data` all the same, whose code
never imports Ray (the import contracts in pyproject.toml).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from storage.node_transfer.driver import NodeTransfer
from storage.node_transfer.task_call import run_task_call

_force_in_process = False

# Every Ray task the pipeline starts: Ray itself retries nothing. A task that raised is
# an application error and would raise again; and with max_retries above 0, Ray retries a
# task its memory monitor killed without any limit (RAY_task_oom_retries is -1 by
# default), so an evaluation that needed 21 GB ran again and again and its stage never
# ended. map_tasks resubmits a task whose worker or node died (an out-of-memory kill
# included) at most SYSTEM_RETRIES times, then fails the stage saying what happened where.
TASK_OPTIONS = {"max_retries": 0, "retry_exceptions": False}
SYSTEM_RETRIES = 2


class RayTaskFailed(RuntimeError):
    """A Ray task's worker (or node) died more often than SYSTEM_RETRIES allows; the
    message names the task and item and says what ran out."""


def ray_is_up() -> bool:
    """Whether this process is a Ray driver with a live connection (and not told otherwise)."""
    ray = sys.modules.get("ray")
    return not _force_in_process and ray is not None and ray.is_initialized()


@contextlib.contextmanager
def run_in_process() -> Iterator[None]:
    """Run every `map_tasks` inside this block in this process even when Ray is up:
    for debugging with pdb, and for tests that compare both paths' outputs."""
    global _force_in_process
    previous, _force_in_process = _force_in_process, True
    try:
        yield
    finally:
        _force_in_process = previous


def transfer_for_tasks(transfer: NodeTransfer | None) -> NodeTransfer | None:
    """The stage's node transfer (StageContext.node_transfer: an object-store run's) when
    its tasks and Ray Train workers run on any node, i.e. when Ray is up."""
    return transfer if ray_is_up() else None


def map_where_files_are(function: Callable[..., Any], items: Sequence[Any], *, desc: str,
                        num_cpus: float = 1, transfer: NodeTransfer | None = None) -> list[Any]:
    """[function(item) for item in items] where the files are: as Ray tasks in an
    object-store run (a task on any node fetches what its item names from the bucket, so
    the driver never holds the stage's bulk files), in this process otherwise (the files
    are right here, and a task would only cost a worker's start)."""
    if transfer_for_tasks(transfer) is not None:
        return map_tasks(function, items, desc=desc, num_cpus=num_cpus, transfer=transfer)
    # Not through run_in_process: its flag is global, and fine-tuning calls this from
    # several threads at once (one flag restored out of order stayed set for the session).
    return _in_this_process(function, items, desc, transfer)


def forget_files(path: Any, transfer: NodeTransfer | None) -> None:
    """Tell an object-store run's node transfer that the stage removed `path` (a folder of
    scratch files): what tasks elsewhere wrote under it, which only the bucket holds, is
    not an output, and the commit deletes it there. Nothing to do otherwise."""
    if transfer is not None:
        transfer.forget(path)


def bring_to_driver(path: Any, transfer: NodeTransfer | None) -> None:
    """Fetch into the driver's mirror the files at or under `path` that only the bucket
    holds (an input's bulk files), for code that must read a few of them in the driver
    (the first validation rows). Nothing to do outside an object-store run."""
    if transfer is not None:
        transfer.bring_here(path)


def map_tasks(function: Callable[..., Any], items: Sequence[Any], *, desc: str,
              num_cpus: float = 1, num_gpus: float = 0, transfer: NodeTransfer | None = None) -> list[Any]:
    """[function(item) for item in items], one Ray task per item when Ray is up.

    `function` must be a module-level function (Ray pickles it by reference) and each
    item must pickle; pass paths, not big objects. `num_cpus` and `num_gpus` are what
    each task reserves. `transfer`: the stage's StageContext.node_transfer, which an
    object-store run's tasks on other nodes fetch and upload their files through.
    """
    if not ray_is_up():
        return _in_this_process(function, items, desc, transfer)

    import ray

    transfer = transfer_for_tasks(transfer)
    if transfer is None:
        remote, arguments = ray.remote(function), [(item,) for item in items]
    else:
        call = ray.put(transfer.dispatch(function, list(items)))  # sent once, not per task
        remote, arguments = ray.remote(run_task_call), [(call, item) for item in items]
    remote = remote.options(num_cpus=num_cpus, num_gpus=num_gpus, **TASK_OPTIONS)
    name = getattr(function, "__qualname__", repr(function))
    errors = ray.exceptions
    retried = (errors.OutOfMemoryError, errors.WorkerCrashedError, errors.NodeDiedError, errors.ObjectLostError)
    refs = [remote.remote(*args) for args in arguments]
    attempts = [1] * len(refs)
    index_of = {ref: index for index, ref in enumerate(refs)}
    pending = list(refs)
    try:
        with tqdm(total=len(refs), desc=desc, unit="task", disable=None) as progress:
            while pending:  # in completion order, to fail fast and move the progress bar
                done, pending = ray.wait(pending, num_returns=1)
                index = index_of[done[0]]
                try:
                    ray.get(done)
                except ray.exceptions.RayTaskError:
                    raise
                except retried as failure:
                    if attempts[index] > SYSTEM_RETRIES:
                        raise RayTaskFailed(describe_failure(failure, name, index, len(refs), desc,
                                                             attempts[index])) from failure
                    attempts[index] += 1
                    refs[index] = remote.remote(*arguments[index])
                    index_of[refs[index]] = index
                    pending.append(refs[index])
                    continue
                progress.update(len(done))
    except ray.exceptions.RayTaskError as error:
        _cancel(ray, pending)
        # The task's own exception (a user error says what, where and what to do), with
        # the remote traceback chained to it.
        raise error.cause from error
    except BaseException:
        _cancel(ray, pending)
        raise
    results = ray.get(refs)
    return results if transfer is None else [transfer.collect(result) for result in results]


def _in_this_process(function: Callable[..., Any], items: Sequence[Any], desc: str,
                     transfer: NodeTransfer | None) -> list[Any]:
    if transfer is not None:  # an object-store run's bulk inputs, in this process's mirror
        transfer.bring_items_here(list(items))
    return [function(item) for item in tqdm(items, desc=desc, unit="task", disable=None)]


def _cancel(ray: Any, refs: list[Any]) -> None:
    for ref in refs:
        ray.cancel(ref)


def describe_failure(failure: BaseException, task: str, index: int, count: int, desc: str, attempts: int) -> str:
    """One line: which task, what happened to it (out of memory, a dead worker or node),
    how often, and what to try."""
    where = f"Ray task {task} ({index + 1} of {count}, {desc.strip()})"
    cause = f"{type(failure).__name__}: {_first_line(failure)}"
    times = f"{attempts} time{'s' if attempts > 1 else ''}"
    import ray

    if isinstance(failure, ray.exceptions.OutOfMemoryError):
        return (f"{where} ran out of memory: Ray's memory monitor killed its worker, {times} ({cause}). "
                "Give each task less to hold at once (a smaller batch size, fewer examples), or run "
                "fewer tasks per node")
    if isinstance(failure, ray.exceptions.WorkerCrashedError):
        return (f"{where}: its worker process died, {times} ({cause}). A worker killed by the "
                "operating system's out-of-memory killer dies this way: look for 'Killed process' "
                "in `dmesg` and give each task less to hold at once")
    return f"{where} failed, {times} ({cause})"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else "no message"
