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

from stages.staging.node_staging import NodeStaging, run_staged

_force_in_process = False
_staging: NodeStaging | None = None


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


@contextlib.contextmanager
def staged_through_bucket(staging: NodeStaging | None) -> Iterator[None]:
    """Inside this block, tasks (`map_tasks`, stages.ingest.ray_data_map) and Ray Train
    workers (stages.training.launch) run on any node, their files going through the
    bucket (stages.staging.node_staging). The engine opens it around each stage of an
    object-store run; None leaves everything as it is."""
    global _staging
    previous, _staging = _staging, staging or _staging
    try:
        yield
    finally:
        _staging = previous


def active_staging() -> NodeStaging | None:
    """The running stage's staging when Ray is up and the workdir is an object store."""
    return _staging if ray_is_up() else None


def map_tasks(function: Callable[..., Any], items: Sequence[Any], *, desc: str,
              num_cpus: float = 1, num_gpus: float = 0) -> list[Any]:
    """[function(item) for item in items], one Ray task per item when Ray is up.

    `function` must be a module-level function (Ray pickles it by reference) and each
    item must pickle; pass paths, not big objects. `num_cpus` and `num_gpus` are what
    each task reserves.
    """
    if not ray_is_up():
        return [function(item) for item in tqdm(items, desc=desc, unit="task", disable=None)]

    import ray

    # max_retries re-runs a task whose worker died; a task that raised is not retried.
    staging = active_staging()
    if staging is None:
        remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=2)(function)
        refs = [remote.remote(item) for item in items]
    else:
        call = ray.put(staging.dispatch(function, list(items)))  # sent once, not per task
        remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=2)(run_staged)
        refs = [remote.remote(call, item) for item in items]
    pending = list(refs)
    try:
        with tqdm(total=len(refs), desc=desc, unit="task", disable=None) as progress:
            while pending:  # in completion order, to fail fast and move the progress bar
                done, pending = ray.wait(pending, num_returns=1)
                ray.get(done)
                progress.update(len(done))
    except ray.exceptions.RayTaskError as error:
        for ref in pending:
            ray.cancel(ref)
        # The task's own exception (a user error says what, where and what to do), with
        # the remote traceback chained to it.
        raise error.cause from error
    results = ray.get(refs)
    return results if staging is None else [staging.collect(result) for result in results]
