"""The build lock around DeepSpeed's native CPU op (stages/training/native_ops.py), without
compiling anything: a stale torch `lock` file is cleared with a warning, and a process
that waits for a live builder says whom it waits for instead of hanging in silence.
The real build, killed and rerun, is tests/integration/test_native_ops.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stages.training.launch import worker_env_vars
from stages.training.native_ops import exclusive_build, extensions_dir

OP = "deepspeed_shm_comm"
REPO_ROOT = Path(__file__).resolve().parents[2]

# Holds the build lock for `seconds` like a builder in another process would, says
# "held" once it has it, and writes the file `marker` just before it lets go.
HOLDER_SCRIPT = """
import sys, time
from pathlib import Path
from stages.training.native_ops import exclusive_build
with exclusive_build(Path(sys.argv[1]), sys.argv[2], echo=lambda line: None):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
    Path(sys.argv[4]).write_text("letting go")
"""


def test_a_stale_torch_lock_with_no_builder_is_removed_with_a_warning(tmp_path):
    torch_lock = tmp_path / OP / "lock"
    torch_lock.parent.mkdir()
    torch_lock.touch()  # what a build SIGKILLed inside torch's FileBaton leaves behind
    lines: list[str] = []

    with exclusive_build(tmp_path, OP, echo=lines.append, poll_seconds=0.05) as op_dir:
        assert op_dir == tmp_path / OP
        assert not torch_lock.exists()
    # the warning alone: nothing was waited for
    assert len(lines) == 1 and lines[0].startswith("WARNING: removed") and str(torch_lock) in lines[0]


def test_nothing_to_clear_is_quiet(tmp_path):
    lines: list[str] = []
    with exclusive_build(tmp_path, OP, echo=lines.append):
        pass
    with exclusive_build(tmp_path, OP, echo=lines.append):  # the lock is free again afterwards
        pass
    assert lines == []


def test_a_live_builder_is_waited_for_and_named(tmp_path):
    letting_go = tmp_path / "letting-go"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER_SCRIPT, str(tmp_path), OP, "2",
                               str(letting_go)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lines: list[str] = []
        with exclusive_build(tmp_path, OP, echo=lines.append, report_every=0.5, poll_seconds=0.05):
            assert letting_go.exists()  # we only got in after the holder let go
    finally:
        holder.kill()
        holder.wait()
    assert len(lines) >= 2, lines  # at once, then every report_every seconds
    first = lines[0]
    assert first.startswith(f"waiting for pid {holder.pid} on ")
    assert f"DeepSpeed's CPU op {OP} in {tmp_path / OP}" in first and "build lock since" in first
    assert str(tmp_path / "build.lock") in first


def test_processes_left_working_in_the_op_directory_are_waited_for(tmp_path):
    # A killed builder's ninja and compilers live on in the op directory, without our
    # lock and without torch's: removing torch's lock under them would start a second
    # build over theirs.
    op_dir = tmp_path / OP
    op_dir.mkdir()
    (op_dir / "lock").touch()
    orphan = subprocess.Popen(["sleep", "1.5"], cwd=op_dir)
    lines: list[str] = []
    try:
        with exclusive_build(tmp_path, OP, echo=lines.append, report_every=0.5, poll_seconds=0.05):
            assert orphan.poll() is not None
            assert not (op_dir / "lock").exists()
    finally:
        orphan.kill()
        orphan.wait()
    assert lines[0].startswith(f"waiting for process(es) {orphan.pid} still building in {op_dir}")
    assert lines[-1].startswith("WARNING: removed") and str(op_dir / "lock") in lines[-1]


def test_an_unwritable_extensions_dir_says_what_to_set(tmp_path):
    blocker = tmp_path / "file"
    blocker.touch()
    with pytest.raises(RuntimeError, match="set TORCH_EXTENSIONS_DIR to a writable folder"):
        with exclusive_build(blocker / "torch_extensions", OP):
            pass


def test_workers_build_inside_the_venv_unless_the_user_chose_a_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    for use_gpu in (False, True):
        env = worker_env_vars(use_gpu)
        assert env["TORCH_EXTENSIONS_DIR"] == str(Path(sys.prefix) / "torch_extensions")
    assert Path(sys.prefix) != Path(sys.base_prefix), "tests run in the project's virtualenv"

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_dir() == tmp_path
    assert worker_env_vars(False)["TORCH_EXTENSIONS_DIR"] == str(tmp_path)


def test_importing_the_module_loads_neither_torch_nor_deepspeed():
    code = ("import sys, stages.training.native_ops, stages.training.launch; "
            "print(sorted({'torch', 'deepspeed'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_builds_use_the_interpreters_own_ninja_whatever_path_says(monkeypatch):
    # Two ninja versions disagree on the build log's command hashes: a process finding the
    # system's and one finding the venv's rebuilt the op in turn (~45 s each).
    from stages.training.native_ops import use_this_environments_ninja

    bin_dir = str(Path(sys.executable).parent)
    assert (Path(bin_dir) / "ninja").exists(), "DeepSpeed's ninja dependency is not in the venv"
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", bin_dir, "/bin"]))
    use_this_environments_ninja()
    assert os.environ["PATH"].split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]
    assert shutil.which("ninja") == str(Path(bin_dir) / "ninja")
