"""A real build of DeepSpeed's CPU op (deepspeed_shm_comm) is SIGKILLed half-way, and the
next run still finishes: it removes the `lock` file torch left behind, says so, builds the
op, and DeepSpeed's own loader then reuses that op instead of compiling it again.

Without stages/training/native_ops.py the second run would wait in torch's
FileBaton.wait forever, printing nothing. Builds go into a temporary TORCH_EXTENSIONS_DIR
so that the project's own build in .venv/torch_extensions is left alone. Compiling the two
sources takes 80-100 CPU-seconds (226 s of the suite's wall time on 2 busy cores), so the
rerun starts from the compiled objects of that project build, copied in with ninja's
records of them after the kill: torch's ninja then only links. What is under test is our
lock recovery and DeepSpeed reusing the result, which a link exercises the same way (with
no project build to copy from, the rerun compiles everything).
"""

from __future__ import annotations

import json
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[2]
OP = "deepspeed_shm_comm"
BUILD_TIMEOUT_SECONDS = 600

# ensure_native_ops, then DeepSpeed's own load of the op, as deepspeed.initialize does it.
REUSE_SCRIPT = """
import json
from deepspeed.comm.torch import build_shm_op
from deepspeed.accelerator import get_accelerator
from stages.training.native_ops import ensure_native_ops

lines = []
op_dir = ensure_native_ops(echo=lines.append)
ours = get_accelerator().create_op_builder("ShareMemCommBuilder")._loaded_ops["deepspeed_shm_comm"]
theirs = build_shm_op()
print("RESULT" + json.dumps({"lines": lines, "op_dir": str(op_dir), "same_module": theirs is ours,
                             "library": theirs.__file__}))
"""


def build_env(extensions: Path) -> dict[str, str]:
    return {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "DS_ACCELERATOR": "cpu",
            "PYTHONPATH": str(REPO_ROOT)}


def kill_build_once_torch_holds_its_lock(extensions: Path) -> None:
    """Start `python -m stages.training.native_ops` and SIGKILL it, with the ninja and
    compilers it started, as soon as torch's FileBaton `lock` file exists. Ninja runs
    each compiler in a process group of its own, so the kill goes to the whole session."""
    torch_lock = extensions / OP / "lock"
    builder = subprocess.Popen([sys.executable, "-m", "stages.training.native_ops"], cwd=REPO_ROOT,
                               env=build_env(extensions), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not torch_lock.exists():
            assert builder.poll() is None, f"the build ended (exit {builder.returncode}) before torch took its lock"
            assert time.monotonic() < deadline, f"{torch_lock} never appeared"
            time.sleep(0.02)
    finally:
        kill_session(builder.pid)  # like a node or container going away
        builder.wait()


def kill_session(session_id: int) -> None:
    """SIGKILL every process of the session, until none is left (ninja may start a
    compiler while the list is read)."""
    import psutil

    while True:
        members = []
        for process in psutil.process_iter():
            try:
                if os.getsid(process.pid) == session_id and process.status() != psutil.STATUS_ZOMBIE:
                    members.append(process)
            except (ProcessLookupError, psutil.Error):
                continue
        if not members:
            return
        for process in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        psutil.wait_procs(members, timeout=5)


def copy_compiled_objects(op_dir: Path) -> bool:
    """Copy the project build's object files and ninja's records of them (not of the
    library) into `op_dir`; False when there is no project build to copy from."""
    from stages.training.native_ops import extensions_dir

    project_op_dir = extensions_dir() / OP
    objects = sorted(project_op_dir.glob("*.o"))
    if not objects or not (project_op_dir / ".ninja_deps").exists():
        return False
    for path in [*objects, project_op_dir / ".ninja_deps"]:
        shutil.copy2(path, op_dir / path.name)
    log = (project_op_dir / ".ninja_log").read_text().splitlines()
    header, entries = log[0], [line for line in log[1:] if line.split("\t")[3].endswith(".o")]
    (op_dir / ".ninja_log").write_text("\n".join([header, *entries]) + "\n")
    return True


def test_a_build_killed_midway_is_finished_by_the_next_run(tmp_path):
    extensions = tmp_path / "torch_extensions"
    kill_build_once_torch_holds_its_lock(extensions)
    copied = copy_compiled_objects(extensions / OP)
    torch_lock = extensions / OP / "lock"
    library = extensions / OP / f"{OP}.so"
    assert torch_lock.exists() and not library.exists()  # the state that used to hang every run

    started = time.monotonic()
    rerun = subprocess.run([sys.executable, "-m", "stages.training.native_ops"], cwd=REPO_ROOT,
                           env=build_env(extensions), capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_SECONDS)
    build_seconds = time.monotonic() - started
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    print(f"rebuild after the kill took {build_seconds:.0f} s ({'link only' if copied else 'full compile'})")
    assert f"WARNING: removed {torch_lock}" in rerun.stdout
    assert f"building DeepSpeed's CPU op {OP} (first run only" in rerun.stdout
    assert library.exists() and not torch_lock.exists()
    built_at = library.stat().st_mtime_ns

    # Every later run: quiet, and DeepSpeed's own load gets the very module we loaded.
    reuse = subprocess.run([sys.executable, "-c", REUSE_SCRIPT], cwd=REPO_ROOT, env=build_env(extensions),
                           capture_output=True, text=True, timeout=120)
    assert reuse.returncode == 0, reuse.stdout + reuse.stderr
    result = json.loads(reuse.stdout.split("RESULT", 1)[1])
    assert result["lines"] == []
    assert result["op_dir"] == str(extensions / OP)
    assert result["same_module"] and result["library"] == str(library)
    assert library.stat().st_mtime_ns == built_at  # loaded, not compiled again
