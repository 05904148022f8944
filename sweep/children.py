"""A sweep's points (and its shared stages) as `pretrain run` child processes, joined to
the sweep's Ray: started at most N at a time, their output appended to a log with stage
lines and errors echoed under the point's name, their states kept in sweep.json, and all
of them stopped together on demand (`PointRunner.stop`).

Each child leads its own process group, so that a Ctrl-C typed in the terminal reaches
the driver alone and each child is stopped once, by the driver: SIGTERM to its group (a
`pretrain run` stops as on Ctrl-C: committed checkpoints stay, stage locks are released),
then SIGKILL CHILD_STOP_S later, or at a second Ctrl-C. A child also stops by itself when
the driver dies without stopping it (SIGKILL): pipeline/interrupts.py `exit_with_parent`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.graph import STAGE_NAMES
from pipeline.interrupts import PARENT_ENV
from sweep.expand import Sweep, SweepPoint

SHARED_LOG = "shared-stages.log"
POINT_LOG = "sweep.log"
STAGE_LINE = re.compile(r"^\[(%s)\] " % "|".join(STAGE_NAMES))
# What a point's console shows of its stages, besides errors: not a deselected stage
# (`[ingest] not selected (...)`) or rank 0's progress lines (`[pretrain] step 20/40 ...`):
# with every point's progress interleaved, the sweep's console would be unreadable; they
# stay in the point's sweep.log.
HIDDEN_STAGE_LINE = re.compile(r"^\[\w+\] (?:not selected \(|(?:[\w.-]+: )?(?:step|batch) \d+/\d+ )")
# How long stopped children get to stop as on Ctrl-C before they are killed.
CHILD_STOP_S = 60.0
# A child's exit status when it stopped on Ctrl-C or SIGTERM (130, 143; negative: the signal
# ended it before Python could).
INTERRUPTED_CODES = (130, 143, -signal.SIGINT, -signal.SIGTERM)


class PointRunner:
    """Runs points (and shared stages) as `pretrain run` children and stops them all on
    demand (`stop`)."""

    def __init__(self, sweep: Sweep, index, python: str, ray_address: str | None, echo,
                 selection_args: list[str] = ()):
        """`index`: the sweep's SweepIndex (sweep/run.py), told each point's state."""
        self.sweep, self.index, self.python = sweep, index, python
        self.ray_address, self.echo = ray_address, echo
        self.selection_args = list(selection_args)
        self.lock = threading.Lock()
        self.children: set[subprocess.Popen] = set()
        self.stopping = False

    def command(self, point: SweepPoint, extra: list[str]) -> list[str]:
        overrides = [*point.cli_overrides, *([f"ray.address={self.ray_address}"] if self.ray_address else [])]
        return [self.python, "-m", "pipeline.cli", "run", str(Path(self.sweep.config_path).resolve()),
                *[arg for o in overrides for arg in ("-o", o)], "--wait-lock",
                "--sweep-name", self.sweep.name, *extra]

    def run_shared(self, shared: dict[str, list[str]]) -> bool:
        by_name = {p.name: p for p in self.sweep.points}
        for representative, stages in shared.items():
            self.echo(f"[shared] {', '.join(stages)}: once for every point that reads them "
                      f"(in {representative}'s config)")
            only = [arg for stage in stages for arg in ("--only", stage)]
            code, _, _ = self._child(by_name[representative], only, SHARED_LOG, "shared")
            if code != 0:
                self.echo(f"[shared] {', '.join(stages)} failed (exit {code})")
                return False
        return True

    def run_points(self, points: list[SweepPoint], limit: int) -> list[bool]:
        """Run `points`, at most `limit` at a time; whether each finished. On Ctrl-C (in
        this, the main thread) every running child is stopped before this returns."""
        pool = ThreadPoolExecutor(max_workers=limit)
        try:
            futures = [pool.submit(self.run_point, point) for point in points]
            return [future.result() for future in futures]
        except BaseException:
            self.stop()  # before the pool is shut down: it waits for its running points
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def run_point(self, point: SweepPoint) -> bool:
        if self.stopping:
            return False  # stopped before it started: stays pending
        started = time.time()
        self.index.update(point.name, state="running", started=started)
        self.echo(f"[{point.name}] running ({_overrides_text(point)})")
        log = f"{point.name}/{POINT_LOG}"
        code, ran, reused = self._child(point, self.selection_args, log, point.name)
        if code is None:  # stopped before its child started
            self.index.update(point.name, state="pending")
            return False
        ended = time.time()
        state = ("done" if code == 0 else
                 "interrupted" if self.stopping or code in INTERRUPTED_CODES else "failed")
        self.index.update(point.name, state=state, ended=ended, wall_seconds=ended - started,
                          exit_code=code, ran=ran, reused=reused)
        self.echo(f"[{point.name}] {state} in {ended - started:.0f}s"
                  + ("" if code == 0 else f" (exit {code}; log {self.sweep.location(log)})"))
        return code == 0

    def stop(self) -> None:
        """Start no more children, and stop the running ones as Ctrl-C would."""
        with self.lock:
            self.stopping = True
            children = list(self.children)
        _stop_children(children)

    def _child(self, point: SweepPoint, extra: list[str], log_name: str, prefix: str):
        """Run one `pretrain run`, its output appended to the log `log_name` (relative to
        the sweep's root; published when the child ends); stage lines and errors are
        echoed with the point's name. -> (exit code, stages run, stages reused); the code
        is None when the sweep was being stopped and no child started."""
        log_path = self.sweep.root / log_name
        log_path.parent.mkdir(parents=True, exist_ok=True)
        ran, reused = [], []
        # The child leads its own process group (a terminal's Ctrl-C reaches this driver
        # only, which stops each child once) and stops itself if this driver dies.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(self.command(point, extra))}\n")
            log.flush()
            with self.lock:
                if self.stopping:
                    return None, ran, reused
                child = subprocess.Popen(self.command(point, extra), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, env=env,
                                         start_new_session=True)
                self.children.add(child)
            try:
                for line in child.stdout:
                    log.write(line)
                    log.flush()
                    stage_line = STAGE_LINE.match(line)
                    if stage_line:
                        stage = stage_line.group(1)
                        if " cached (" in line:
                            reused.append(stage)
                        elif " done in " in line:
                            ran.append(stage)
                    if (stage_line and not HIDDEN_STAGE_LINE.match(line)) or line.startswith("error:"):
                        self.echo(f"[{prefix}] {line.rstrip()}")
                code = child.wait()
            except BaseException:
                # Interrupted while reading it (the main thread runs the shared stages):
                # stop it, and keep its last words in the log.
                _stop_children([child])
                log.write(child.stdout.read())
                raise
            finally:
                with self.lock:
                    self.children.discard(child)
        self.sweep.publish(log_name)
        return code, ran, reused


def _stop_children(children: list[subprocess.Popen]) -> None:
    """SIGTERM each child's process group (a `pretrain run` stops as on Ctrl-C), wait up to
    CHILD_STOP_S for all of them, then SIGKILL the groups of those still running. A second
    Ctrl-C while waiting skips the wait."""
    for child in children:
        _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + CHILD_STOP_S
    try:
        for child in children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        for child in children:
            _signal_group(child, signal.SIGKILL)


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    # Only a child not yet reaped: its pid, and so its group's id, cannot have been reused.
    if child.poll() is None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass


def _overrides_text(point: SweepPoint) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in point.overrides.items())
