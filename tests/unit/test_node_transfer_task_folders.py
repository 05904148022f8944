"""A task's private folder on a node outlives the task only when its process died before
cleaning up; the next task on the node removes such folders, never a live task's."""

from __future__ import annotations


def test_a_dead_tasks_private_folder_is_removed_and_a_live_ones_kept(tmp_path):
    import subprocess
    import sys

    from storage.node_transfer.transfer import remove_dead_task_folders, task_folder

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    dead = tmp_path / ".node-transfer" / "tasks" / f"{finished.stdout.strip()}-0123abcd"
    live = task_folder(tmp_path)
    for folder in (dead, live):
        (folder / "ingest/fp/staging").mkdir(parents=True)
    remove_dead_task_folders(tmp_path)
    assert not dead.exists() and live.is_dir()
