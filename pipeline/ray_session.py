"""Start or connect to Ray on first need, and shut down only what we started.

`ray.address` unset starts a new embedded Ray for this run, always
(`ray.init(address="local")`). A bare `ray.init()` would first join whatever cluster
`ray start --head` last started on this machine (its address is kept in
/tmp/ray/ray_current_cluster): silently when that head is alive, and when it has died,
by waiting on it for many minutes. Joining a cluster is asked for: `auto` (the cluster
started on this machine, or RAY_ADDRESS) or an address.

Before joining, the head is checked to answer on its port: Ray's own connect retries
forever when nothing listens there. Starting fails now and then on a loaded machine
(Ray waits a fixed 30 s for its raylet to register), so a failed start is retried once
after a pause; then `RayStartError` carries the cause in one line and what to try.

The console shows the pipeline's own lines and the workers' warnings; the rest of what
Ray's workers print goes to Ray's log files, whose folder is named once when Ray starts
(pipeline.worker_console; `-v` prints everything).
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import nullcontext
from pathlib import Path
from urllib.parse import urlparse

from pipeline import worker_console
from pipeline.interrupts import reinstall as reinstall_sigterm_handler

REPO_ROOT = Path(__file__).resolve().parents[1]
START_ATTEMPTS = 2
RETRY_DELAY_S = 5.0
CONNECT_CHECK_TIMEOUT_S = 5.0


class RayStartError(RuntimeError):
    """Ray could not be started or reached. Not a config mistake: the same config may
    work on a quieter machine or once the head is up. `hint` says what to try."""

    def __init__(self, cause: str, hint: str):
        super().__init__(f"could not start Ray ({cause})")
        self.cause = cause
        self.hint = hint


class RaySession:
    def __init__(self, ray_config, *, retry_delay_s: float = RETRY_DELAY_S, verbose: bool | None = None):
        self.ray_config = ray_config
        self.retry_delay_s = retry_delay_s
        self.started = False
        # -v (PRETRAIN_VERBOSE): Ray prints its own and every worker's lines, as it does alone.
        self.verbose = worker_console.verbose() if verbose is None else verbose
        self.logs_dir: Path | None = None
        self._undo_relay = None

    def ensure_started(self, echo=print) -> None:
        import ray  # imported here: `plan`, `status` and cached reruns never pay for it

        if ray.is_initialized():
            return
        address = self.ray_config.address
        if not address and os.environ.get("RAY_ADDRESS"):
            echo("RAY_ADDRESS is set but ray.address is not: starting an embedded Ray "
                 "(-o ray.address=auto joins the cluster RAY_ADDRESS names)")
        for attempt in range(1, START_ATTEMPTS + 1):
            children_before = _child_processes()
            try:
                self._start_once(ray, address, echo)
                break
            except Exception as error:  # noqa: BLE001 - any start failure gets one retry
                self._remove_relay()
                _end_a_failed_start(ray, children_before)
                if attempt == START_ATTEMPTS:
                    raise RayStartError(_one_line(error), _hint(address)) from error
                echo(f"could not start Ray ({_one_line(error)}); "
                     f"trying once more in {self.retry_delay_s:.0f} s")
                time.sleep(self.retry_delay_s)
        self.started = True
        reinstall_sigterm_handler()  # ray.init put its own (sys.exit) in place of ours

    def _start_once(self, ray, address: str | None, echo) -> None:
        # Workers must import `stages` whether or not the project is pip-installed.
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
        # Quiet: worker lines reach the driver and a WorkerConsole picks ours and the
        # warnings; without Ray's handler list to do that, they stay in the log files.
        relay = not self.verbose and worker_console.relay_available()
        options = {} if self.verbose or relay else {"log_to_driver": False}
        quiet = nullcontext() if self.verbose else worker_console.quiet_ray_driver()
        if address:
            echo(f"connecting to Ray at {address}")
            check_head_answers(address)
            with quiet:
                context = ray.init(address=address, runtime_env=runtime_env, **options)
        else:
            # "local": a new instance even when another cluster runs on this machine.
            # The dashboard stays on: Ray Train V2 polls controller state through it,
            # and logs an error every second without it.
            with quiet:
                context = ray.init(address="local", num_cpus=self.ray_config.num_cpus,
                                   runtime_env=runtime_env, **options)
        session_dir = (getattr(context, "address_info", None) or {}).get("session_dir")
        self.logs_dir = Path(session_dir) / "logs" if session_dir else None
        if relay:
            self._undo_relay = worker_console.install_relay(self.logs_dir)
        where = f"Ray's log files: {self.logs_dir}" if self.logs_dir else "Ray's log files on each node"
        shown = "" if self.verbose else " (-v shows them here)"
        if address:
            echo(f"connected to Ray; workers' output is in {where}{shown}")
        else:
            echo(f"started local Ray ({ray.cluster_resources().get('CPU', 0):.0f} CPUs); "
                 f"workers' output is in {where}{shown}")

    def __enter__(self) -> "RaySession":
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray

            ray.shutdown()
        self._remove_relay()

    def _remove_relay(self) -> None:
        if self._undo_relay is not None:  # Ray's dispatcher outlives the session in this process
            self._undo_relay()
            self._undo_relay = None


def check_head_answers(address: str) -> None:
    """Raise ConnectionError unless something accepts TCP connections where `address`
    (host:port, 'auto', or ray://host:port) points. Ray resolves 'auto' and 127.0.0.1
    the same way when it connects."""
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]  # what ray.init("auto") joins (e.g. in a Ray Job)
    if "://" in address:
        parsed = urlparse(address)
        host, port = parsed.hostname, parsed.port
    else:
        from ray._private.services import canonicalize_bootstrap_address

        # 'auto' -> the cluster `ray start` last recorded on this machine; raises
        # ConnectionError when there is none.
        resolved = canonicalize_bootstrap_address(address)
        host, _, port_text = (resolved or "").rpartition(":")
        port = int(port_text) if port_text.isdigit() else None
    if not host or port is None:
        return  # an address form we cannot check: leave it to ray.init
    try:
        socket.create_connection((host, port), timeout=CONNECT_CHECK_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConnectionError(f"nothing answers at {host}:{port}: {reason}") from None


def _hint(address: str | None) -> str:
    if not address:
        return ("the embedded Ray (ray.address unset) did not start. On a busy machine (`uptime`) "
                "its processes can miss Ray's 30 s start-up limit: run the same command again when "
                "the load drops, or lower ray.num_cpus; `ray stop` ends leftover Ray processes "
                "(every Ray instance on this machine)")
    if address == "auto":
        return ("ray.address is 'auto': it joins the cluster that `ray start --head` started on this "
                "machine (or RAY_ADDRESS). Is that head up (`ray status`)? Leave ray.address unset "
                "to run on an embedded Ray instead")
    return (f"is the Ray head at ray.address={address} up and reachable from here (`ray status` on "
            "the head)? Leave ray.address unset to run on an embedded Ray instead")


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _child_processes() -> set:
    import psutil

    return set(psutil.Process().children(recursive=True))


def _end_a_failed_start(ray, children_before: set) -> None:
    """A start that failed half-way can leave a GCS or raylet running: end the processes
    it started (ours, by PID) so the retry begins clean and nothing outlives us."""
    import psutil

    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the processes are ended below
        pass
    leftovers = _child_processes() - children_before
    for process in leftovers:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(leftovers, timeout=10)
