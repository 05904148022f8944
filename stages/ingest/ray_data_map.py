"""Map a function over work items with Ray Data, results in item order, and let a failing
item's own exception (type and message, e.g. "file:line: ...") reach the caller.

Ray Data alone cannot do the last part: a map whose function raised fails the dataset
with RayTaskError(UserCodeException("UDF failed to process a data block.")) and the
original exception is dropped (re-raised `from None` inside Ray Data), and
`DataContext.raise_original_map_exception` keeps the type but appends Ray Data's retry
advice to the message and logs it as a Ray Data internal bug. So the function's exception
is caught in the worker and returned as the row's outcome; the driver raises it at its
place in item order: the first failing item wins, the same one on every run.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm


@dataclass(frozen=True)
class _Failure:
    error: BaseException
    remote_traceback: str


def _apply(row: dict, function: Callable[[Any], Any]) -> dict:
    """The Ray Data UDF: one row is one item; its outcome is the result or a _Failure.
    Both travel pickled (a binary column), so Ray Data does not try to make Arrow
    columns out of arbitrary Python objects."""
    from ray import cloudpickle

    try:
        outcome = function(cloudpickle.loads(row["item"]))
    except Exception as error:  # noqa: BLE001 - every error goes back to the driver
        remote_traceback = "".join(traceback.format_exception(error))
        try:
            cloudpickle.loads(cloudpickle.dumps(error))
        except Exception:  # noqa: BLE001 - an exception class that cannot round-trip
            error = RuntimeError(f"{type(error).__name__}: {error}")
        outcome = _Failure(error, remote_traceback)
    return {"index": row["index"], "outcome": cloudpickle.dumps(outcome)}


class _DropProgressBarsDisabledWarning(logging.Filter):
    """Ray Data warns once that its bars are off; ours (tqdm) replaces them on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Progress bars disabled" not in record.getMessage()


@contextlib.contextmanager
def _ordered_quiet_ray_data() -> Iterator[None]:
    """Datasets made in this block keep row order and leave progress to our tqdm bar;
    Ray Data's INFO chatter (start and finish of each execution) is off, its warnings
    and errors still show. Copying a DataContext warns about Ray's own deprecated
    fields, which no caller can act on: those warnings are dropped here."""
    from ray.data import DataContext

    data_logger = logging.getLogger("ray.data")
    progress_logger = logging.getLogger("ray.data._internal.progress")
    level, drop = data_logger.level, _DropProgressBarsDisabledWarning()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray\.data\.")
        data_context = DataContext.get_current().copy()
        data_context.execution_options.preserve_order = True  # rows come back in item order
        data_context.enable_progress_bars = False
        data_context.print_on_execution_start = False
        data_logger.setLevel(max(logging.WARNING, data_logger.getEffectiveLevel()))
        progress_logger.addFilter(drop)
        try:
            with DataContext.current(data_context):
                yield
        finally:
            progress_logger.removeFilter(drop)
            data_logger.setLevel(level)


def map_in_order(function: Callable[[Any], Any], items: Sequence[Any], *, desc: str,
                 num_cpus: float = 1, transfer=None) -> list[Any]:
    """[function(item) for item in items] as a Ray Data map, one block (one task) per
    item, at most as many at once as the cluster has CPUs / `num_cpus`.

    Needs a driver with Ray initialised. `function` must be a module-level function and
    each item must pickle (`transfer`: as stages.ray_tasks.map_tasks'). If items fail, the first failing one's exception is raised,
    with the worker's traceback as a note.
    """
    if not items:
        return []

    import ray
    from ray import cloudpickle
    from ray.data import TaskPoolStrategy

    from stages.ray_tasks import TASK_OPTIONS, transfer_for_tasks

    # An object-store run's tasks fetch and upload their files (storage.node_transfer).
    transfer = transfer_for_tasks(transfer)
    if transfer is not None:
        function = transfer.dispatch(function, list(items))
    cpus = ray.cluster_resources().get("CPU", 1)
    concurrency = max(1, min(len(items), int(cpus // num_cpus)))

    results = []
    with _ordered_quiet_ray_data():
        dataset = ray.data.from_items(
            [{"index": i, "item": cloudpickle.dumps(item)} for i, item in enumerate(items)],
            override_num_blocks=len(items),
        )
        with warnings.catch_warnings():
            # Ray Data retries a task without limit by default (max_retries -1), and Ray
            # an out-of-memory kill of any retried task: a failed worker fails the stage
            # (stages.ray_tasks). Ray 2.60 has no named parameter for retries, only the
            # `**ray_remote_args` it calls deprecated (removed in 2.64; ray is pinned).
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            dataset = dataset.map(_apply, fn_kwargs={"function": function}, num_cpus=num_cpus,
                                  compute=TaskPoolStrategy(size=concurrency), **TASK_OPTIONS)
        rows = iter(dataset.iter_rows())
        try:
            for row in tqdm(rows, total=len(items), desc=desc, unit="task", disable=None):
                assert row["index"] == len(results), "Ray Data returned rows out of order"
                outcome = cloudpickle.loads(row["outcome"])
                if isinstance(outcome, _Failure):
                    error = outcome.error
                    error.add_note(f"Raised in a Ray Data worker:\n{outcome.remote_traceback}")
                    raise error
                results.append(outcome if transfer is None else transfer.collect(outcome))
        finally:
            if hasattr(rows, "close"):  # stop the execution now, not when collected
                rows.close()
    return results
