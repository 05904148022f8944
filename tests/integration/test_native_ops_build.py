"""A real build of DeepSpeed's CPU op (deepspeed_shm_comm) is SIGKILLed half-way, and the
next run still finishes: it removes the `lock` file torch left behind, says so, builds the
op, and DeepSpeed's own loader then reuses that op instead of compiling it again.

Without stages/training/native_ops.py the second run would wait in torch's
FileBaton.wait forever, printing nothing. Builds go into a temporary TORCH_EXTENSIONS_DIR
so that the project's own build in .venv/torch_extensions is left alone. One real build
takes about a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
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
    compilers it started, as soon as torch's FileBaton `lock` file exists."""
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
        os.killpg(builder.pid, signal.SIGKILL)  # like a node or container going away
        builder.wait()


def test_a_build_killed_midway_is_finished_by_the_next_run(tmp_path):
    extensions = tmp_path / "torch_extensions"
    kill_build_once_torch_holds_its_lock(extensions)
    torch_lock = extensions / OP / "lock"
    library = extensions / OP / f"{OP}.so"
    assert torch_lock.exists() and not library.exists()  # the state that used to hang every run

    started = time.monotonic()
    rerun = subprocess.run([sys.executable, "-m", "stages.training.native_ops"], cwd=REPO_ROOT,
                           env=build_env(extensions), capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_SECONDS)
    build_seconds = time.monotonic() - started
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    print(f"rebuild after the kill took {build_seconds:.0f} s")
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
