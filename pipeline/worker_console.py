"""The console of a run shows the pipeline's own lines; Ray's, DeepSpeed's and torch's stay
in Ray's log files.

Ray writes every worker's stdout and stderr to files in its session's logs folder
(`worker-<id>-<job>-<pid>.out` / `.err`) and by default also prints every line on the
driver's console: "(RayTrainWorker pid=5078) Reporting training result 1: ..." dicts,
controller resource lines, DeepSpeed's "built successfully" once per process, a torch
FutureWarning per rank, "[repeated 7x across cluster]". Here the driver still receives the
workers' lines (from every node, as Ray sends them) but shows only

- the pipeline's own: `[<stage>] ...` (rank 0's progress lines, a stage's notes) and
  `[training] ...` (stages/training: DeepSpeed's op build);
- warnings and errors: a logging level of WARNING or above, a Python warning, an
  exception's last line; each with the worker's log file, where the rest is.

The rest stays in the log files, whose folder the run names once when Ray starts.
`pretrain run -v` (PRETRAIN_VERBOSE=1, which the workers inherit) shows everything as Ray
prints it.

Why not `ray.init(log_to_driver=False)`: then no worker line reaches the driver, and rank
0's progress and the workers' warnings could only be read from files, which on a cluster
lie on other nodes. Ray's list of log handlers is private
(`ray._private.ray_logging.global_worker_stdstream_dispatcher`); where it is missing,
`log_to_driver=False` keeps the console quiet and the log folder is named instead.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from pipeline.graph import STAGE_NAMES

VERBOSE_ENV = "PRETRAIN_VERBOSE"
HANDLER_NAME = "pretrain_console"
RAY_HANDLER_NAME = "ray_print_logs"  # what ray.init registers when log_to_driver

OUR_LINE = re.compile(r"^\[(?:%s)\]" % "|".join(re.escape(n) for n in (*STAGE_NAMES, "training")))
# Logging levels as Ray, DeepSpeed and Python's logging write them, Python warnings
# ("file.py:83: FutureWarning: ..."), and an exception's last line ("RuntimeError: ...").
WARNING_LINE = re.compile(
    r"\b(?:WARNING|ERROR|CRITICAL|FATAL)\b"
    r"|\b\w*Warning: "
    r"|^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b(?::|$)")

# Messages Ray's driver logs while it starts or joins a cluster, silenced by a filter on the
# logger that writes each (the run prints its own line, naming the log folder instead).
DRIVER_NOISE = {
    # On by default for clusters that ray.init starts: a notice, not a fault.
    "ray._private.authentication.authentication_token_setup": ("Token authentication is enabled",),
    "ray._private.worker": ("Started a local Ray instance", "Connected to Ray cluster",
                            "Connecting to existing Ray cluster"),
}


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def set_verbose(on: bool) -> None:
    """`-v`: the workers (launch.worker_env_vars) and a sweep's points inherit it."""
    if on:
        os.environ[VERBOSE_ENV] = "1"


class _DropMessages(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


@contextmanager
def quiet_ray_driver() -> Iterator[None]:
    """Ray's start-up notices (token auth on, the dashboard line) dropped while inside."""
    filters = [(logging.getLogger(name), _DropMessages(starts)) for name, starts in DRIVER_NOISE.items()]
    for logger, drop in filters:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger, drop in filters:
            logger.removeFilter(drop)


def worker_log_file(logs_dir: Path | None, pid: object, is_err: bool) -> Path | None:
    """The worker's log file on this node: worker-<worker id>-<job id>-<pid>.out/.err."""
    if logs_dir is None:
        return None
    matches = sorted(logs_dir.glob(f"worker-*-{pid}.{'err' if is_err else 'out'}"))
    return matches[-1] if matches else None


class _TwoStreams:
    """A Ray Train worker's stdout reaches the driver twice, from its .out and its .err
    file: a line shown from one stream is dropped when it comes from the other."""

    def __init__(self, memory: int = 1000):
        self.unmatched: dict[tuple, Counter] = defaultdict(Counter)
        self.order: deque[tuple] = deque()
        self.memory = memory

    def seen_on_the_other(self, source: tuple, is_err: bool, text: str) -> bool:
        other = self.unmatched[(*source, not is_err)]
        if other[text]:
            other[text] -= 1
            return True
        self.unmatched[(*source, is_err)][text] += 1
        self.order.append(((*source, is_err), text))
        if len(self.order) > self.memory:  # forget the oldest: its twin is long overdue
            key, old = self.order.popleft()
            if self.unmatched[key][old]:
                self.unmatched[key][old] -= 1
        return False


class WorkerConsole:
    """Ray's handler of worker output batches ({"ip", "pid", "is_err", "lines",
    "actor_name", "task_name", "localhost"}): our lines to `out` as they are, warnings and
    errors to `err` with where they come from; nothing else."""

    def __init__(self, logs_dir: Path | None, out: TextIO | None = None, err: TextIO | None = None):
        self.logs_dir = logs_dir
        self.out, self.err = out, err
        self.named: set[tuple] = set()  # log files already named on the console
        self.streams = _TwoStreams()

    def __call__(self, batch: dict) -> None:
        source, is_err = (batch.get("ip"), batch.get("pid")), bool(batch.get("is_err"))
        for line in batch.get("lines", ()):
            text = line.rstrip()
            ours = OUR_LINE.match(text)
            if not ours and not WARNING_LINE.search(text):
                continue
            if self.streams.seen_on_the_other(source, is_err, text):
                continue
            if ours:
                self._write(self.out or sys.stdout, text)
            else:
                self._write(self.err or sys.stderr, f"{self._source(batch)}: {text.strip()}")

    def _source(self, batch: dict) -> str:
        pid, ip, is_err = batch.get("pid"), batch.get("ip"), bool(batch.get("is_err"))
        who = batch.get("actor_name") or batch.get("task_name") or "worker"
        source = f"[{who} pid {pid}]"
        key = (ip, pid, is_err)
        if key in self.named:
            return source
        self.named.add(key)
        remote = ip and batch.get("localhost") and ip != batch["localhost"]
        log_file = None if remote else worker_log_file(self.logs_dir, pid, is_err)
        if log_file is not None:
            return f"{source} (log {log_file})"
        err_flag = " --err" if is_err else ""
        return f"{source} (log: `ray logs worker --pid {pid} --node-ip {ip}{err_flag}`)"

    @staticmethod
    def _write(stream: TextIO, text: str) -> None:
        stream.write(text + "\n")
        stream.flush()


def relay_available() -> bool:
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher  # noqa: F401
    except ImportError:
        return False
    return True


def install_relay(logs_dir: Path | None) -> Callable[[], None]:
    """Put a WorkerConsole in place of Ray's printer of worker lines (ray.init ran with
    log_to_driver=True); returns what undoes it."""
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    dispatcher.remove_handler(RAY_HANDLER_NAME)
    dispatcher.add_handler(HANDLER_NAME, WorkerConsole(logs_dir))
    return lambda: dispatcher.remove_handler(HANDLER_NAME)
