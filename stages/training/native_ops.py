"""DeepSpeed's native CPU op: built once per virtualenv, and never waited on in silence.

    env = extensions_env()          # {"TORCH_EXTENSIONS_DIR": ...}: launch.worker_env_vars adds it
    ensure_native_ops()             # on each worker before deepspeed.initialize (engine.py)
    python -m stages.training.native_ops     # `make install`: build it ahead of time

On its CPU accelerator DeepSpeed compiles its shared-memory collectives
(`deepspeed_shm_comm`, ShareMemCommBuilder) with torch.utils.cpp_extension the first time a
process initialises it: a minute or more, with no message. torch guards that build with a
`lock` file (torch.utils.file_baton.FileBaton) in the op's build directory; a process
killed mid-build leaves the file behind, and every later process then waits on it forever
without a word. torch's default build root (~/.cache/torch_extensions/py311_cpu) is also
shared by every virtualenv of the user, each rebuilding the op for its own torch.

So:
- The op is built under `extensions_dir()`: TORCH_EXTENSIONS_DIR when the user set it,
  else `<venv>/torch_extensions`. With TORCH_EXTENSIONS_DIR set, torch builds into
  `$TORCH_EXTENSIONS_DIR/<op name>/` (cpp_extension._get_build_directory).
- Builders take our own flock on `<extensions dir>/build.lock`, which records the holder
  (host, pid, op, since); a process waiting for it says what it waits for every 30 s.
  The kernel drops a flock when its holder dies, so this lock can never go stale.
- Holding it, a torch `lock` in the op directory was left by a build that died: any live
  builder in our directory holds our flock. Processes still running in the op directory
  (the ninja and compilers a killed build leaves orphaned) or holding torch's lock open (a
  build that bypassed us) are waited for first; then the file is removed with a warning.
- We then load the op through DeepSpeed's own builder, so DeepSpeed's load later in the
  same process returns that module (OpBuilder keeps loaded ops per process, by name)
  instead of compiling again.

Nothing heavy is imported at module load (the driver imports launch.py, which uses this).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

OP_BUILDER = "ShareMemCommBuilder"  # DeepSpeed's builder of deepspeed_shm_comm
OUR_LOCK_NAME = "build.lock"
TORCH_LOCK_NAME = "lock"  # FileBaton's file in cpp_extension._jit_compile
REPORT_EVERY_SECONDS = 30.0
# Another rank loading the built op holds the lock for ~0.1 s: a wait is only worth a line
# once it lasts (a real build takes minutes).
FIRST_REPORT_SECONDS = 5.0
CONSOLE_PREFIX = "[training]"  # how the driver's console knows a worker line as ours (pipeline.worker_console)

Echo = Callable[[str], object]


def print_now(line: str) -> None:
    # A Ray worker's stdout is a pipe: unflushed, a wait would look silent.
    print(f"{CONSOLE_PREFIX} {line}", flush=True)


def extensions_dir() -> Path:
    """Where torch builds extensions for this project: the user's TORCH_EXTENSIONS_DIR,
    else `torch_extensions` inside the running virtualenv (sys.prefix)."""
    user_dir = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(user_dir) if user_dir else Path(sys.prefix) / "torch_extensions"


def extensions_env() -> dict[str, str]:
    """Environment that makes torch (and so DeepSpeed) build into `extensions_dir()`."""
    return {"TORCH_EXTENSIONS_DIR": str(extensions_dir())}


def use_this_environments_ninja() -> None:
    """Put the interpreter's own bin folder (the venv's, which holds the `ninja` DeepSpeed
    depends on) first on PATH in this process. torch builds with whichever `ninja` PATH
    finds first, and two ninja versions disagree on the build log's command hashes: a
    shell with the venv activated and one without (or a Ray job whose PATH differs from
    the workers') then rebuilt the op in turn, about 45 s on two cores each time."""
    bin_dir = str(Path(sys.executable).parent)
    if not (Path(bin_dir) / "ninja").exists():
        return
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    os.environ["PATH"] = os.pathsep.join([bin_dir, *parts])


def ensure_native_ops(echo: Echo = print_now, *, report_every: float = REPORT_EVERY_SECONDS) -> Path | None:
    """Build or load DeepSpeed's CPU op in this process, before deepspeed.initialize needs it.

    Returns the op's build directory, or None where nothing is compiled: another
    accelerator than DeepSpeed's CPU one, an op DeepSpeed would not use here, or one
    built into the DeepSpeed wheel. Loading an already built op is quiet (~0.1 s); a real
    build says so first and afterwards says how long it took.
    """
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    use_this_environments_ninja()
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu":
        return None
    import deepspeed.ops
    from deepspeed.git_version_info import accelerator_name, installed_ops

    builder = accelerator.create_op_builder(OP_BUILDER)
    # The test deepspeed.comm.torch.build_shm_op applies: what DeepSpeed would not load,
    # we do not build either.
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    if builder.name in builder._loaded_ops or (
            installed_ops.get(builder.name, False) and accelerator_name == accelerator._name):
        builder.load(verbose=False)  # already in this process, or prebuilt: nothing to compile
        return None

    with exclusive_build(Path(os.environ["TORCH_EXTENSIONS_DIR"]), builder.name,
                         echo=echo, report_every=report_every) as op_dir:
        if not _is_built(builder, op_dir):
            echo(f"building DeepSpeed's CPU op {builder.name} (first run only, 1-3 min) in {op_dir} ...")
            started = time.monotonic()
            builder.load(verbose=False)
            echo(f"built DeepSpeed's CPU op {builder.name} in {time.monotonic() - started:.0f} s")
        else:
            builder.load(verbose=False)
    return op_dir


@contextlib.contextmanager
def exclusive_build(extensions: Path, op_name: str, *, echo: Echo = print_now,
                    report_every: float = REPORT_EVERY_SECONDS, poll_seconds: float = 0.5) -> Iterator[Path]:
    """Hold `<extensions>/build.lock` and hand back `<extensions>/<op_name>`, made safe to
    build in: no process left working there, no stale torch `lock` file."""
    try:
        extensions.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RuntimeError(
            f"cannot create {extensions} for DeepSpeed's compiled ops ({error.strerror}): set "
            "TORCH_EXTENSIONS_DIR to a writable folder in the job's environment") from error
    lock_path = extensions / OUR_LOCK_NAME
    op_dir = extensions / op_name
    with open(lock_path, "a+") as lock_file:
        _acquire(lock_file, lock_path, op_name, echo, report_every, poll_seconds)
        try:
            _record_holder(lock_file, op_name, op_dir)
            _clear_stale_torch_lock(op_dir, echo, report_every, poll_seconds)
            yield op_dir
        finally:
            lock_file.truncate(0)
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _acquire(lock_file, lock_path: Path, op_name: str, echo: Echo, report_every: float,
             poll_seconds: float) -> None:
    """flock `lock_file`, saying whom we wait for once the wait lasts (FIRST_REPORT_SECONDS,
    or `report_every` if shorter), then every `report_every` s."""
    started = time.monotonic()
    next_report = started + min(FIRST_REPORT_SECONDS, report_every)
    while True:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        now = time.monotonic()
        if now >= next_report:
            echo(f"waiting for {_describe_holder(lock_file, op_name)} (waited {now - started:.0f} s; "
                 f"lock: {lock_path})")
            next_report = now + report_every
        time.sleep(poll_seconds)


def _record_holder(lock_file, op_name: str, op_dir: Path) -> None:
    lock_file.truncate(0)  # "a+" appends: truncating first makes this the whole record
    json.dump({"host": socket.gethostname(), "pid": os.getpid(), "op": op_name,
               "directory": str(op_dir), "since": time.time()}, lock_file)
    lock_file.flush()


def _describe_holder(lock_file, op_name: str) -> str:
    lock_file.seek(0)
    try:
        holder = json.loads(lock_file.read())
    except ValueError:  # the holder has the lock but has not written its record yet
        return f"another process building DeepSpeed's CPU op {op_name}"
    since = time.strftime("%H:%M:%S", time.localtime(holder["since"]))
    return (f"pid {holder['pid']} on {holder['host']} to finish building or loading DeepSpeed's "
            f"CPU op {holder['op']} in {holder['directory']} (holding the build lock since {since})")


def _clear_stale_torch_lock(op_dir: Path, echo: Echo, report_every: float, poll_seconds: float) -> None:
    torch_lock = op_dir / TORCH_LOCK_NAME
    if not torch_lock.exists():
        return
    started = time.monotonic()
    next_report = started
    while pids := _processes_building_in(op_dir):
        now = time.monotonic()
        if now >= next_report:
            echo(f"waiting for process(es) {', '.join(map(str, pids))} still building in {op_dir} "
                 f"(waited {now - started:.0f} s)")
            next_report = now + report_every
        time.sleep(poll_seconds)
    with contextlib.suppress(FileNotFoundError):  # it finished and released torch's lock itself
        torch_lock.unlink()
        echo(f"WARNING: removed {torch_lock}: a build of {op_dir.name} was killed before it finished, "
             "and every later run would have waited on this file forever; building again")


def _processes_building_in(op_dir: Path) -> list[int]:
    """Processes on this host working in `op_dir` (ninja and the compiler run there) or
    holding torch's lock file open (a live FileBaton)."""
    import psutil

    directory = str(op_dir.resolve())
    torch_lock = os.path.join(directory, TORCH_LOCK_NAME)
    pids = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.cwd() == directory or any(f.path == torch_lock for f in process.open_files()):
                pids.append(process.pid)
        except psutil.Error:  # gone meanwhile, a zombie, or another user's: not ours to judge
            continue
    return pids


def _is_built(builder, op_dir: Path) -> bool:
    """Whether torch would only load the op: its library exists and is newer than the sources."""
    library = op_dir / f"{builder.name}.so"
    if not library.exists():
        return False
    sources = [Path(builder.deepspeed_src_path(path)) for path in builder.sources()]
    return all(library.stat().st_mtime >= source.stat().st_mtime for source in sources)


def main() -> None:
    """Build the op now (make install), for DeepSpeed's CPU accelerator."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    started = time.monotonic()
    print_now(f"DeepSpeed's CPU op: checking {extensions_dir()} ...")
    op_dir = ensure_native_ops()
    where = op_dir if op_dir is not None else "nothing to build (not DeepSpeed's CPU accelerator, or prebuilt)"
    print_now(f"DeepSpeed's CPU op ready in {time.monotonic() - started:.0f} s: {where}")


if __name__ == "__main__":
    main()
