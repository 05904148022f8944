"""The files the finetune stage reads, named so that moving data_dir changes nothing.

    input_files(experiment)   # {"glue_data/SST-2/dev.tsv": "/data/glue_data/SST-2/dev.tsv", ...}

The engine hashes them into the stage's fingerprint (`pipeline.input_files`); each task's
own fingerprint takes the digests of its own files (`task_input_files`), so editing
SST-2's dev.tsv re-trains SST-2 and copies every other task. Light on purpose: no torch.
"""

from __future__ import annotations

import os
from pathlib import Path

from stages.finetune.tasks import get_task
from storage.file_tree import local_tree

INIT_FROM = "finetune.init_from"


def task_input_files(name: str, data_dir: Path) -> dict[str, str]:
    """The task's files under data_dir; a required file that is absent is still listed
    (it hashes as missing), an absent optional one (SQuAD's train file) is not."""
    spec = get_task(name)
    required = set(spec.required_paths(data_dir))
    return {Path(os.path.relpath(path, data_dir)).as_posix(): str(path)
            for path in spec.input_paths(data_dir) if path in required or path.is_file()}


def init_from_files(init_from: str | None) -> dict[str, str]:
    return local_tree(init_from, INIT_FROM) if init_from else {}


def input_files(experiment) -> dict[str, str]:
    cfg = experiment.finetune
    files = init_from_files(cfg.init_from)
    if cfg.source == "files":
        for name in cfg.tasks:
            files.update(task_input_files(name, experiment.resolved_data_dir))
    return files
